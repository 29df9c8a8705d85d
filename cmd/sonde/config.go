package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sondeprobe/sonde/config"
)

const configUsage = `Usage: sonde config check [-json] [-endpoints] FILE

Validates FILE and prints every check's effective settings (after its preset)
with its detection windows, every pool with its targets and policy, and the
probe streams and probe rates left after deduplication. Exits 2 when FILE is
not valid.
`

// runConfig runs "sonde config check".
func runConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprint(stderr, configUsage)
		if len(args) == 0 {
			return usageError(errors.New("config: missing subcommand check"))
		}
		return usageError(fmt.Errorf("config: unknown subcommand %q", args[0]))
	}
	fs := flag.NewFlagSet("config check", flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() { fmt.Fprint(fs.Output(), configUsage); fs.PrintDefaults() }
	asJSON := fs.Bool("json", false, "print JSON instead of tables")
	endpoints := fs.Bool("endpoints", false, "list the probe rate of every endpoint")
	if err := fs.Parse(args[1:]); err != nil {
		return usageError(err)
	}
	if fs.NArg() != 1 {
		fmt.Fprint(stderr, configUsage)
		return usageError(errors.New("config check: want exactly one FILE"))
	}
	file := fs.Arg(0)
	cfg, err := config.Load(file, config.LoadOptions{Context: ctx})
	if err != nil {
		if errors.Is(err, config.ErrInvalid) {
			err = fmt.Errorf("%s: %w", file, err)
		}
		return usageError(err)
	}
	rep := newConfigReport(cfg, *endpoints)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.writeText(stdout)
}

// configReport is the output of "sonde config check"; its JSON form is the
// -json output.
type configReport struct {
	Checks       []checkReport    `json:"checks"`
	Pools        []poolReport     `json:"pools"`
	Targets      int              `json:"targets"`       // unique (address, port, check)
	ProbeStreams int              `json:"probe_streams"` // streams after deduplication
	ProbeRate    rateReport       `json:"probe_rate"`
	Endpoints    []endpointReport `json:"endpoints,omitempty"` // with -endpoints
	Metrics      metricsReport    `json:"metrics"`
}

// checkReport is one check's effective settings and windows. For a window
// check, rise and fall are the equivalent consecutive thresholds: rise = k of
// W2 (required successes), fall = k of W1 (size - required + 1).
type checkReport struct {
	Name                    string            `json:"name"`
	Preset                  *string           `json:"preset"`
	Protocol                string            `json:"protocol"`
	Port                    *uint16           `json:"port"` // null: every target gives its own
	IntervalSeconds         float64           `json:"interval_seconds"`
	TimeoutSeconds          float64           `json:"timeout_seconds"`
	Rise                    int               `json:"rise"`
	Fall                    int               `json:"fall"`
	Window                  *windowReport     `json:"window"`
	FailureWindowSeconds    float64           `json:"failure_window_seconds"`            // W1
	SuccessWindowSeconds    float64           `json:"success_window_seconds"`            // W2 with r = timeout
	OnsetWindowSeconds      float64           `json:"failure_window_from_onset_seconds"` // W3
	InitialState            string            `json:"initial_state"`
	FastRecheckSeconds      float64           `json:"fast_recheck_interval_seconds"`
	UnhealthyIntervalSecond float64           `json:"unhealthy_interval_seconds"`
	JitterSeconds           float64           `json:"jitter_seconds"`
	ProbeRate               float64           `json:"probe_rate_per_target"` // highest probes/s one target receives
	ProbeClass              int               `json:"probe_class"`
	IPFamily                string            `json:"ip_family"`
	SourceAddress           string            `json:"source_address,omitempty"`
	TCPMode                 string            `json:"tcp_mode,omitempty"`
	Method                  string            `json:"method,omitempty"`
	Path                    string            `json:"path,omitempty"`
	HealthyStatus           string            `json:"healthy_status,omitempty"`
	BodyContains            string            `json:"body_contains,omitempty"`
	MaxBodyBytes            int               `json:"max_body_bytes,omitempty"`
	Host                    string            `json:"host,omitempty"`
	SNI                     string            `json:"sni,omitempty"`
	UserAgent               string            `json:"user_agent,omitempty"`
	Headers                 map[string]string `json:"headers,omitempty"`
	AuthToken               *authTokenReport  `json:"auth_token,omitempty"`
	TLS                     *tlsReport        `json:"tls,omitempty"`
}

// authTokenReport says where the probe token's secret comes from, never the
// secret itself.
type authTokenReport struct {
	SecretFile string `json:"secret_file,omitempty"`
	SecretEnv  string `json:"secret_env,omitempty"`
}

