package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/bench/bpfobjs"
	"github.com/sondeprobe/sonde/bench/connload"
	"github.com/sondeprobe/sonde/bench/host"
	"github.com/sondeprobe/sonde/bpf"
)

// The passive scenario measures passive evidence (docs/semantics.md,
// "Passive evidence") three ways:
//
//   - detection: the same daemon configuration (interval 30 s), with and
//     without a passive block, under the same client load (a process of its
//     own, `sonde bench connect-load`, connecting to the targets at a steady
//     rate); a slice of the targets starts refusing, and the time to each
//     one's unhealthy event is taken;
//   - CPU: the same bounded load at 20,000 connections a second, with and
//     without the observer attached, in alternating rounds; and the
//     observer programs' own run time from the kernel's statistics;
//   - memory: the observer's maps with a million watched targets, as the
//     kernel charges them.

// passivePort is where the passive scenario's daemons serve.
const passivePort = 9205

// passivePlan is the passive scenario's size and timing.
type passivePlan struct {
	targets, slice    netip.Prefix // watched and probed; made to refuse mid-run
	interval, timeout time.Duration
	fall              int
	loadRate          int           // the client's connections per second during detection
	settle            time.Duration // load before the onset
	passiveWait       time.Duration // how long detection with passive evidence is awaited
	activeWait        time.Duration // how long detection without it is awaited; 0: until W3 + 5 s
	cpuTargets        netip.Prefix  // the CPU load's targets
	cpuRate           int           // connections per second of the CPU load
	cpuSlice          time.Duration // of each CPU slice
	cpuRounds         int           // pairs of slices, with and without the observer
	memTargets        int           // watched targets of the memory measurement
}

// passiveCPURate is the client rate the overhead goal is stated at.
const passiveCPURate = 20_000

func (e *env) passivePlan() passivePlan {
	clean := fleetSize() / 2
	p := passivePlan{
		targets:  blocks(clean+8192, 16)[0],
		slice:    blocks(clean+8192+12, 4)[0],
		interval: 30 * time.Second, timeout: time.Second, fall: 3,
		loadRate: 400, settle: 2 * time.Second, passiveWait: 10 * time.Second,
		cpuTargets: blocks(clean+8192+256, 256)[0],
		cpuRate:    passiveCPURate, cpuSlice: time.Second, cpuRounds: 24,
		memTargets: 1_000_000,
	}
	if e.opt.Quick {
		p.activeWait = 3 * time.Second
		p.cpuRounds = 4
	}
	return p
}

// runPassive runs the three measurements; each records its own failure
// and the others still run.
func (e *env) runPassive(ctx context.Context, s *Scenario) error {
	p := e.passivePlan()
	s.Measure = fmt.Sprintf("a client process (sonde bench connect-load, %d connections/s over %s port %d) while %s starts refusing (RST); time to unhealthy with `passive: {failures: 3, window: 10s, action: recheck}` and without, interval %s, timeout %s, rise 1, fall %d, SYN probes; the observer's CPU at %d connections/s with and without it attached; its maps' memory for %d watched targets",
		p.loadRate, p.targets, ScanPort, p.slice, p.interval, p.timeout, p.fall, p.cpuRate, p.memTargets)
	var r passiveResult
	var errs []error
	var err error
	if r.with, err = e.passiveDetect(ctx, s, p, true); err != nil {
		errs = append(errs, fmt.Errorf("detection with passive evidence: %w", err))
	}
	if ctx.Err() == nil {
		if r.without, err = e.passiveDetect(ctx, s, p, false); err != nil {
			errs = append(errs, fmt.Errorf("detection without passive evidence: %w", err))
		}
	}
	if ctx.Err() == nil {
		if r.cpu, err = e.passiveCPU(ctx, s, p); err != nil {
			errs = append(errs, fmt.Errorf("observer CPU: %w", err))
		}
	}
	if ctx.Err() == nil {
		if r.mem, err = passiveMemory(p.memTargets); err != nil {
			errs = append(errs, fmt.Errorf("observer memory: %w", err))
		}
	}
	r.slice = 1 << (32 - p.slice.Bits())
	r.quick, r.cpuSlice = e.opt.Quick, p.cpuSlice
	r.report(s)
	return errors.Join(errs...)
}

