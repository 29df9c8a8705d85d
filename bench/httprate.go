package bench

import (
	"context"
	"fmt"
	"time"
)

// Ports where the http scenario's daemons serve (prober namespace).
const (
	httpDaemonPort    = 9203
	connectDaemonPort = 9204
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
	p0, err := readProc(d.pid())
	if err != nil {
		return r, err
	}
	c0, t0 := readMachineCPU(), time.Now()
	if err := d.sleep(ctx, dur); err != nil {
		return r, err
	}
	m1, err := d.scrape(ctx)
	if err != nil {
		return r, err
	}
	el := time.Since(t0).Seconds()
	machine := c0.since()
	p1, err := readProc(d.pid())
	if err != nil {
		return r, err
	}
	pool := map[string]string{"pool": name}
	ok := map[string]string{"pool": name, "outcome": "success"}
	r.rate = (m1.sum("sonde_probes_total", ok) - m0.sum("sonde_probes_total", ok)) / el
	r.fails = (m1.sum("sonde_probes_total", pool)-m0.sum("sonde_probes_total", pool))/el - r.rate
	lat := histogramDelta(m0.histogram("sonde_probe_duration_seconds", pool), m1.histogram("sonde_probe_duration_seconds", pool))
	r.p50, r.p99 = quantile(0.5, lat)*1e3, quantile(0.99, lat)*1e3
	r.cpu = (p1.CPU - p0.CPU) / el * 100
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
// its connect() probes at full speed against the fleet.
func (e *env) runHTTP(ctx context.Context, s *Scenario) error {
	dur := e.opt.HTTPDuration
	s.Measure = fmt.Sprintf("`sonde run` probing %d fleet addresses back to back (interval 1 ms, so %d probes in flight) for %s: HTTP GET to the fleet's HTTP server on port %d with a new connection per probe, then tcp_mode connect to port %d; rates and latency from /metrics", rateTargets, rateTargets, dur, HTTPPort, ScanPort)
	h, err := e.daemonRate(ctx, s, "http", rateConfig("http", fmt.Sprintf("protocol: http, port: %d, path: /", HTTPPort)), httpDaemonPort, dur)
	if err != nil {
		return err
	}
	c, err := e.daemonRate(ctx, s, "connect", rateConfig("connect", fmt.Sprintf("protocol: tcp, tcp_mode: connect, port: %d", ScanPort)), connectDaemonPort, dur)
	if err != nil {
		return err
	}
	for _, x := range []struct {
		name string
		r    rateRun
	}{{"http", h}, {"connect", c}} {
		s.add(x.name+" probes", x.r.rate, "probes/s")
		s.add(x.name+" failures", x.r.fails, "probes/s")
		s.add(x.name+" latency p50", x.r.p50, "ms")
		s.add(x.name+" latency p99", x.r.p99, "ms")
		s.add(x.name+" sonde CPU", x.r.cpu, "% of a core")
		s.add(x.name+" machine CPU", x.r.machineShare, "% of all cores")
	}
	s.note("latency: request sent to last byte (HTTP) or connect() (connect mode), from the daemon's sonde_probe_duration_seconds histogram, interpolated within its buckets; the fleet's HTTP server and listener run on the same machine and count in machine CPU")
	return nil
}
