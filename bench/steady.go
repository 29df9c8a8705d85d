package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sondeprobe/sonde/bench/host"
	"github.com/sondeprobe/sonde/bench/promtext"
	"github.com/sondeprobe/sonde/probe"
)

// steadyTimeout is the probe timeout of the steady scenario's checks.
const steadyTimeout = 2 * time.Second

// steadyConfig returns a daemon configuration of n TCP SYN targets over the
// fleet at interval, spread over as few listening ports as hold them (one
// check and pool per port), without per-target series.
func steadyConfig(n int, interval time.Duration) (config string, dropped int) {
	size := fleetSize()
	ports := (n + size - 1) / size
	var b strings.Builder
	b.WriteString("# sonde bench: steady scenario\nchecks:\n")
	for p := range ports {
		fmt.Fprintf(&b, "  steady-%d: {protocol: tcp, tcp_mode: syn, port: %d, interval: %s, timeout: %s, rise: 2, fall: 3}\n",
			FirstSteadyPort+p, FirstSteadyPort+p, interval, steadyTimeout)
	}
	b.WriteString("pools:\n")
	for p := range ports {
		count := n / ports
		if p < n%ports {
			count++
		}
		fmt.Fprintf(&b, "  - name: steady-%d\n    check: steady-%d\n    targets:\n", FirstSteadyPort+p, FirstSteadyPort+p)
		for _, pfx := range blocks(0, count) {
			fmt.Fprintf(&b, "      - %s\n", pfx)
		}
		for i := range count {
			if Truth(addrAt(i)) == probe.Timeout {
				dropped++
			}
		}
	}
	b.WriteString("metrics: {per_target: false}\n")
	return b.String(), dropped
}

// steadyPort is where the steady scenario's daemon serves its metrics (in
// the prober namespace).
const steadyPort = 9201