// detectRun is one detection run.
type detectRun struct {
	ran          bool
	w1, w3       float64   // seconds, from /metrics
	detected     []float64 // per slice target, seconds from the latest possible onset
	fromEarliest []float64 // the same from the earliest possible onset
	onsetSpread  float64   // seconds between the earliest and the latest possible onset
	waited       float64   // seconds detection was awaited after the onset
	falseUnhealthy,
	falseTriggers, triggers int
	load connload.Result
}

// passiveConfig returns the daemon's configuration for the detection runs.
func passiveConfig(p passivePlan, withPassive bool) string {
	block := ""
	if withPassive {
		block = ", passive: {failures: 3, window: 10s, action: recheck}"
	}
	return fmt.Sprintf("checks:\n  passive: {protocol: tcp, tcp_mode: syn, port: %d, interval: %s, timeout: %s, rise: 1, fall: %d%s}\npools:\n  - name: passive\n    check: passive\n    targets: [%q]\nmetrics: {per_target: false}\n",
		ScanPort, p.interval, p.timeout, p.fall, block, p.targets.String())
}

// passiveDetect runs the daemon with or without passive evidence and the
// client load, makes the slice refuse, and times its detection.
func (e *env) passiveDetect(ctx context.Context, s *Scenario, p passivePlan, withPassive bool) (detectRun, error) {
	r := detectRun{ran: true}
	name := "passive-off"
	if withPassive {
		name = "passive-on"
	}
	e.opt.Progress("passive: detection", "passive", withPassive)
	cfg := passiveConfig(p, withPassive)
	d, err := e.startDaemon(ctx, name, cfg, passivePort)
	if err != nil {
		return r, err
	}
	defer d.stop()
	s.Command = append(s.Command, commandLine(d.cmd)+"   # config: "+oneLine(cfg))
	if _, err := d.waitReady(ctx, time.Minute); err != nil {
		return r, err
	}
	n, k := 1<<(32-p.targets.Bits()), 1<<(32-p.slice.Bits())
	if err := e.waitHealthy(ctx, d, n, 3*p.timeout+10*time.Second); err != nil {
		return r, err
	}
	m, err := d.scrape(ctx)
	if err != nil {
		return r, err
	}
	check := map[string]string{"check": "passive"}
	r.w1 = m.Sum("sonde_check_failure_window_seconds", check)
	r.w3 = m.Sum("sonde_check_failure_window_from_onset_seconds", check)
	if r.w1 <= 0 || r.w3 <= 0 {
		return r, errors.New("the daemon exports no failure windows for check passive")
	}
	if withPassive && m.Sum("sonde_passive_available", nil) != 1 {
		return r, fmt.Errorf("sonde_passive_available is not 1: the observer does not run: %s", d.out.tail(1000))
	}
	wait := p.passiveWait
	if !withPassive {
		wait = p.activeWait
		if wait == 0 {
			wait = time.Duration((r.w3 + 5) * float64(time.Second))
		}
	}
	ev, err := newEventReader(ctx, d)
	if err != nil {
		return r, err
	}

	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	load := e.startLoad(lctx, p.targets, ScanPort, connload.Config{
		Rate:     p.loadRate,
		Duration: p.settle + wait + 10*time.Second, Workers: 1, Timeout: time.Second,
	})
	if withPassive {
		s.Command = append(s.Command, load.line)
	}
	if err := d.sleep(ctx, p.settle); err != nil {
		return r, err
	}
	if err := load.alive(); err != nil {
		return r, err
	}
	ruleStart := time.Now()
	if err := e.fleet.SetReject([]netip.Prefix{p.slice}); err != nil {
		return r, err
	}
	restored := false
	defer func() {
		if !restored {
			_ = e.fleet.SetReject(nil) // on an error path; the run reports that error
		}
	}()
	ruleEnd := time.Now()
	r.onsetSpread = ruleEnd.Sub(ruleStart).Seconds()
	detected := map[netip.Addr]time.Time{}
	deadline := ruleEnd.Add(wait)
	for len(detected) < k && time.Now().Before(deadline) {
		if err := d.sleep(ctx, 50*time.Millisecond); err != nil {
			return r, err
		}
		evs, err := ev.all(ctx)
		if err != nil {
			return r, err
		}
		r.count(evs, p.slice, detected)
	}
	r.waited = time.Since(ruleEnd).Seconds()
	// Late events of the others: a false trigger may come after the last
	// detection.
	if err := d.sleep(ctx, 200*time.Millisecond); err != nil {
		return r, err
	}
	evs, err := ev.all(ctx)
	if err != nil {
		return r, err
	}
	r.count(evs, p.slice, detected)
	for _, at := range detected {
		r.detected = append(r.detected, at.Sub(ruleEnd).Seconds())
		r.fromEarliest = append(r.fromEarliest, at.Sub(ruleStart).Seconds())
	}
	slices.Sort(r.detected)
	slices.Sort(r.fromEarliest)
	restored = true
	if err := e.fleet.SetReject(nil); err != nil {
		return r, err
	}
	stopLoad()
	if r.load, err = load.wait(); err != nil {
		return r, err
	}
	return r, d.stop()
}

