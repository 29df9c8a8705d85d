package bench

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/sondeprobe/sonde/bench/host"
	"github.com/sondeprobe/sonde/bench/promtext"
)

// Ports where the http scenario's daemons serve (prober namespace).
const (
	httpDaemonPort    = 9203
	connectDaemonPort = 9204
	httpsDaemonPort   = 9205
)

// rateTargets is how many targets the http scenario probes back to back
// (interval 1 ms): as many probes are in flight at any time, the way a
// client with that many workers drives blackbox_exporter.
const rateTargets = 256

// rateRun is one daemon measured at full speed.
type rateRun struct {
	rate, fails       float64 // successful and failed probes per second
	p50, p99          float64 // probe latency quantiles, ms
	cpu, machineShare float64 // the daemon's CPU (% of a core) and the machine's (% of all cores)
	user, sys         float64 // the daemon's user and system CPU, seconds per second
}

// rateConfig is a daemon configuration whose one check probes
// rateTargets addresses of the clean half of the fleet back to back.
func rateConfig(name, check string) string {
	return fmt.Sprintf("checks:\n  %s: {%s, interval: 1ms, timeout: 5s, rise: 1, fall: 3}\npools:\n  - name: %s\n    check: %s\n    targets: [%q]\nmetrics: {per_target: false}\n",
		name, check, name, name, blocks(fleetSize()/2+4096, rateTargets)[0].String())
}

// daemonRate starts a daemon on config, lets it warm up for a second (a
// fifth with Quick), and measures its probes of pool name for dur.
func (e *env) daemonRate(ctx context.Context, s *Scenario, name, config string, port int, dur time.Duration) (rateRun, error) {
	var r rateRun
	d, err := e.startDaemon(ctx, name, config, port)
	if err != nil {
		return r, err
	}
	defer d.stop()
	s.Command = append(s.Command, commandLine(d.cmd)+"   # config: "+oneLine(config))
	if _, err := d.waitReady(ctx, time.Minute); err != nil {
		return r, err
	}
	warm := time.Second
	if e.opt.Quick {
		warm = 200 * time.Millisecond
	}
	if err := d.sleep(ctx, warm); err != nil {
		return r, err
	}
	m0, err := d.scrape(ctx)
	if err != nil {
		return r, err
	}
	p0, err := host.ReadProcess(d.pid())
	if err != nil {
		return r, err
	}
	c0, t0 := host.MarkCPU(), time.Now()
	if err := d.sleep(ctx, dur); err != nil {
		return r, err
	}
	m1, err := d.scrape(ctx)
	if err != nil {
		return r, err
	}
	el := time.Since(t0).Seconds()
	machine := c0.Since()
	p1, err := host.ReadProcess(d.pid())
	if err != nil {
		return r, err
	}
	pool := map[string]string{"pool": name}
	ok := map[string]string{"pool": name, "outcome": "success"}
	r.rate = (m1.Sum("sonde_probes_total", ok) - m0.Sum("sonde_probes_total", ok)) / el
	r.fails = (m1.Sum("sonde_probes_total", pool)-m0.Sum("sonde_probes_total", pool))/el - r.rate
	lat := promtext.HistogramDelta(m0.Histogram("sonde_probe_duration_seconds", pool), m1.Histogram("sonde_probe_duration_seconds", pool))
	r.p50, r.p99 = promtext.Quantile(0.5, lat)*1e3, promtext.Quantile(0.99, lat)*1e3
	r.cpu = (p1.CPU - p0.CPU) / el * 100
	r.user, r.sys = (p1.User-p0.User)/el, (p1.System-p0.System)/el
	r.machineShare = machine / el / float64(e.numCPU()) * 100
	return r, d.stop()
}

// oneLine squeezes a YAML config onto one line for the report.
func oneLine(config string) string {
	out := []byte{}
	space := false
	for _, c := range []byte(config) {
		if c == '\n' || c == ' ' {
			space = true
			continue
		}
		if space && len(out) > 0 {
			out = append(out, ' ')
		}
		space = false
		out = append(out, c)
	}
	return string(out)
}