// runSteady runs the daemon with the configured number of targets and
// measures, over the configured duration after a warm-up of two intervals,
// the probe rate, scheduler lateness, CPU and memory.
func (e *env) runSteady(ctx context.Context, s *Scenario) error {
	o := e.opt.Steady
	n := o.Targets
	cfg, dropped := steadyConfig(n, o.Interval)
	iv := o.Interval.Seconds()
	asked := float64(n) / iv
	// The interval is the gap after a probe's completion: a dropped
	// target's cycle is the interval plus the timeout.
	expected := float64(n-dropped)/iv + float64(dropped)/(iv+steadyTimeout.Seconds())
	s.Measure = fmt.Sprintf("`sonde run` (SYN prober, eBPF capture) with %d TCP targets at %s for %s after a warm-up of two intervals; rates and lateness from its /metrics, CPU and memory from /proc", n, o.Interval, o.Duration)

	d, err := e.startDaemon(ctx, "steady", cfg, steadyPort)
	if err != nil {
		return err
	}
	defer d.stop()
	s.Command = append(s.Command, commandLine(d.cmd)+"   # config: "+fmt.Sprintf("%d pools of CIDR blocks, tcp_mode: syn, interval %s, timeout %s, metrics.per_target false", (n+fleetSize()-1)/fleetSize(), o.Interval, steadyTimeout))
	ready, err := d.waitReady(ctx, 5*time.Minute)
	if err != nil {
		return err
	}
	// Warm up until every target has had its first probes and reached
	// its first state (rise 2: two intervals), so the measurement sees the
	// steady state, not the start-up.
	warm := 2*o.Interval + time.Second
	e.opt.Progress("steady: daemon ready; warming up", "targets", n, "ready_seconds", ready.Seconds(), "warmup", warm)
	if err := d.sleep(ctx, warm); err != nil {
		return err
	}
	m0, err := d.scrape(ctx)
	if err != nil {
		return err
	}
	p0, err := host.ReadProcess(d.pid())
	if err != nil {
		return err
	}
	c0, t0 := host.MarkCPU(), time.Now()
	maxRSS := p0.RSS
	api := newAPITimes()
	e.opt.Progress("steady: measuring", "seconds", o.Duration.Seconds())
	for tick, end := 0, t0.Add(o.Duration); time.Now().Before(end); tick++ {
		if err := d.sleep(ctx, min(time.Second, time.Until(end))); err != nil {
			return err
		}
		if p, err := host.ReadProcess(d.pid()); err == nil {
			maxRSS = max(maxRSS, p.RSS)
		}
		if tick%apiPeriod == 0 {
			if err := api.measure(ctx, d); err != nil {
				return err
			}
		}
	}
	m1, err := d.scrape(ctx)
	if err != nil {
		return err
	}
	el := time.Since(t0).Seconds()
	machine := c0.Since()
	p1, err := host.ReadProcess(d.pid())
	if err != nil {
		return err
	}
	maxRSS = max(maxRSS, p1.RSS)

	delta := func(name string) float64 { return m1.Sum(name, nil) - m0.Sum(name, nil) }
	achieved := delta("sonde_scheduler_probes_dispatched_total") / el
	late := promtext.HistogramDelta(m0.Histogram("sonde_scheduler_lateness_seconds", nil), m1.Histogram("sonde_scheduler_lateness_seconds", nil))
	p50, p99, lmax := promtext.Quantile(0.5, late)*1e3, promtext.Quantile(0.99, late)*1e3, promtext.MaxBound(late)*1e3
	drops := delta("sonde_syn_ring_drops_total")
	overflows := delta("sonde_scheduler_ring_overflows_total")
	sendErr := delta("sonde_syn_send_errors_total")
	sent := delta("sonde_syn_packets_sent_total") / el
	cpu := (p1.CPU - p0.CPU) / el * 100
	const mib = 1 << 20

	s.add("targets", float64(n), "")
	s.add("ready after", ready.Seconds(), "s")
	s.add("asked (N/I)", asked, "probes/s")
	s.add("expected", expected, "probes/s")
	s.add("achieved (dispatched)", achieved, "probes/s")
	s.add("SYNs sent", sent, "packets/s")
	s.add("lateness p50", p50, "ms")
	s.add("lateness p99", p99, "ms")
	s.add("lateness max ≤", lmax, "ms")
	s.add("sonde CPU", cpu, "% of a core")
	// Every probe is one SYN. The scheduler publishes its counters after
	// each step of a shard, the SYN prober per batch: a shard that falls
	// behind can spend the whole measurement in one step, and then only
	// the SYNs tell what went out.
	perProbe := (p1.CPU - p0.CPU) / (sent * el) * 1e6
	if achieved == 0 && sent > 0 {
		s.note("the scheduler published no counters while measuring (dispatched and lateness did not move) although %.0f SYNs/s went out: its shards were inside one step the whole time, behind schedule; rates and CPU per probe are from the SYNs sent", sent)
	}
	s.add("sonde CPU per probe", perProbe, "µs")
	s.add("machine CPU", machine/el/float64(e.numCPU())*100, "% of all cores")
	s.add("RSS", float64(maxRSS)/mib, "MiB")
	s.add("peak RSS (VmHWM)", float64(p1.PeakRSS)/mib, "MiB")
	s.add("bytes per target", float64(maxRSS)/float64(n), "B")
	s.add("ring drops", drops, "replies")
	s.add("scheduler ring overflows", overflows, "results")
	s.add("send errors", sendErr, "probes")
	api.report(s)

	s.goal("sustains N/I with every probe sent", sent >= 0.99*expected && achieved >= 0.99*expected && sendErr == 0,
		"%.0f SYNs/s sent and %.0f probes/s dispatched, %.0f expected (%.1f%%), %.0f send errors", sent, achieved, expected, 100*sent/expected, sendErr)
	s.goal("p99 lateness < 50 ms", p99 < 50, "%.2f ms", p99)
	s.goal("no ring-buffer drops", drops == 0, "%.0f", drops)
	peak := max(maxRSS, p1.PeakRSS)
	perTarget, limit := rssBudget(n)
	s.goal(fmt.Sprintf("RSS ≤ %d bytes per target, under %.0f MiB", perTarget, float64(limit)/mib), peak <= limit && (n < tenMillion || maxRSS <= int64(n)*perTarget),
		"%.0f MiB at most while measuring, %.0f MiB peak since start (%.0f bytes per target)",
		float64(maxRSS)/mib, float64(peak)/mib, float64(maxRSS)/float64(n))
	if n >= tenMillion {
		s.goal("loads in under 20 s", ready < 20*time.Second, "ready after %.1f s", ready.Seconds())
	}
	s.goal("API and /metrics answer in under a second", api.worst() < time.Second, "slowest %s in %.0f ms", api.worstPath(), api.worst().Seconds()*1e3)
	if sw, ok := e.sweepCPU[e.fleet.XDP]; ok && sw > 0 {
		s.add("sonde CPU per probe / sweep's", perProbe/sw, "×")
		s.goal("CPU per probe ≤ 1.3× the sweep's on the same fleet", perProbe <= 1.3*sw, "%.2f µs, sweep %.2f µs: %.2f×", perProbe, sw, perProbe/sw)
	}
	s.note("expected rate: the interval is the gap after a probe's completion, so each of the %d dropped targets probes every interval + timeout (%s + %s)", dropped, o.Interval, steadyTimeout)
	if math.IsNaN(p99) {
		s.note("no lateness was published while measuring")
	}
	return d.stop()
}