// count tallies evs: the first unhealthy event of each slice target in
// detected, state changes and triggers of the other targets as false.
func (r *detectRun) count(evs []faultEvent, slice netip.Prefix, detected map[netip.Addr]time.Time) {
	for _, x := range evs {
		ap, err := netip.ParseAddrPort(x.Target)
		in := err == nil && slice.Contains(ap.Addr())
		switch {
		case x.Kind == "passive":
			r.triggers++
			if !in {
				r.falseTriggers++
			}
		case x.Kind == "state" && x.To == "unhealthy":
			if !in {
				r.falseUnhealthy++
			} else if _, dup := detected[ap.Addr()]; !dup {
				detected[ap.Addr()] = x.Time
			}
		}
	}
}

// targetsOf lists every address of prefix with port.
func targetsOf(prefix netip.Prefix, port uint16) []netip.AddrPort {
	var out []netip.AddrPort
	for a := prefix.Masked().Addr(); prefix.Contains(a); a = a.Next() {
		out = append(out, netip.AddrPortFrom(a, port))
	}
	return out
}

// loadProc is a `sonde bench connect-load` process in the prober namespace.
type loadProc struct {
	cmd  *exec.Cmd
	line string
	out  lockedBuffer
	err  error // from Start
	done chan struct{}
}

// startLoad starts the client load on every address of prefix at port in
// the prober namespace (c's Targets are not used); ctx ends it.
func (e *env) startLoad(ctx context.Context, prefix netip.Prefix, port uint16, c connload.Config) *loadProc {
	args := []string{"bench", "connect-load",
		"-rate", strconv.Itoa(c.Rate), "-duration", c.Duration.String(),
		"-workers", strconv.Itoa(max(c.Workers, 1)), "-timeout", c.Timeout.String()}
	if c.Count > 0 {
		args = append(args, "-count", strconv.Itoa(c.Count))
	}
	args = append(args, "-port", strconv.Itoa(int(port)), prefix.String())
	l := &loadProc{cmd: e.command(ctx, e.opt.Binary, args...), done: make(chan struct{})}
	l.line = commandLine(l.cmd)
	var stderr lockedBuffer
	l.cmd.Stdout, l.cmd.Stderr = &l.out, &stderr
	if l.err = l.cmd.Start(); l.err != nil {
		close(l.done)
		return l
	}
	go func() {
		l.err = l.cmd.Wait()
		if l.err != nil {
			l.err = fmt.Errorf("%w: %s", l.err, stderr.tail(1000))
		}
		close(l.done)
	}()
	return l
}

// alive reports an error when the load has ended already.
func (l *loadProc) alive() error {
	select {
	case <-l.done:
		return fmt.Errorf("the client load ended early: %v: %s", l.err, l.out.tail(500))
	default:
		return nil
	}
}

// wait waits for the load to end and returns what it did.
func (l *loadProc) wait() (connload.Result, error) {
	<-l.done
	// Stopped through its context, it ends its load early and reports it.
	if l.err != nil && (l.cmd.ProcessState == nil || !l.cmd.ProcessState.Success()) {
		return connload.Result{}, fmt.Errorf("client load: %w", l.err)
	}
	return connload.ParseResult([]byte(l.out.tail(4000)))
}

