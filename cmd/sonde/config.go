package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/config/discovery"
	"github.com/sondeprobe/sonde/config/settings"
	"github.com/sondeprobe/sonde/probe/endpoint"
	"github.com/sondeprobe/sonde/server/remediate"
)

const configUsage = `Usage: sonde config check [-json] [-endpoints] [-shard i/N] FILE

Validates FILE ("-" for standard input; any other input that is not a
regular file, such as a pipe, is read to its end too, and relative paths in
a config read that way are relative to the current directory) and prints every check's effective settings (after its preset)
with its cadence and detection windows, every pool with its targets and
policy, its discovery sources and the host names that do not resolve, every
remediation with its budget and the instances it covers, and the probe
streams and probe rates left after deduplication; with -shard, the targets,
streams and probe rates of that shard. Discovery sources are not run: their
targets are not counted. Exits 2 when FILE is not valid. Warnings about a
valid FILE (secret files other users can read) go to stderr.
`

// runConfig runs "sonde config check".
func runConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runConfigWith(ctx, args, os.Stdin, stdout, stderr)
}

// runConfigWith is runConfig reading "-" from stdin.
func runConfigWith(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprint(stderr, configUsage)
		if len(args) == 0 {
			return usageError(errors.New("config: missing subcommand check"))
		}
		return usageError(fmt.Errorf("config: unknown subcommand %q", args[0]))
	}
	fs := newFlagSet("config check", configUsage, stdout)
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
	cfg, err := loadOneShot(ctx, file, stdin, config.LoadOptions{Context: ctx, Shard: shard, Resolver: &endpoint.DNSResolver{}})
	if err != nil {
		if errors.Is(err, config.ErrInvalid) {
			err = fmt.Errorf("%s: %w", file, err)
		}
		return usageError(err)
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(stderr, "sonde: warning: %s: %s\n", file, w)
	}
	rep := newConfigReport(cfg, *endpoints)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.writeText(stdout)
}

// loadOneShot loads the config a one-shot command names: standard input for
// "-", a stream read to its end for any input that is not a regular file
// (a pipe, /dev/stdin, a FIFO: kubectl kustomize … | sonde config check -),
// and a regular file as the daemon loads it.
func loadOneShot(ctx context.Context, file string, stdin io.Reader, opt config.LoadOptions) (*config.Config, error) {
	var data []byte
	var err error
	switch st, serr := os.Stat(file); {
	case file == "-":
		data, err = config.ReadStream(ctx, "standard input", stdin)
	case serr == nil && !st.Mode().IsRegular() && !st.IsDir():
		r := &openOnRead{path: file}
		defer r.close()
		data, err = config.ReadStream(ctx, file, r)
	default:
		return config.Load(file, opt)
	}
	if err != nil {
		return nil, err
	}
	return config.Parse(data, "", opt)
}

// openOnRead opens its file at the first Read, so that the open of a FIFO
// that waits for a writer happens where the read may be abandoned.
type openOnRead struct {
	path string
	mu   sync.Mutex
	f    *os.File
	done bool
}

func (o *openOnRead) Read(b []byte) (int, error) {
	o.mu.Lock()
	f, done := o.f, o.done
	o.mu.Unlock()
	if done {
		return 0, os.ErrClosed
	}
	if f == nil {
		var err error
		if f, err = os.Open(o.path); err != nil { // may wait for a writer: without the lock
			return 0, err
		}
		o.mu.Lock()
		if o.done {
			o.mu.Unlock()
			f.Close()
			return 0, os.ErrClosed
		}
		o.f = f
		o.mu.Unlock()
	}
	return f.Read(b)
}

// close closes the file if it was opened; a Read after it fails. It does
// not wait for an open in progress.
func (o *openOnRead) close() {
	o.mu.Lock()
	f := o.f
	o.done = true
	o.mu.Unlock()
	if f != nil {
		f.Close()
	}
}