// tenMillion is the size from which steady checks the goals for ten
// million targets (load time, 150 bytes per target).
const tenMillion = 10_000_000

// rssBudget returns the memory goal for n targets: below ten million at most
// max(256 MiB, n × 256 B) (1 M targets under 256 MiB); from ten million 150
// bytes per target and under 1.5 GiB.
func rssBudget(n int) (perTarget, limit int64) {
	if n >= tenMillion {
		return 150, 1536 << 20
	}
	return 256, max(256<<20, int64(n)*256)
}

// apiPeriod is how often, in seconds of the measurement, steady times the
// daemon's API and /metrics.
const apiPeriod = 5

// apiPaths are the daemon endpoints steady times while it measures: what a
// Prometheus scrape, a dashboard and an operator ask for.
var apiPaths = []string{"/metrics", "/api/v1/pools", "/api/v1/targets?limit=100", "/api/v1/targets?state=unhealthy&limit=100"}

// apiTimes are the response times of the daemon's endpoints, by path.
type apiTimes struct {
	times map[string][]time.Duration
}

func newAPITimes() *apiTimes { return &apiTimes{times: map[string][]time.Duration{}} }

// measure fetches every path once and records how long the whole answer
// took.
func (a *apiTimes) measure(ctx context.Context, d *daemon) error {
	for _, p := range apiPaths {
		start := time.Now()
		if _, err := d.get(ctx, p); err != nil {
			return err
		}
		a.times[p] = append(a.times[p], time.Since(start))
	}
	return nil
}

// report adds the median and worst time of each path.
func (a *apiTimes) report(s *Scenario) {
	for _, p := range apiPaths {
		ts := a.times[p]
		if len(ts) == 0 {
			continue
		}
		var ms []float64
		for _, t := range ts {
			ms = append(ms, t.Seconds()*1e3)
		}
		s.add("GET "+p+" median", median(ms), "ms")
		s.add("GET "+p+" max", slices.Max(ms), "ms")
	}
}

// worst returns the slowest answer and its path.
func (a *apiTimes) worst() time.Duration {
	w, _ := a.slowest()
	return w
}

func (a *apiTimes) worstPath() string {
	_, p := a.slowest()
	return p
}

func (a *apiTimes) slowest() (time.Duration, string) {
	var w time.Duration
	path := "none"
	for _, p := range apiPaths {
		for _, t := range a.times[p] {
			if t > w {
				w, path = t, p
			}
		}
	}
	return w, path
}

// numCPU is the machine's number of CPUs, as the report shows it.
func (e *env) numCPU() int { return max(host.Describe("").Cores, 1) }