// cpuSample is one slice of the CPU measurement.
type cpuSample struct {
	observer    bool
	seconds     float64 // the slice's length
	conns       float64 // connections the client opened (its namespace's TCP ActiveOpens)
	client      float64 // the client's user+system CPU seconds
	benchCPU    float64 // this process's CPU seconds: the fleet's listeners accept and close
	irq         float64 // the machine's hard and soft interrupt seconds
	machineBusy float64 // the machine's busy seconds, anything else running included
	steal       float64 // seconds the hypervisor ran other guests on the machine's CPUs
	observed    uint64  // connections the observer counted as connected
}

// work is the CPU seconds the connections cost: the client's, the fleet's
// and the interrupts'.
func (c cpuSample) work() float64 {
	return c.client + c.benchCPU + c.irq
}

// perConn returns v per connection of the slice, in µs.
func (c cpuSample) perConn(v float64) float64 {
	if c.conns == 0 {
		return 0
	}
	return v / c.conns * 1e6
}

// rate is the client's connections a second in the slice.
func (c cpuSample) rate() float64 {
	if c.seconds <= 0 {
		return 0
	}
	return c.conns / c.seconds
}

// cpuResult is the CPU measurement.
type cpuResult struct {
	samples []cpuSample
	// progNs and progRuns are the observer programs' run time and runs
	// over progConns connections, from the kernel's statistics.
	progNs, progRuns, progConns uint64
}

// cpuAttachments is how many times the observer's programs are attached in
// the CPU slices "on": its cost is measured cpuAttachments-fold, above the
// noise of the machine, and divided back.
const cpuAttachments = 6

// passiveCPU measures the observer's CPU cost under one client load of
// p.cpuRate connections a second. The observer is opened once, watching the
// load's targets; then, slice after slice of p.cpuSlice, it is detached or
// attached cpuAttachments times (off, on, on, off, ...: a drift of the
// machine weighs on both), so that the slices share one client, one fleet
// and one set of maps and differ in the attachments alone. One more slice,
// attached once, with the kernel's BPF statistics on gives the programs'
// own run time.
func (e *env) passiveCPU(ctx context.Context, s *Scenario, p passivePlan) (res cpuResult, err error) {
	targets := targetsOf(p.cpuTargets, ScanPort)
	before, err := bpfobjs.FDs(bpfobjs.Programs)
	if err != nil {
		return res, err
	}
	obs, err := bpf.OpenPassive(bpf.PassiveOptions{MaxTargets: len(targets)})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, obs.Close()) }()
	after, err := bpfobjs.FDs(bpfobjs.Programs)
	if err != nil {
		return res, err
	}
	progs := bpfobjs.Added(before, after)
	entries := make([]bpf.WatchEntry, len(targets))
	for i, t := range targets {
		entries[i] = bpf.WatchEntry{Addr: t, Slot: uint32(i), Threshold: 3}
	}
	if err := obs.Watch(entries); err != nil {
		return res, err
	}
	if err := obs.SetAttachments(0); err != nil {
		return res, err
	}
	// Loading the observer made garbage: collect it now, not in a slice.
	runtime.GC()
	n := 2 * p.cpuRounds
	// A slice to warm up, the measured ones, the statistics slice, and
	// room for the toggles between them.
	cfg := connload.Config{Rate: p.cpuRate, Duration: time.Duration(n+2)*p.cpuSlice + 3*time.Second, Workers: 2, Timeout: time.Second}
	e.opt.Progress("passive: CPU", "slices", n, "slice", p.cpuSlice)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l := e.startLoad(ctx, p.cpuTargets, ScanPort, cfg)
	s.Command = append(s.Command, l.line)
	if l.err != nil {
		return res, fmt.Errorf("client load: %w", l.err)
	}
	pid := l.cmd.Process.Pid
	if err := sleepCtx(ctx, p.cpuSlice); err != nil {
		return res, err
	}
	for i := range n {
		on := i%4 == 1 || i%4 == 2
		times := 0
		if on {
			times = cpuAttachments
		}
		if err := obs.SetAttachments(times); err != nil {
			return res, err
		}
		c, err := cpuSlice(ctx, l, pid, obs, len(targets), p.cpuSlice)
		if err != nil {
			return res, fmt.Errorf("CPU slice %d: %w", i+1, err)
		}
		c.observer = on
		res.samples = append(res.samples, c)
	}
	if err := obs.SetAttachments(1); err != nil {
		return res, err
	}
	st, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return res, fmt.Errorf("enable BPF run-time statistics: %w", err)
	}
	ns0, runs0, err := bpfobjs.ProgRuntime(progs)
	if err != nil {
		st.Close()
		return res, err
	}
	c, err := cpuSlice(ctx, l, pid, obs, len(targets), p.cpuSlice)
	ns1, runs1, err2 := bpfobjs.ProgRuntime(progs)
	st.Close()
	if err = errors.Join(err, err2); err != nil {
		return res, fmt.Errorf("statistics slice: %w", err)
	}
	res.progNs, res.progRuns, res.progConns = ns1-ns0, runs1-runs0, uint64(c.conns)
	if _, err := l.wait(); err != nil {
		return res, err
	}
	return res, nil
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// progUs is the programs' run time per connection, in µs.
func (c cpuResult) progUs() float64 {
	if c.progConns == 0 {
		return 0
	}
	return float64(c.progNs) / float64(c.progConns) / 1e3
}