// configReport is the output of "sonde config check"; its JSON form is the
// -json output.
type configReport struct {
	Shard        int                 `json:"shard"`  // the shard shown, i of…
	Shards       int                 `json:"shards"` // …N: targets, streams and rates are the shard's
	Checks       []settings.Check    `json:"checks"`
	Pools        []poolReport        `json:"pools"`
	Remediations []remediationReport `json:"remediations"`
	Targets      int                 `json:"targets"`       // unique (address, port, check)
	ProbeStreams int                 `json:"probe_streams"` // streams after deduplication
	ProbeRate    rateReport          `json:"probe_rate"`
	Endpoints    []endpointReport    `json:"endpoints,omitempty"` // with -endpoints
	Metrics      metricsReport       `json:"metrics"`
	Webhooks     []webhookReport     `json:"webhooks,omitempty"`
}

// webhookReport is one webhook: where events go and which.
type webhookReport struct {
	Name           string   `json:"name"`
	URL            string   `json:"url"`
	Kinds          []string `json:"kinds"` // empty: every kind
	Pools          []string `json:"pools"` // empty: every pool
	Signed         bool     `json:"signed"`
	TimeoutSeconds float64  `json:"timeout_seconds"`
}

type poolReport struct {
	Name                 string  `json:"name"`
	Check                string  `json:"check"`
	Targets              int     `json:"targets"`
	Disabled             int     `json:"disabled"`
	HealthChecks         bool    `json:"health_checks"` // false: routed, never probed
	MaxUnhealthyPercent  int     `json:"max_unhealthy_percent"`
	FailOpen             bool    `json:"fail_open"`
	LatencyMarginSeconds float64 `json:"latency_margin_seconds"`
	// Discovery: the pool's sources ("file_sd_configs[0]"), relabel rules,
	// labels, exported labels, host names and those that did not resolve.
	Sources      []string               `json:"discovery_sources,omitempty"`
	RelabelRules int                    `json:"relabel_rules,omitempty"`
	Labels       map[string]string      `json:"labels,omitempty"`
	MetricLabels []string               `json:"metric_labels,omitempty"`
	HostNames    int                    `json:"host_names,omitempty"`
	Unresolved   []discovery.Unresolved `json:"unresolved,omitempty"`
}