type tlsReport struct {
	CAFile             string `json:"ca_file,omitempty"`
	CertFile           string `json:"cert_file,omitempty"`
	KeyFile            string `json:"key_file,omitempty"`
	ServerName         string `json:"server_name,omitempty"`
	InsecureSkipVerify bool   `json:"insecure_skip_verify"`
}

type windowReport struct {
	Size     int `json:"size"`
	Required int `json:"required"`
}

type poolReport struct {
	Name                 string  `json:"name"`
	Check                string  `json:"check"`
	Targets              int     `json:"targets"`
	Disabled             int     `json:"disabled"`
	MaxUnhealthyPercent  int     `json:"max_unhealthy_percent"`
	FailOpen             bool    `json:"fail_open"`
	LatencyMarginSeconds float64 `json:"latency_margin_seconds"`
}

type rateReport struct {
	Endpoints      int     `json:"endpoints"`        // endpoints (address:port) that receive probes
	MaxPerEndpoint float64 `json:"max_per_endpoint"` // probes/s on the busiest endpoint
	MaxEndpoint    string  `json:"max_endpoint,omitempty"`
	Total          float64 `json:"total"` // probes/s over all endpoints
}

type endpointReport struct {
	Endpoint string  `json:"endpoint"`
	Rate     float64 `json:"probes_per_second"`
}

type metricsReport struct {
	PerTarget bool `json:"per_target"`
}

func newConfigReport(cfg *config.Config, endpoints bool) *configReport {
	rep := &configReport{
		Targets:      len(cfg.Targets),
		ProbeStreams: cfg.Streams(),
		Metrics:      metricsReport{PerTarget: cfg.Metrics.PerTarget},
		Checks:       make([]checkReport, 0, len(cfg.Checks)),
		Pools:        make([]poolReport, 0, len(cfg.Pools)),
	}
	for _, c := range cfg.Checks {
		rep.Checks = append(rep.Checks, newCheckReport(c))
	}
	for _, p := range cfg.Pools {
		rep.Pools = append(rep.Pools, poolReport{
			Name: p.Name, Check: p.Check, Targets: len(p.Members), Disabled: len(p.Disabled),
			MaxUnhealthyPercent: p.MaxUnhealthyPercent, FailOpen: p.FailOpen,
			LatencyMarginSeconds: p.LatencyMargin.Seconds(),
		})
	}
	rs := cfg.ProbeRates()
	rep.ProbeRate = rateReport{Endpoints: rs.Endpoints, MaxPerEndpoint: rs.Max, Total: rs.Total}
	if rs.Endpoints > 0 {
		rep.ProbeRate.MaxEndpoint = rs.MaxEndpoint.String()
	}
	if endpoints {
		for _, e := range cfg.EndpointRates() {
			rep.Endpoints = append(rep.Endpoints, endpointReport{Endpoint: e.Endpoint.String(), Rate: e.Rate})
		}
	}
	return rep
}