// cpuSlice measures d of the running load l (client process pid): the
// client's, this process's and the interrupts' CPU, and the connections
// the client opened and the observer counted (its first slots counters).
func cpuSlice(ctx context.Context, l *loadProc, pid int, obs *bpf.Passive, slots int, d time.Duration) (cpuSample, error) {
	var c cpuSample
	m0, err := markSlice(pid, obs, slots)
	if err != nil {
		return c, err
	}
	if err := sleepCtx(ctx, d); err != nil {
		return c, err
	}
	m1, err := markSlice(pid, obs, slots)
	if err != nil {
		return c, err
	}
	if err := l.alive(); err != nil {
		return c, err
	}
	c.seconds = m1.at.Sub(m0.at).Seconds()
	c.conns = float64(m1.opens - m0.opens)
	c.client = m1.client.CPU - m0.client.CPU
	c.benchCPU = m1.bench.CPU - m0.bench.CPU
	c.irq = float64(m1.cpu.IRQ-m0.cpu.IRQ) / host.ClockTicks
	c.machineBusy = float64(m1.cpu.Busy-m0.cpu.Busy) / host.ClockTicks
	c.steal = float64(m1.cpu.Steal-m0.cpu.Steal) / host.ClockTicks
	c.observed = m1.seen - m0.seen
	return c, nil
}

// sliceMark is what a CPU slice is measured between.
type sliceMark struct {
	at            time.Time
	cpu           host.CPU
	bench, client host.Process
	opens         uint64 // the client's namespace's TCP ActiveOpens
	seen          uint64 // connections the observer counted in its first slots
}

// markSlice reads a sliceMark of client process pid. The observer's
// counters, a system call per slot, are read first, so that the CPU
// readings and the time are taken close together.
func markSlice(pid int, obs *bpf.Passive, slots int) (m sliceMark, err error) {
	for i := range slots {
		st, err := obs.Stats(uint32(i))
		if err != nil {
			return m, err
		}
		m.seen += st.Connected
	}
	if m.cpu, err = host.ReadCPU(); err != nil {
		return m, err
	}
	if m.bench, err = host.ReadProcess(os.Getpid()); err != nil {
		return m, err
	}
	if m.client, err = host.ReadProcess(pid); err != nil {
		return m, fmt.Errorf("client: %w", err)
	}
	if m.opens, err = host.TCPActiveOpens(pid); err != nil {
		return m, fmt.Errorf("client: %w", err)
	}
	m.at = time.Now()
	return m, nil
}

// memResult is the observer's maps for memTargets watched targets.
type memResult struct {
	targets int
	maps    []bpfobjs.Map
	watch   time.Duration // how long Watch of every target took
}

// watchBytes is the memory of the watch maps (those named watch*).
func (m memResult) watchBytes() uint64 {
	var n uint64
	for _, x := range m.maps {
		if strings.HasPrefix(x.Name, "watch") {
			n += x.Bytes
		}
	}
	return n
}

// totalBytes is the memory of every map of the observer.
func (m memResult) totalBytes() uint64 {
	var n uint64
	for _, x := range m.maps {
		n += x.Bytes
	}
	return n
}

