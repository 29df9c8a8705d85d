package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/endpoint"
	"github.com/sondeprobe/sonde/server/prober"
)

// scrapeTimeoutOffset is kept free of a scrape's time limit, as
// blackbox_exporter does, so the answer reaches Prometheus in time.
const scrapeTimeoutOffset = 500 * time.Millisecond

// probeTimeout is how long a /probe may take: the check's timeout, shortened
// to the scrape's limit (X-Prometheus-Scrape-Timeout-Seconds) less an offset.
func probeTimeout(r *http.Request, check time.Duration) (time.Duration, error) {
	v := r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds")
	if v == "" {
		return check, nil
	}
	s, err := strconv.ParseFloat(v, 64)
	if err != nil || s <= 0 || s > 24*3600 {
		return 0, fmt.Errorf("X-Prometheus-Scrape-Timeout-Seconds %q: want a number of seconds above 0", v)
	}
	limit := time.Duration(s*float64(time.Second)) - scrapeTimeoutOffset
	if limit <= 0 {
		limit = time.Duration(s * float64(time.Second))
	}
	return min(check, limit), nil
}

// oneShot is one /probe request: what to probe and with which check.
type oneShot struct {
	check    config.Check // the module's check, with a URL target's scheme and path
	target   prober.ProbeTarget
	log      *slog.Logger // the debug view's log, or a discarding one
	withheld bool         // the check's credentials were taken out (see generation.authorize)
}

// oneShotResult is what a /probe found.
type oneShotResult struct {
	rep      probe.Report
	addr     netip.Addr
	dns      time.Duration
	duration time.Duration
}

// handleProbe answers GET /probe?target=T&module=CHECK like
// blackbox_exporter: it probes T once with the settings of the check named
// CHECK and answers in Prometheus text with blackbox's metric names, or,
// with debug=true, with the probe's log, those metrics and the check (its
// header values hidden). The check's probe_targets decides which targets
// it may probe and which receive its credentials (see probeaccess.go); a
// refusal is 403. The probe runs on the request's goroutine, at most
// ProbeConcurrency at once (more are refused at once, see admission.go) and
// never through the scheduled probes' workers, so scrapes cannot delay
// scheduled probing.
func (d *Daemon) handleProbe(w http.ResponseWriter, r *http.Request) {
	g := d.running(w)
	if g == nil {
		return
	}
	q := r.URL.Query()
	shot, err := g.newOneShot(q.Get("module"), q.Get("target"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	timeout, err := probeTimeout(r, shot.check.Timeout)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	debug := q.Get("debug") == "true"
	var logs bytes.Buffer
	shot.log = slog.New(slog.DiscardHandler)
	if debug {
		shot.log = slog.New(slog.NewTextHandler(&logs, nil))
	}
	w, release := d.adm.Probe.Enter(w)
	if release == nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	res, err := g.runOneShot(ctx, &shot, timeout, d.opt.Resolver)
	release()
	if err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}

	reg := prometheus.NewRegistry()
	shot.register(reg, &res)
	if !debug {
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "Logs for the probe:\n%s\n\nMetrics that would have been returned:\n", logs.Bytes())
	mfs, _ := reg.Gather() // gauges set above: nothing fails
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
			return // the client went away
		}
	}
	fmt.Fprintf(w, "\n\nModule configuration:\n%s\n", shot.checkText(timeout))
}