func newCheckReport(c *config.Check) checkReport {
	sc := c.Sched()
	r := checkReport{
		Name:                    c.Name,
		Protocol:                c.Protocol.String(),
		IntervalSeconds:         c.Interval.Seconds(),
		TimeoutSeconds:          c.Timeout.Seconds(),
		Rise:                    c.Rise,
		Fall:                    c.Fall,
		FailureWindowSeconds:    sc.FailureWindow().Seconds(),
		SuccessWindowSeconds:    sc.SuccessWindow(sc.Timeout).Seconds(),
		OnsetWindowSeconds:      sc.FailureWindowFromOnset().Seconds(),
		InitialState:            c.Initial.String(),
		FastRecheckSeconds:      c.FastRecheck.Seconds(),
		UnhealthyIntervalSecond: c.UnhealthyInterval.Seconds(),
		JitterSeconds:           c.Jitter.Seconds(),
		ProbeRate:               sc.ProbeRate(),
		ProbeClass:              c.Class,
		IPFamily:                c.IPFamily.String(),
		Method:                  c.Method,
		Path:                    c.Path,
		BodyContains:            c.BodyContains,
		Host:                    c.Host,
		SNI:                     c.SNI,
		UserAgent:               c.UserAgent,
		Headers:                 c.Headers,
	}
	if c.Preset != "" {
		r.Preset = &c.Preset
	}
	if p := c.DefaultPort(); p != 0 {
		r.Port = &p
	}
	if c.Window.Size > 0 {
		r.Window = &windowReport{Size: c.Window.Size, Required: c.Window.Required}
	}
	if t := c.AuthToken; t != nil {
		r.AuthToken = &authTokenReport{SecretFile: t.SecretFile, SecretEnv: t.SecretEnv}
	}
	if t := c.TLS; t != nil {
		r.TLS = &tlsReport{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	}
	if c.SourceAddress.IsValid() {
		r.SourceAddress = c.SourceAddress.String()
	}
	if c.Protocol == config.TCP {
		r.TCPMode = c.TCPMode.String()
	} else {
		r.HealthyStatus = c.HealthyStatus.String()
		r.MaxBodyBytes = c.MaxBodyBytes
	}
	return r
}

// writeText prints the report as aligned tables.
func (r *configReport) writeText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tPRESET\tPROTOCOL\tPORT\tINTERVAL\tTIMEOUT\tEVALUATION\tINITIAL\tW1 FAIL\tW2 RECOVER\tW3 ONSET\tRATE/TARGET\tCLASS")
	for _, c := range r.Checks {
		eval := fmt.Sprintf("rise %d fall %d", c.Rise, c.Fall)
		if c.Window != nil {
			eval = fmt.Sprintf("window %d of %d", c.Window.Required, c.Window.Size)
		}
		if c.FastRecheckSeconds > 0 {
			eval += ", recheck " + secs(c.FastRecheckSeconds)
		}
		if c.UnhealthyIntervalSecond > 0 {
			eval += ", unhealthy every " + secs(c.UnhealthyIntervalSecond)
		}
		if c.JitterSeconds > 0 {
			eval += ", jitter " + secs(c.JitterSeconds)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s/s\t%d\n",
			c.Name, orDash(deref(c.Preset)), c.Protocol, portText(c.Port), secs(c.IntervalSeconds), secs(c.TimeoutSeconds),
			eval, c.InitialState, secs(c.FailureWindowSeconds), secs(c.SuccessWindowSeconds), secs(c.OnsetWindowSeconds),
			rate(c.ProbeRate), c.ProbeClass)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "CHECK\tPROBE")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\n", c.Name, probeText(c))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "POOL\tCHECK\tTARGETS\tDISABLED\tMAX UNHEALTHY\tFAIL OPEN\tLATENCY MARGIN")
	for _, p := range r.Pools {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d%%\t%t\t%s\n", p.Name, p.Check, p.Targets, p.Disabled,
			p.MaxUnhealthyPercent, p.FailOpen, secs(p.LatencyMarginSeconds))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%d unique targets, %d probe streams after deduplication\n", r.Targets, r.ProbeStreams)
	pr := r.ProbeRate
	fmt.Fprintf(w, "probe rate: %d endpoints, at most %s/s on one endpoint", pr.Endpoints, rate(pr.MaxPerEndpoint))
	if pr.MaxEndpoint != "" {
		fmt.Fprintf(w, " (%s)", pr.MaxEndpoint)
	}
	fmt.Fprintf(w, ", %s/s in total\n", rate(pr.Total))
	if len(r.Endpoints) > 0 {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\nENDPOINT\tPROBES/S")
		for _, e := range r.Endpoints {
			fmt.Fprintf(tw, "%s\t%s\n", e.Endpoint, rate(e.Rate))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "per-target metrics: %t\n", r.Metrics.PerTarget)
	return err
}

// probeText describes what one probe of the check sends and accepts.
func probeText(c checkReport) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+" "+v)
		}
	}
	if c.Protocol == "tcp" {
		add("tcp_mode", c.TCPMode)
	} else {
		parts = append(parts, c.Method+" "+c.Path)
		add("healthy", c.HealthyStatus)
		if c.BodyContains != "" {
			add("body_contains", strconv.Quote(c.BodyContains))
			add("max_body_bytes", strconv.Itoa(c.MaxBodyBytes))
		}
		add("host", c.Host)
		add("sni", c.SNI)
		if c.UserAgent != "" {
			add("user_agent", strconv.Quote(c.UserAgent))
		}
		for _, k := range slices.Sorted(maps.Keys(c.Headers)) {
			add("header", k+": "+strconv.Quote(c.Headers[k]))
		}
		if t := c.AuthToken; t != nil {
			if t.SecretFile != "" {
				add("auth_token from file", t.SecretFile)
			} else {
				add("auth_token from env", t.SecretEnv)
			}
		}
		if t := c.TLS; t != nil {
			add("tls.ca_file", t.CAFile)
			add("tls.cert_file", t.CertFile)
			if t.InsecureSkipVerify {
				parts = append(parts, "tls.insecure_skip_verify")
			}
		}
	}
	if c.IPFamily != "any" {
		add("ip_family", c.IPFamily)
	}
	add("source_address", c.SourceAddress)
	return strings.Join(parts, ", ")
}

func secs(s float64) string {
	return strconv.FormatFloat(s, 'f', -1, 64) + "s"
}

func rate(r float64) string {
	return strconv.FormatFloat(r, 'g', 4, 64)
}

func portText(p *uint16) string {
	if p == nil {
		return "-"
	}
	return strconv.Itoa(int(*p))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