// passiveMemory opens an observer for n targets, watches n (address,
// port) targets of the bench prefix, and reads what the kernel charges to
// each of its maps. No connection is made.
func passiveMemory(n int) (memResult, error) {
	r := memResult{targets: n}
	before, err := bpfobjs.FDs(bpfobjs.Maps)
	if err != nil {
		return r, err
	}
	obs, err := bpf.OpenPassive(bpf.PassiveOptions{MaxTargets: n})
	if err != nil {
		return r, err
	}
	defer obs.Close()
	entries := make([]bpf.WatchEntry, n)
	for i := range entries {
		entries[i] = bpf.WatchEntry{
			Addr:      netip.AddrPortFrom(addrAt(i%fleetSize()), uint16(FirstSteadyPort+i/fleetSize())),
			Slot:      uint32(i),
			Threshold: 3,
		}
	}
	start := time.Now()
	if err := obs.Watch(entries); err != nil {
		return r, err
	}
	r.watch = time.Since(start)
	// After Watch: the watch tables it built are maps of their own, held
	// by the observer and published through its maps of maps.
	after, err := bpfobjs.FDs(bpfobjs.Maps)
	if err != nil {
		return r, err
	}
	r.maps, err = bpfobjs.MapMemory(bpfobjs.Added(before, after))
	return r, err
}

// passiveResult is everything the scenario measured.
type passiveResult struct {
	with, without detectRun
	slice         int // targets made to refuse
	cpu           cpuResult
	mem           memResult
	quick         bool
	cpuSlice      time.Duration // of each CPU slice
}

// Goals of the passive scenario.
const (
	passiveDetectGoal   = time.Second // a refusing target unhealthy under traffic, at interval 30 s
	passiveOverheadGoal = 3.0         // % of one core at passiveCPURate observed connections a second
	passiveMemoryGoal   = 64 << 20    // bytes of the watch map for a million targets
)

// cpuOverhead returns the median work per connection (µs) of the slices
// without and with the observer, and the observer's cost per connection:
// the median, lowest and highest difference within the pairs of adjacent
// slices (each pair has one of each), and the standard error of their
// mean, all divided by attachments (the times the programs were attached in
// the slices "on"). The spread of the differences is the noise the median
// is read against.
func cpuOverhead(samples []cpuSample, attachments int) (o overhead, ok bool) {
	var offs, ons, diffs []float64
	for i, c := range samples {
		v := c.perConn(c.work())
		if c.observer {
			ons = append(ons, v)
		} else {
			offs = append(offs, v)
		}
		if i%2 == 1 && samples[i-1].observer != c.observer {
			d := v - samples[i-1].perConn(samples[i-1].work())
			if !c.observer {
				d = -d
			}
			diffs = append(diffs, d/float64(attachments))
		}
	}
	if len(diffs) < 2 {
		return o, false
	}
	var mean, ss float64
	for _, d := range diffs {
		mean += d / float64(len(diffs))
	}
	for _, d := range diffs {
		ss += (d - mean) * (d - mean)
	}
	se := math.Sqrt(ss/float64(len(diffs)-1)) / math.Sqrt(float64(len(diffs)))
	return overhead{off: median(offs), on: median(ons), attachments: attachments,
		cost: median(diffs), lo: slices.Min(diffs), hi: slices.Max(diffs), mean: mean, se: se}, true
}

// overhead is the observer's CPU cost from the slices with and without it,
// in µs per connection.
type overhead struct {
	off, on      float64 // median work per connection without and with it
	attachments  int     // times the programs were attached in the slices with it
	cost, lo, hi float64 // median, lowest and highest paired difference, per attachment
	mean, se     float64 // mean paired difference per attachment, and its standard error
}

// bound returns the cost the overhead goal is checked against, in µs per
// connection: the mean paired difference, the estimate of the observer's
// cost (the median is reported beside it, for the spread), but never less
// than the programs' own run time (progUs), which it includes and which
// the kernel measures without the noise of the rest of the machine.
func (o overhead) bound(progUs float64) float64 { return max(o.mean, progUs) }

// atRate converts µs per connection into % of one core at rate
// connections a second.
func atRate(usPerConn float64, rate int) float64 { return usPerConn * float64(rate) / 1e6 * 100 }