// runHTTP measures sonde's HTTP probes (new connection per probe, H8) and
// its connect() probes at full speed against the fleet; the HTTP rate takes
// turns with ApacheBench on the same server, when ab is installed.
func (e *env) runHTTP(ctx context.Context, s *Scenario) error {
	dur := e.opt.HTTPDuration
	ab := lookTool(abNames)
	s.Measure = fmt.Sprintf("`sonde run` probing %d fleet addresses back to back (interval 1 ms, so %d probes in flight) for %s: HTTP GET to the fleet's HTTP server on port %d with a new connection per probe (%d rounds, taking turns with ApacheBench: ab -c %d without keep-alive, a new connection per request, on the same server), then HTTPS GET to the same server behind TLS on port %d (%d rounds, taking turns with a Go crypto/tls client loop, sonde bench tls-loop, doing the same: a new connection and a full handshake per request, %d in flight), then tcp_mode connect to port %d; rates and latency from /metrics", rateTargets, rateTargets, dur, HTTPPort, e.opt.Runs, rateTargets, HTTPSPort, e.opt.Runs, rateTargets, ScanPort)
	var hs []rateRun
	var abs []abRun
	for round := range e.opt.Runs {
		sub := s
		if round > 0 {
			sub = &Scenario{} // the command lines once
		}
		e.opt.Progress("http: sonde", "round", round+1)
		h, err := e.daemonRate(ctx, sub, "http", rateConfig("http", fmt.Sprintf("protocol: http, port: %d, path: /", HTTPPort)), httpDaemonPort, dur)
		if err != nil {
			return err
		}
		hs = append(hs, h)
		if ab == "" {
			continue
		}
		e.opt.Progress("http: ab", "round", round+1)
		r, line, err := e.abOnce(ctx, ab, dur)
		if err != nil {
			return fmt.Errorf("ab: %w", err)
		}
		addCommand(s, line)
		abs = append(abs, r)
	}
	hss, tlss, err := e.httpsRounds(ctx, s, dur)
	if err != nil {
		return err
	}
	c, err := e.daemonRate(ctx, s, "connect", rateConfig("connect", fmt.Sprintf("protocol: tcp, tcp_mode: connect, port: %d", ScanPort)), connectDaemonPort, dur)
	if err != nil {
		return err
	}
	for _, x := range []struct {
		name string
		r    []rateRun
	}{{"http", hs}, {"connect", []rateRun{c}}, {"https", hss}} {
		f := func(g func(rateRun) float64) []float64 {
			var out []float64
			for _, r := range x.r {
				out = append(out, g(r))
			}
			return out
		}
		s.addRuns(x.name+" probes", f(func(r rateRun) float64 { return r.rate }), "probes/s")
		s.addRuns(x.name+" failures", f(func(r rateRun) float64 { return r.fails }), "probes/s")
		s.addRuns(x.name+" latency p50", f(func(r rateRun) float64 { return r.p50 }), "ms")
		s.addRuns(x.name+" latency p99", f(func(r rateRun) float64 { return r.p99 }), "ms")
		s.addRuns(x.name+" sonde CPU", f(func(r rateRun) float64 { return r.cpu }), "% of a core")
		s.addRuns(x.name+" sonde CPU per probe", f(func(r rateRun) float64 { return r.cpu / 100 / r.rate * 1e6 }), "µs")
		s.addRuns(x.name+" sonde user CPU per probe", f(func(r rateRun) float64 { return r.user / r.rate * 1e6 }), "µs")
		s.addRuns(x.name+" sonde system CPU per probe", f(func(r rateRun) float64 { return r.sys / r.rate * 1e6 }), "µs")
		s.addRuns(x.name+" machine CPU", f(func(r rateRun) float64 { return r.machineShare }), "% of all cores")
	}
	var userPer []float64
	for _, h := range hs {
		userPer = append(userPer, h.user/h.rate*1e6)
	}
	s.goal("user CPU per HTTP probe ≤ 8 µs", median(userPer) <= 8,
		"%.1f µs of user CPU per probe (median of the rounds)", median(userPer))
	if ab == "" {
		s.note("ab: not installed (Debian package apache2-utils); HTTP is not compared")
	} else {
		var rates, fails, cpu []float64
		for _, r := range abs {
			rates = append(rates, r.rate)
			fails = append(fails, r.failed)
			cpu = append(cpu, r.cpu/r.complete*1e6)
		}
		s.addText("ab version", toolVersion(ab, "-V"))
		s.addRuns("ab requests", rates, "requests/s")
		s.addRuns("ab failed requests", fails, "")
		s.addRuns("ab CPU per request", cpu, "µs")
		var sondeRates []float64
		for _, h := range hs {
			sondeRates = append(sondeRates, h.rate)
		}
		ratio := median(sondeRates) / median(rates)
		s.add("sonde http/ab rate", ratio, "×")
		s.goal("HTTP ≥ 1.3× ab's rate, a new connection per probe", ratio >= 1.3,
			"sonde %.0f probes/s, ab %.0f requests/s: %.2f×", median(sondeRates), median(rates), ratio)
	}
	var tlsRates, tlsFails, tlsCPU, httpsRates []float64
	for i, r := range tlss {
		tlsRates = append(tlsRates, r.rate)
		tlsFails = append(tlsFails, r.failed)
		tlsCPU = append(tlsCPU, r.cpu/max(r.ok, 1)*1e6)
		httpsRates = append(httpsRates, hss[i].rate)
	}
	s.addRuns("go tls loop requests", tlsRates, "requests/s")
	s.addRuns("go tls loop failed requests", tlsFails, "")
	s.addRuns("go tls loop CPU per request", tlsCPU, "µs")
	tratio := median(httpsRates) / median(tlsRates)
	s.add("sonde https/go tls loop rate", tratio, "×")
	s.goal("HTTPS ≥ 1.0× a Go crypto/tls client loop doing the same handshakes", tratio >= 1.0,
		"sonde %.0f probes/s, Go loop %.0f requests/s: %.2f×", median(httpsRates), median(tlsRates), tratio)
	s.note("latency: request sent to last byte (HTTP) or connect() (connect mode), from the daemon's sonde_probe_duration_seconds histogram, interpolated within its buckets; the fleet's HTTP server and listener run on the same machine and count in machine CPU; ab asks one address of the same server (it takes one URL), sonde all %d", rateTargets)
	return nil
}