// newOneShot validates a /probe request's module and target, both from
// outside, and returns what to probe.
func (g *generation) newOneShot(module, target string) (oneShot, error) {
	if module == "" {
		return oneShot{}, fmt.Errorf("module: missing; want the name of a check: %s", g.checkNames())
	}
	c := g.cfg.CheckByName(module)
	if c == nil {
		return oneShot{}, fmt.Errorf("module=%q: no such check; want one of %s", module, g.checkNames())
	}
	pt, err := prober.ParseProbeTarget(target)
	if err != nil {
		return oneShot{}, fmt.Errorf("target: %w", err)
	}
	if err := prober.CheckTarget(c, pt.TargetEntry); err != nil {
		return oneShot{}, fmt.Errorf("target: %w", err)
	}
	shot := oneShot{check: *c, target: pt}
	if c.TCPMode == config.TCPSyn {
		shot.check.TCPMode = config.TCPConnect // raw SYNs need a prepared prober; /probe connects
	}
	if pt.Scheme != "" {
		if c.Protocol == config.TCP {
			return oneShot{}, fmt.Errorf("target=%q is a URL but check %s probes tcp; give host:port", target, c.Name)
		}
		shot.check.Protocol = config.HTTP
		if pt.Scheme == "https" {
			shot.check.Protocol = config.HTTPS
		} else {
			shot.check.TLS, shot.check.SNI = config.Check{}.TLS, ""
		}
		if pt.Path != "" {
			shot.check.Path = pt.Path
		}
	}
	switch {
	case pt.Scheme == "":
		shot.target.Port = c.TargetPort(pt.Port) // as for a target of the check in the configuration
	case pt.Port != 0: // a URL says where it goes
	case pt.Scheme == "http":
		shot.target.Port = 80
	default:
		shot.target.Port = 443
	}
	if shot.target.Port == 0 {
		return oneShot{}, fmt.Errorf("target=%q has no port and check %s has none", target, c.Name)
	}
	return shot, nil
}