// report adds the metrics, goals and notes.
func (r *passiveResult) report(s *Scenario) {
	ms := func(sec float64) float64 { return sec * 1e3 }
	const mib = 1 << 20
	for _, x := range []struct {
		name string
		d    detectRun
	}{{"with passive", r.with}, {"active only", r.without}} {
		if !x.d.ran {
			continue
		}
		s.add(x.name+": detected", float64(len(x.d.detected)), "targets")
		if len(x.d.detected) > 0 {
			s.add(x.name+": time to unhealthy p50", ms(x.d.detected[len(x.d.detected)/2]), "ms")
			s.add(x.name+": time to unhealthy max", ms(slices.Max(x.d.fromEarliest)), "ms")
		}
		s.add(x.name+": passive triggers", float64(x.d.triggers), "")
		s.add(x.name+": client connections", float64(x.d.load.Connections), "")
		s.add(x.name+": client refused", float64(x.d.load.Refused), "")
	}
	if r.without.ran {
		s.add("W1 (from first failing probe)", ms(r.without.w1), "ms")
		s.add("W3 (from onset)", ms(r.without.w3), "ms")
	}
	o, ok := cpuOverhead(r.cpu.samples, cpuAttachments)
	if ok {
		var rates []float64
		var observed, conns uint64
		for _, c := range r.cpu.samples {
			rates = append(rates, c.rate())
			if c.observer {
				observed += c.observed
				conns += uint64(c.conns)
			}
		}
		s.addRuns("CPU: client rate", rates, "connections/s")
		if m := median(rates); m < float64(passiveCPURate)*0.95 {
			s.note("the client reached %.0f connections/s (median of the slices), not %d: the machine could not carry more; costs are per connection and scaled to %d/s", m, passiveCPURate, passiveCPURate)
		}
		s.add("CPU: work per connection, observer off", o.off, "µs")
		s.add(fmt.Sprintf("CPU: work per connection, observer on ×%d", o.attachments), o.on, "µs")
		s.add("CPU: observer cost per connection (paired median)", o.cost, "µs")
		s.add("CPU: observer cost per connection (paired mean)", o.mean, "µs")
		s.add("CPU: standard error of the mean", o.se, "µs")
		s.add("CPU: lowest paired difference", o.lo, "µs")
		s.add("CPU: highest paired difference", o.hi, "µs")
		s.add("CPU: connections seen by the observer", float64(observed), "")
		s.add("CPU: connections made while it was on", float64(conns), "")
		t := &Table{Columns: []string{"slice", "observer", "connections", "rate/s", "client µs/conn", "fleet µs/conn", "irq µs/conn", "work µs/conn", "machine µs/conn", "steal % of CPUs"}}
		for i, c := range r.cpu.samples {
			t.Rows = append(t.Rows, []string{strconv.Itoa(i + 1), strconv.FormatBool(c.observer), fmt.Sprintf("%.0f", c.conns),
				fmt.Sprintf("%.0f", c.rate()), fmt.Sprintf("%.2f", c.perConn(c.client)),
				fmt.Sprintf("%.2f", c.perConn(c.benchCPU)), fmt.Sprintf("%.2f", c.perConn(c.irq)),
				fmt.Sprintf("%.2f", c.perConn(c.work())), fmt.Sprintf("%.2f", c.perConn(c.machineBusy)),
				fmt.Sprintf("%.1f", c.steal/max(c.seconds, 1e-9)/float64(runtime.NumCPU())*100)})
		}
		s.Tables = append(s.Tables, t)
	}
	if r.cpu.progConns > 0 {
		s.add("CPU: observer programs per connection", r.cpu.progUs()*1e3, "ns")
		s.add("CPU: observer program runs per connection", float64(r.cpu.progRuns)/float64(r.cpu.progConns), "")
		s.add("CPU: observer programs at 20,000/s", atRate(r.cpu.progUs(), passiveCPURate), "% of a core")
	}
	if len(r.mem.maps) > 0 {
		for _, m := range r.mem.maps {
			s.add(fmt.Sprintf("memory: map %s (max %d)", m.Name, m.MaxEntries), float64(m.Bytes)/mib, "MiB")
		}
		s.add("memory: watch maps", float64(r.mem.watchBytes())/mib, "MiB")
		s.add("memory: all maps", float64(r.mem.totalBytes())/mib, "MiB")
		s.add("memory: Watch of every target", r.mem.watch.Seconds(), "s")
	}
	passiveGoals(s, r)
	s.note("onset: the refusing rule (nftables, `reject with tcp reset` in the fleet namespace) applies somewhere inside one nft command (%.1f ms with passive evidence); p50 counts from its end, max from its start", ms(r.with.onsetSpread))
	if r.quick {
		s.note("-quick: active-only detection is not waited for (%.0f s of observation after the onset); its bound is W3 as the daemon computes it and exports it in sonde_check_failure_window_from_onset_seconds", r.without.waited)
	}
	s.note("CPU work = the client's user+system time (/proc/PID/stat) + this process's (the fleet's listeners accept and close each connection) + the machine's hard and soft interrupt time, per connection the client opened (its namespace's TCP ActiveOpens); the client closes each connection with an RST (SO_LINGER 0), as proxies do, so neither side keeps TIME_WAIT sockets. One client load runs throughout; the observer, opened once, is detached and attached %d times (each state change runs its programs %d times) for slices of %s in turn (off, on, on, off, …), so a drift of the shared machine weighs on both and the slices differ in the attachments alone; each adjacent pair gives a difference, divided by %d: their median is the cost, their spread the noise. \"observer programs\" is the kernel's own run-time statistic of the two programs (BPF_ENABLE_STATS, in one more slice): their run time alone, without the tracepoints' own dispatch, with the statistic's own two clock reads a run", cpuAttachments, cpuAttachments, r.cpuSlice, cpuAttachments)
	s.note("memory: memlock of each map of an observer opened for %d targets with %d IPv4 targets watched, as the kernel reports it (bpf_map_info)", r.mem.targets, r.mem.targets)
}