// abNames is ApacheBench's executable, as Debian's apache2-utils installs it.
var abNames = []string{"ab"}

// abRun is one ApacheBench measurement.
type abRun struct {
	rate, complete, failed float64 // requests per second, completed and failed requests
	cpu                    float64 // ab's user+system seconds
}

var (
	abRateRE     = regexp.MustCompile(`Requests per second:\s+([0-9.]+)`)
	abCompleteRE = regexp.MustCompile(`Complete requests:\s+([0-9]+)`)
	abFailedRE   = regexp.MustCompile(`Failed requests:\s+([0-9]+)`)
)

// abOnce runs ab for dur with the http scenario's concurrency against the
// first of its targets, without keep-alive: a new connection per request.
func (e *env) abOnce(ctx context.Context, ab string, dur time.Duration) (abRun, string, error) {
	url := fmt.Sprintf("http://%s:%d/", blocks(fleetSize()/2+4096, rateTargets)[0].Addr(), HTTPPort)
	// -t before -n: -t alone would cap the requests at 50,000.
	cmd := e.command(ctx, ab, "-q", "-r", "-c", strconv.Itoa(rateTargets), "-s", "10",
		"-t", strconv.Itoa(int(dur.Seconds())), "-n", "100000000", url)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	line := commandLine(cmd)
	if err := cmd.Run(); err != nil {
		return abRun{}, line, fmt.Errorf("%w: %s", err, out.tail(1000))
	}
	text := out.tail(8000)
	var r abRun
	for _, f := range []struct {
		re  *regexp.Regexp
		dst *float64
	}{{abRateRE, &r.rate}, {abCompleteRE, &r.complete}, {abFailedRE, &r.failed}} {
		m := f.re.FindStringSubmatch(text)
		if m == nil {
			return r, line, fmt.Errorf("no %q in its output: %s", f.re, tail([]byte(text), 1000))
		}
		*f.dst, _ = strconv.ParseFloat(m[1], 64)
	}
	r.cpu = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	return r, line, nil
}

// tlsRun is one run of the Go TLS client loop.
type tlsRun struct {
	rate, ok, failed float64 // requests per second, complete and failed requests
	cpu              float64 // its user+system seconds
}

// httpsRounds measures sonde's HTTPS probes at full speed, taking turns
// with the Go TLS client loop on the same server.
func (e *env) httpsRounds(ctx context.Context, s *Scenario, dur time.Duration) ([]rateRun, []tlsRun, error) {
	var hs []rateRun
	var ts []tlsRun
	check := fmt.Sprintf("protocol: https, port: %d, path: /, tls: {insecure_skip_verify: true}", HTTPSPort)
	for round := range e.opt.Runs {
		sub := s
		if round > 0 {
			sub = &Scenario{} // the command lines once
		}
		e.opt.Progress("http: sonde https", "round", round+1)
		h, err := e.daemonRate(ctx, sub, "https", rateConfig("https", check), httpsDaemonPort, dur)
		if err != nil {
			return nil, nil, err
		}
		hs = append(hs, h)
		e.opt.Progress("http: go tls loop", "round", round+1)
		r, line, err := e.tlsLoopOnce(ctx, dur)
		if err != nil {
			return nil, nil, fmt.Errorf("go tls loop: %w", err)
		}
		if round == 0 {
			addCommand(s, line)
		}
		ts = append(ts, r)
	}
	return hs, ts, nil
}

var tlsLoopRE = regexp.MustCompile(`tls-loop: ([0-9]+) requests in ([0-9.]+)s \(([0-9.]+) requests/s\); failed ([0-9]+); cpu ([0-9.]+)s`)

// tlsLoopOnce runs `sonde bench tls-loop` for dur against the HTTPS port of
// the http scenario's targets, in the prober namespace.
func (e *env) tlsLoopOnce(ctx context.Context, dur time.Duration) (tlsRun, string, error) {
	cmd := e.command(ctx, e.opt.Binary, "bench", "tls-loop", "-port", strconv.Itoa(HTTPSPort),
		"-targets", strconv.Itoa(rateTargets), "-concurrency", strconv.Itoa(rateTargets), "-duration", dur.String(),
		blocks(fleetSize()/2+4096, rateTargets)[0].String())
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	line := commandLine(cmd)
	if err := cmd.Run(); err != nil {
		return tlsRun{}, line, fmt.Errorf("%w: %s", err, out.tail(1000))
	}
	m := tlsLoopRE.FindStringSubmatch(out.tail(4000))
	if m == nil {
		return tlsRun{}, line, fmt.Errorf("no summary in its output: %s", out.tail(1000))
	}
	var r tlsRun
	r.ok, _ = strconv.ParseFloat(m[1], 64)
	r.rate, _ = strconv.ParseFloat(m[3], 64)
	r.failed, _ = strconv.ParseFloat(m[4], 64)
	r.cpu, _ = strconv.ParseFloat(m[5], 64)
	return r, line, nil
}
