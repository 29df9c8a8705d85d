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
	"github.com/sondeprobe/sonde/scheduler"
)

const configUsage = `Usage: sonde config check [-json] [-endpoints] [-shard i/N] FILE

Validates FILE and prints every check's effective settings (after its preset)
with its detection windows, every pool with its targets and policy, and the
probe streams and probe rates left after deduplication; with -shard, the
targets, streams and probe rates of that shard. Exits 2 when FILE is not
valid.
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
	var shard config.Shard
	shardFlag(fs, &shard, "show only shard `i/N` of the targets, as sonde run -shard i/N probes them")
	if err := fs.Parse(args[1:]); err != nil {
		return usageError(err)
	}
	if fs.NArg() != 1 {
		fmt.Fprint(stderr, configUsage)
		return usageError(errors.New("config check: want exactly one FILE"))
	}
	file := fs.Arg(0)
	cfg, err := config.Load(file, config.LoadOptions{Context: ctx, Shard: shard})
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
	Shard        int              `json:"shard"`  // the shard shown, i of…
	Shards       int              `json:"shards"` // …N: targets, streams and rates are the shard's
	Checks       []checkReport    `json:"checks"`
	Pools        []poolReport     `json:"pools"`
	Targets      int              `json:"targets"`       // unique (address, port, check)
	ProbeStreams int              `json:"probe_streams"` // streams after deduplication
	ProbeRate    rateReport       `json:"probe_rate"`
	Endpoints    []endpointReport `json:"endpoints,omitempty"` // with -endpoints
	Metrics      metricsReport    `json:"metrics"`
}

// checkReport is one check's effective settings and windows: its probe
// settings as config holds them, its timing in seconds. For a window check,
// rise and fall are the equivalent consecutive thresholds: rise = k of W2
// (required successes), fall = k of W1 (size - required + 1).
type checkReport struct {
	Name   string  `json:"name"`
	Preset *string `json:"preset"`
	Port   *uint16 `json:"port"` // null: every target gives its own
	config.Probe
	IntervalSeconds         float64           `json:"interval_seconds"`
	TimeoutSeconds          float64           `json:"timeout_seconds"`
	Rise                    int               `json:"rise"`
	Fall                    int               `json:"fall"`
	Window                  *scheduler.Window `json:"window"`
	FailureWindowSeconds    float64           `json:"failure_window_seconds"`            // W1
	SuccessWindowSeconds    float64           `json:"success_window_seconds"`            // W2 with r = timeout
	OnsetWindowSeconds      float64           `json:"failure_window_from_onset_seconds"` // W3
	InitialState            scheduler.State   `json:"initial_state"`
	FastRecheckSeconds      float64           `json:"fast_recheck_interval_seconds"`
	UnhealthyIntervalSecond float64           `json:"unhealthy_interval_seconds"`
	JitterSeconds           float64           `json:"jitter_seconds"`
	ProbeRate               float64           `json:"probe_rate_per_target"` // highest probes/s one target receives
	ProbeClass              int               `json:"probe_class"`
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
		Shard:        cfg.Shard.Index,
		Shards:       cfg.Shard.Shards(),
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
	r := checkReport{
		Name:                    c.Name,
		Probe:                   c.Probe,
		IntervalSeconds:         c.Interval.Seconds(),
		TimeoutSeconds:          c.Timeout.Seconds(),
		Rise:                    c.Rise,
		Fall:                    c.Fall,
		FailureWindowSeconds:    c.FailureWindow().Seconds(),
		SuccessWindowSeconds:    c.SuccessWindow(c.Timeout).Seconds(),
		OnsetWindowSeconds:      c.FailureWindowFromOnset().Seconds(),
		InitialState:            c.Initial,
		FastRecheckSeconds:      c.FastRecheck.Seconds(),
		UnhealthyIntervalSecond: c.UnhealthyInterval.Seconds(),
		JitterSeconds:           c.Jitter.Seconds(),
		ProbeRate:               c.ProbeRate(),
		ProbeClass:              c.Class,
	}
	if c.Preset != "" {
		r.Preset = &c.Preset
	}
	if p := c.DefaultPort(); p != 0 {
		r.Port = &p
	}
	if c.Window.Size > 0 {
		r.Window = &c.Window
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
	fmt.Fprintln(w)
	if r.Shards > 1 {
		fmt.Fprintf(w, "shard %d/%d: ", r.Shard, r.Shards)
	}
	fmt.Fprintf(w, "%d unique targets, %d probe streams after deduplication\n", r.Targets, r.ProbeStreams)
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
	if c.Protocol == config.TCP {
		add("tcp_mode", c.TCPMode.String())
	} else {
		parts = append(parts, c.Method+" "+c.Path)
		add("healthy", c.HealthyStatus.String())
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
		add("auth_token from file", c.AuthToken.SecretFile)
		add("auth_token from env", c.AuthToken.SecretEnv)
		add("tls.ca_file", c.TLS.CAFile)
		add("tls.cert_file", c.TLS.CertFile)
		if c.TLS.InsecureSkipVerify {
			parts = append(parts, "tls.insecure_skip_verify")
		}
	}
	if c.IPFamily != config.IPAny {
		add("ip_family", c.IPFamily.String())
	}
	if c.SourceAddress.IsValid() {
		add("source_address", c.SourceAddress.String())
	}
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