// passiveGoals checks the scenario's goals on what was measured.
func passiveGoals(s *Scenario, r *passiveResult) {
	const mib = 1 << 20
	if r.with.ran {
		worst := maxOr0(r.with.fromEarliest)
		s.goal("refusing target unhealthy < 1 s with passive evidence (interval 30 s)",
			len(r.with.detected) == r.slice && worst < passiveDetectGoal.Seconds(),
			"%d of %d refusing targets unhealthy, latest %.0f ms after the earliest possible onset", len(r.with.detected), r.slice, worst*1e3)
	}
	if r.without.ran && !r.quick {
		worst := maxOr0(r.without.detected)
		s.goal("active only: unhealthy within W3, the bound without traffic",
			len(r.without.detected) == r.slice && worst <= r.without.w3,
			"%d of %d within W3 = %.1f s (latest %.1f s after the onset)", len(r.without.detected), r.slice, r.without.w3, worst)
	}
	if r.with.ran || r.without.ran {
		f := r.with.falseTriggers + r.with.falseUnhealthy + r.without.falseTriggers + r.without.falseUnhealthy + r.without.triggers
		s.goal("0 false triggers or detections", f == 0,
			"%d triggers and %d unhealthy among targets that kept answering; %d triggers without a passive block", r.with.falseTriggers+r.without.falseTriggers, r.with.falseUnhealthy+r.without.falseUnhealthy, r.without.triggers)
	}
	if o, ok := cpuOverhead(r.cpu.samples, cpuAttachments); ok && r.cpu.progConns > 0 {
		prog := r.cpu.progUs()
		pct := atRate(o.bound(prog), passiveCPURate)
		s.goal("observer overhead ≤ 3 % of one core at 20,000 connections/s", pct <= passiveOverheadGoal,
			"%.1f %% of a core: %.2f µs per connection, the larger of the programs' own run time (%.2f µs) and the mean paired difference of the slices with the observer attached %d times and without, divided by %d (%.2f ± %.2f µs, the standard error; median %.2f µs, from %.2f to %.2f)",
			pct, o.bound(prog), prog, o.attachments, o.attachments, o.mean, o.se, o.cost, o.lo, o.hi)
	}
	if len(r.mem.maps) > 0 {
		s.goal("watch map for 1 M targets ≤ 64 MiB", r.mem.watchBytes() <= passiveMemoryGoal,
			"%.1f MiB in the watch maps (%.0f B per target), %.1f MiB in all the observer's maps", float64(r.mem.watchBytes())/mib, float64(r.mem.watchBytes())/float64(r.mem.targets), float64(r.mem.totalBytes())/mib)
	}
}