func (g *generation) checkNames() string {
	names := make([]string, len(g.cfg.Checks))
	for i, c := range g.cfg.Checks {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// runOneShot resolves the target with r and probes it once, all within
// timeout.
// A target the check may not probe (see [generation.authorize]) is not
// probed: the error, a probeRefusal, says why. A failure to resolve is a
// failed probe.
func (g *generation) runOneShot(ctx context.Context, shot *oneShot, timeout time.Duration, r endpoint.Resolver) (oneShotResult, error) {
	start := time.Now()
	var res oneShotResult
	fail := func(err error) oneShotResult {
		res.rep = probe.Report{Result: probe.Result{Outcome: probe.Error}, Err: err}
		res.duration = time.Since(start)
		shot.log.Error("probe failed", "err", err)
		return res
	}
	shot.log.Info("beginning probe", "module", shot.check.Name, "protocol", shot.check.Protocol, "target", shot.where(), "timeout", timeout)
	addr, err := g.shotAddr(ctx, shot, r)
	if shot.target.Host != "" {
		res.dns = time.Since(start)
	}
	if err != nil {
		return fail(err), nil
	}
	if err := g.authorize(shot, addr); err != nil {
		return res, err
	}
	res.addr = addr
	p, err := g.oneShotProber(ctx, shot)
	if err != nil {
		return fail(err), nil
	}
	res.rep = p.Report(ctx, prober.Target(shot.target.TargetEntry, addr, shot.target.Port))
	res.duration = time.Since(start)
	if res.rep.Outcome.Healthy() {
		shot.log.Info("probe succeeded", "outcome", res.rep.Outcome, "status", res.rep.Status, "latency", res.rep.Latency, "duration", res.duration)
	} else {
		shot.log.Error("probe failed", "outcome", res.rep.Outcome, "status", res.rep.Status, "err", res.rep.Err, "duration", res.duration)
	}
	return res, nil
}

// where returns the host name or address of the probe and its port, as
// host:port, [v6]:port or address:port.
func (shot *oneShot) where() string {
	host := shot.target.Host
	if host == "" {
		host = shot.target.Addr.String()
	}
	return net.JoinHostPort(host, strconv.Itoa(int(shot.target.Port)))
}

// oneShotProbers caches, per generation, the prober of each check as the
// configuration defines it; a URL target that changes the scheme or path
// gets a prober of its own.
type oneShotProbers struct {
	mu sync.Mutex
	m  map[string]probe.Reporter // by check name
	// walk is held while a /probe walks the targets (probeaccess.go): a
	// flood of /probe requests takes at most one CPU with their walks.
	walk sync.Mutex
}

// oneShotProber returns the prober of shot's check, chosen by prober.New
// without the SYN prober (a /probe connects); ctx bounds the reading of
// its files.
func (g *generation) oneShotProber(ctx context.Context, shot *oneShot) (probe.Reporter, error) {
	c := g.cfg.CheckByName(shot.check.Name)
	same := shot.check.Protocol == c.Protocol && shot.check.Path == c.Path && shot.check.TCPMode == c.TCPMode && !shot.withheld
	if same {
		g.oneShots.mu.Lock()
		defer g.oneShots.mu.Unlock()
		if p, ok := g.oneShots.m[c.Name]; ok {
			return p, nil
		}
	}
	p, _, err := prober.New(ctx, &shot.check, false)
	if err != nil {
		return nil, err
	}
	if same {
		if g.oneShots.m == nil {
			g.oneShots.m = map[string]probe.Reporter{}
		}
		g.oneShots.m[c.Name] = p
	}
	return p, nil
}

// blackbox_exporter's phases of probe_http_duration_seconds.
var blackboxPhases = [...]string{"resolve", "connect", "tls", "processing", "transfer"}

// register adds the metrics of res, named as blackbox_exporter names them,
// to reg.
func (shot *oneShot) register(reg *prometheus.Registry, res *oneShotResult) {
	gauge := func(name, help string, v float64) {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		g.Set(v)
		reg.MustRegister(g)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	rep := &res.rep
	gauge("probe_success", "Displays whether or not the probe was a success", b2f(rep.Outcome.Healthy()))
	gauge("probe_duration_seconds", "Returns how long the probe took to complete in seconds", res.duration.Seconds())
	gauge("probe_dns_lookup_time_seconds", "Returns the time taken for probe dns lookup in seconds", res.dns.Seconds())
	if res.addr.IsValid() {
		proto := 6.0
		if res.addr.Is4() {
			proto = 4
		}
		gauge("probe_ip_protocol", "Specifies whether probe ip protocol is IP4 or IP6", proto)
	}
	if shot.check.Protocol == config.TCP {
		return
	}
	phases := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "probe_http_duration_seconds",
		Help: "Duration of http request by phase, summed over all redirects",
	}, []string{"phase"})
	ph := rep.Phases
	for i, v := range []time.Duration{res.dns, ph.Connect, ph.TLS, ph.FirstByte, ph.LastByte} {
		phases.WithLabelValues(blackboxPhases[i]).Set(v.Seconds())
	}
	reg.MustRegister(phases)
	gauge("probe_http_status_code", "Response HTTP status code", float64(rep.Status))
	gauge("probe_http_content_length", "Length of http content response", float64(rep.ContentLength))
	gauge("probe_http_uncompressed_body_length", "Length of uncompressed response body", float64(rep.BodyBytes))
	gauge("probe_http_redirects", "The number of redirects", 0) // never followed (H5)
	gauge("probe_http_ssl", "Indicates if SSL was used for the final redirect", b2f(shot.check.Protocol == config.HTTPS && rep.Status != 0))
	if rep.Status != 0 {
		gauge("probe_http_version", "Returns the version of HTTP of the probe response", 1.1)
	}
	gauge("probe_failed_due_to_regex", "Indicates if probe failed due to regex", b2f(rep.Outcome == probe.BodyMismatch))
	if !rep.CertExpiry.IsZero() {
		gauge("probe_ssl_earliest_cert_expiry", "Returns last SSL chain expiry in unixtime", float64(rep.CertExpiry.Unix()))
	}
	if rep.TLSVersion != 0 {
		info := func(name, help, label, value string) {
			g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{label})
			g.WithLabelValues(value).Set(1)
			reg.MustRegister(g)
		}
		info("probe_tls_version_info", "Contains the TLS version used", "version", tls.VersionName(rep.TLSVersion))
		info("probe_tls_cipher_info", "Contains the TLS cipher suite used", "cipher", tls.CipherSuiteName(rep.TLSCipher))
	}
}

// checkText renders the effective check of a /probe for the debug view,
// with header values hidden as the status page hides them: whoever can
// reach /probe can read it.
func (shot *oneShot) checkText(timeout time.Duration) string {
	b, err := json.MarshalIndent(struct {
		Name                string              `json:"name"`
		Preset              string              `json:"preset,omitempty"`
		TimeoutSeconds      float64             `json:"timeout_seconds"`
		ProbeTargets        config.ProbeTargets `json:"probe_targets"`
		CredentialsWithheld bool                `json:"credentials_withheld,omitempty"`
		Probe               config.Probe        `json:"probe"`
	}{shot.check.Name, shot.check.Preset, timeout.Seconds(), shot.check.ProbeAccess.Targets, shot.withheld, shot.check.Probe.Redacted()}, "", "  ")
	if err != nil {
		return err.Error()
	}
	return string(b)
}