// remediationReport is one remediation: its settings, and the instances it
// may act on (target addresses of its health-checked pools), of which
// multi_pool_instances are in more than one of them, where it acts only
// when they are unhealthy in all (R2). Firings happen in `sonde run`:
// /api/v1/remediations lists them.
type remediationReport struct {
	remediate.Settings
	remediate.Coverage
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
		Checks:       make([]settings.Check, 0, len(cfg.Checks)),
		Pools:        make([]poolReport, 0, len(cfg.Pools)),
		Remediations: make([]remediationReport, 0, len(cfg.Remediations)),
	}
	for _, c := range cfg.Checks {
		rep.Checks = append(rep.Checks, settings.Of(c))
	}
	for _, p := range cfg.Pools {
		pr := poolReport{
			Name: p.Name, Check: p.Check, Targets: len(p.Members), Disabled: len(p.Disabled), HealthChecks: p.HealthChecks,
			MaxUnhealthyPercent: p.MaxUnhealthyPercent, FailOpen: p.FailOpen,
			LatencyMarginSeconds: p.LatencyMargin.Seconds(),
			RelabelRules:         len(p.Discovery.Relabel), MetricLabels: p.MetricLabels,
			HostNames: len(p.Discovery.Names), Unresolved: p.Unresolved,
		}
		for _, src := range p.Discovery.Sources {
			pr.Sources = append(pr.Sources, src.Name())
		}
		if !p.Labels.IsEmpty() {
			pr.Labels = p.Labels.Map()
		}
		rep.Pools = append(rep.Pools, pr)
	}
	for _, r := range cfg.Remediations {
		rep.Remediations = append(rep.Remediations, remediationReport{remediate.SettingsOf(r), remediate.CoverageOf(cfg, r)})
	}
	for _, w := range cfg.Webhooks {
		rep.Webhooks = append(rep.Webhooks, webhookReport{Name: w.Name, URL: w.URL, Kinds: w.Kinds, Pools: w.Pools,
			Signed: w.SecretFile != "", TimeoutSeconds: w.Timeout.Seconds()})
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

// writeText prints the report as aligned tables.
func (r *configReport) writeText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tPRESET\tPROTOCOL\tPORT\tCADENCE\tINTERVAL\tTIMEOUT\tEVALUATION\tINITIAL\tW1 FAIL\tW2 RECOVER\tW3 ONSET\tRATE/TARGET\tCLASS")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s/s\t%d\n",
			c.Name, orDash(deref(c.Preset)), c.Protocol, portText(c.Port, c.PortWins), c.Cadence, secs(c.IntervalSeconds), secs(c.TimeoutSeconds),
			c.EvaluationText(), c.InitialState, secs(c.FailureWindowSeconds), secs(c.SuccessWindowSeconds), secs(c.OnsetWindowSeconds),
			rate(c.ProbeRate), c.ProbeClass)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "CHECK\tPROBE")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\n", c.Name, c.ProbeText(true))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "POOL\tCHECK\tTARGETS\tDISABLED\tHEALTH CHECKS\tMAX UNHEALTHY\tFAIL OPEN\tLATENCY MARGIN\tDISCOVERY")
	for _, p := range r.Pools {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d%%\t%t\t%s\t%s\n", p.Name, p.Check, p.Targets, p.Disabled,
			onOff(p.HealthChecks),
			p.MaxUnhealthyPercent, p.FailOpen, secs(p.LatencyMarginSeconds), orDash(strings.Join(p.Sources, ",")))
	}
	for _, p := range r.Pools {
		for _, u := range p.Unresolved {
			fmt.Fprintf(tw, "\npool %s: %s:%d not probed until it resolves: %s", p.Name, u.Host, u.Port, u.Err)
		}
	}
	if len(r.Remediations) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "REMEDIATION\tPOOLS\tAFTER\tBUDGET\tINSTANCES\tACTION")
		for _, m := range r.Remediations {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d (%d in several pools)\t%s\n", m.Name, strings.Join(m.Pools, ","), secs(m.AfterSeconds),
				budgetText(m), m.Instances, m.MultiPool, actionText(m))
		}
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
	if _, err := fmt.Fprintf(w, "per-target metrics: %t\n", r.Metrics.PerTarget); err != nil {
		return err
	}
	if len(r.Webhooks) == 0 {
		return nil
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nWEBHOOK\tURL\tKINDS\tPOOLS\tSIGNED\tTIMEOUT")
	for _, h := range r.Webhooks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%s\n", h.Name, h.URL, orAll(h.Kinds), orAll(h.Pools), h.Signed, secs(h.TimeoutSeconds))
	}
	return tw.Flush()
}

// orAll lists names, or says "all" for none.
func orAll(names []string) string {
	if len(names) == 0 {
		return "all"
	}
	return strings.Join(names, ",")
}

func secs(s float64) string { return settings.Seconds(s) }

func rate(r float64) string {
	return strconv.FormatFloat(r, 'g', 4, 64)
}

// portText is a check's port: "-" for none, "8080!" when it overrides the
// targets' own ports.
func portText(p *uint16, wins bool) string {
	if p == nil {
		return "-"
	}
	if wins {
		return strconv.Itoa(int(*p)) + "!"
	}
	return strconv.Itoa(int(*p))
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// budgetText describes a remediation's caps: "1/h 3/day", "no cap".
func budgetText(m remediationReport) string {
	var parts []string
	for _, b := range []struct {
		n    int
		unit string
	}{{m.MaxPerHour, "/h"}, {m.MaxPer12h, "/12h"}, {m.MaxPerDay, "/day"}} {
		if b.n > 0 {
			parts = append(parts, strconv.Itoa(b.n)+b.unit)
		}
	}
	if len(parts) == 0 {
		return "no cap"
	}
	return strings.Join(parts, " ")
}

// actionText describes what a remediation runs.
func actionText(m remediationReport) string {
	var parts []string
	if len(m.Command) > 0 {
		args := make([]string, len(m.Command))
		for i, a := range m.Command {
			args[i] = strconv.Quote(a)
		}
		parts = append(parts, "command ["+strings.Join(args, " ")+"]")
	}
	if m.WebhookURL != "" {
		w := "webhook " + m.WebhookURL
		if m.WebhookSigned {
			w += " (signed)"
		}
		parts = append(parts, w)
	}
	return strings.Join(parts, ", ") + ", timeout " + secs(m.TimeoutSeconds)
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
