package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/sondeprobe/sonde/bench/fleet"
)

// The faults scenario runs `sonde run` with three pools over the same
// healthy targets, one per way of probing them (a raw SYN with eBPF capture,
// connect(), HTTP), all with the Global Accelerator preset, while the
// network between the prober and the fleet misbehaves, one fault at a time:
// it counts the targets each way wrongly declares unhealthy, then breaks a
// slice of the targets for real and times its detection under the same
// fault.

// faultsPort is where the faults scenario's daemon serves.
const faultsPort = 9203

// faultPrefix is what the impaired fleet answers for: as many addresses as
// the largest plan probes, from the benchmark range.
var faultPrefix = netip.MustParsePrefix("198.18.0.0/20")

// faultModes are the pools of the scenario's daemon, one per way of
// probing, in the order reported.
var faultModes = []string{"syn", "connect", "http"}

// fault is one misbehaviour of the network, or of the prober's host.
type fault struct {
	Name string // as reported and selected (Options.Faults)
	What string // what it does, for the report
	// impair returns the impairment for a check with timeout t.
	impair func(t time.Duration) fleet.Impairment
	// hogs starves the prober: busy loops on every CPU, at the prober's
	// priority, for the length of the fault.
	hogs bool
	// starvedSize marks the starved-prober plan: more targets, a shorter
	// timeout.
	starvedSize bool
}

// Faults are the faults the scenario knows, in the order it runs them.
var Faults = []fault{
	{Name: "loss-1", What: "1% of TCP packets lost, each direction", impair: loss(0.01)},
	{Name: "loss-5", What: "5% of TCP packets lost, each direction", impair: loss(0.05)},
	{Name: "loss-10", What: "10% of TCP packets lost, each direction", impair: loss(0.10)},
	{Name: "duplicate", What: "10% of TCP packets sent twice, each direction", impair: func(time.Duration) fleet.Impairment { return fleet.Impairment{Duplicate: 0.10} }},
	{Name: "reorder", What: "every frame held 0-20 ms at random, each direction: frames overtake each other", impair: func(time.Duration) fleet.Impairment {
		return fleet.Impairment{Delay: func() time.Duration { return rand.N(20 * time.Millisecond) }}
	}},
	{Name: "delay-spikes", What: "for 1 s in every 10 s, every frame held 75% of the timeout (each frame at most once per round trip)", impair: spikes},
	{Name: "starved", What: "busy loops on every CPU (two per CPU) at the prober's priority; the network is clean", hogs: true, starvedSize: true},
}

func loss(share float64) func(time.Duration) fleet.Impairment {
	return func(time.Duration) fleet.Impairment { return fleet.Impairment{Loss: share} }
}

// spikes holds every frame for 3/4 of the timeout during the first second of
// every 10 s. A spike no longer than its delay delays a round trip once: a
// frame it holds is released after it ends, and so is the answer to it.
func spikes(timeout time.Duration) fleet.Impairment {
	start := time.Now()
	hold := timeout * 3 / 4
	return fleet.Impairment{Delay: func() time.Duration {
		if time.Since(start)%(10*time.Second) < min(time.Second, hold) {
			return hold
		}
		return 0
	}}
}

// FaultNames lists the faults' names, for flag help and errors.
func FaultNames() []string {
	var names []string
	for _, f := range Faults {
		names = append(names, f.Name)
	}
	return names
}

// faultPlan is the size and timing of one fault's run.
type faultPlan struct {
	targets  int           // healthy targets per pool
	slice    int           // of them, how many break for real at the end
	interval time.Duration // probe interval
	timeout  time.Duration
	fall     int
	measure  time.Duration // how long false transitions are counted
}

func (e *env) faultPlan(f fault) faultPlan {
	p := faultPlan{targets: 1024, slice: 32, interval: 2 * time.Second, timeout: 2 * time.Second, fall: 3, measure: e.opt.FaultDuration}
	if f.starvedSize {
		p.targets, p.timeout = 4096, time.Second
	}
	if e.opt.Quick {
		p.targets, p.slice = p.targets/8, 16
	}
	return p
}

// faultRow is what one fault did to one way of probing.
type faultRow struct {
	fault, mode          string
	falsePerMin          float64
	falseTransitions     int
	falseDuringOutage    int
	localErrors          float64
	retransmits          float64
	detected, inside     int
	sliceN               int
	detectP50, detectMax float64 // seconds from the latest possible onset
	w1, w3               float64
}

// runFaults builds a kernel fleet behind an impairment stage and runs every
// chosen fault on it; the fleet goes at the end, unless Options.Keep.
func (e *env) runFaults(ctx context.Context, s *Scenario) (err error) {
	faults := e.chosenFaults()
	cfg := fleet.Config{Prefix: faultPrefix, Listen: []uint16{ScanPort}, HTTP: []uint16{HTTPPort}, Impair: true}
	f, err := fleet.New(cfg)
	if err != nil {
		return fmt.Errorf("build the impaired fleet: %w", err)
	}
	e.extra = append(e.extra, FleetInfo{Prefix: f.Prefix.String(), AnsweredBy: s.Fleet, ProberNS: f.ProberNS, FleetNS: f.FleetNS, ImpairNS: f.ImpairNS, Kept: e.opt.Keep, Dir: e.dir})
	if !e.opt.Keep {
		defer func() { err = errors.Join(err, f.Close()) }()
	}
	e.fleet = f
	s.Measure = fmt.Sprintf("`sonde run` probing the same healthy targets three ways (pools syn: tcp_mode syn; connect: tcp_mode connect; http: GET /), preset globalaccelerator, while the link to the fleet misbehaves (%s), for %s per fault; false = state changes to unhealthy of targets that answered all along; then a slice stops answering and its detection is timed against W1 and W3",
		strings.Join(FaultNames(), ", "), e.opt.FaultDuration)
	var rows []faultRow
	var runErr error
	for _, f := range faults {
		if err := ctx.Err(); err != nil {
			return err
		}
		e.opt.Progress("faults: fault", "name", f.Name)
		fr, err := e.runFault(ctx, s, f)
		if err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("fault %s: %w", f.Name, err))
			continue
		}
		rows = append(rows, fr...)
	}
	faultTable(s, rows)
	faultGoals(s, rows)
	s.note("impairment: a namespace between the prober's veth and the fleet's forwards every frame; nftables netdev rules there lose (numgen random) and duplicate (dup) TCP packets; delays and reordering come from a user-space bridge that reads each frame from a packet socket and sends it out of the other side after its delay (this kernel has no netem). The prober's own host is starved by busy loops instead.")
	s.note("a probe the prober could not judge (a reply lost to its own capture ring, a send or a worker too late on a starved host) is a local_error: no verdict, counted by cause in sonde_probe_local_errors_total")
	return runErr
}

// chosenFaults returns the faults Options.Faults names, or all.
func (e *env) chosenFaults() []fault {
	if len(e.opt.Faults) == 0 {
		return Faults
	}
	var out []fault
	for _, f := range Faults {
		if slices.Contains(e.opt.Faults, f.Name) {
			out = append(out, f)
		}
	}
	return out
}

// runFault runs one fault: healthy targets, the fault for the measuring
// time, then an outage of a slice under the same fault.
func (e *env) runFault(ctx context.Context, s *Scenario, f fault) ([]faultRow, error) {
	p := e.faultPlan(f)
	targets := blocks(0, p.targets)
	slice := blocks(p.targets-p.slice, p.slice)
	cfg := faultConfig(p, targets)
	d, err := e.startDaemon(ctx, "faults-"+f.Name, cfg, faultsPort)
	if err != nil {
		return nil, err
	}
	defer d.stop()
	if len(s.Command) == 0 {
		s.Command = append(s.Command, commandLine(d.cmd)+"   # config: three pools (syn, connect, http) over the same targets, preset globalaccelerator")
	}
	if _, err := d.waitReady(ctx, time.Minute); err != nil {
		return nil, err
	}
	// A start on a busy machine may take a few rounds: every target must
	// be healthy before the fault, or a false transition could be a true
	// one.
	if err := e.waitHealthy(ctx, d, len(faultModes)*p.targets, 30*p.interval+60*time.Second); err != nil {
		return nil, err
	}
	before, err := d.scrape(ctx)
	if err != nil {
		return nil, err
	}
	ev, err := newEventReader(ctx, d)
	if err != nil {
		return nil, err
	}

	im := fleet.Impairment{}
	if f.impair != nil {
		im = f.impair(p.timeout)
	}
	if err := e.fleet.Impair(im); err != nil {
		return nil, err
	}
	defer func() { _ = e.fleet.Impair(fleet.Impairment{}) }() // on an error path; the run reports that error
	stopHogs := func() {}
	if f.hogs {
		if stopHogs, err = startHogs(2 * runtime.NumCPU()); err != nil {
			return nil, err
		}
	}
	defer stopHogs()

	// False transitions while every target answers.
	falses := map[string]int{}
	end := time.Now().Add(p.measure)
	for time.Now().Before(end) {
		if err := d.sleep(ctx, min(time.Second, time.Until(end))); err != nil {
			return nil, err
		}
		evs, err := ev.next(ctx)
		if err != nil {
			return nil, err
		}
		for _, x := range evs {
			if x.To == "unhealthy" {
				falses[x.pool()]++
			}
		}
	}

	// A real outage under the same fault.
	ruleStart := time.Now()
	if err := e.fleet.SetDrop(slice); err != nil {
		return nil, err
	}
	defer func() { _ = e.fleet.SetDrop(nil) }()
	onset := time.Now() // the latest possible onset
	m, err := d.scrape(ctx)
	if err != nil {
		return nil, err
	}
	w1, w3 := map[string]float64{}, map[string]float64{}
	for _, mode := range faultModes {
		w1[mode] = m.Sum("sonde_check_failure_window_seconds", map[string]string{"check": mode})
		w3[mode] = m.Sum("sonde_check_failure_window_from_onset_seconds", map[string]string{"check": mode})
	}
	detected := map[string]map[netip.Addr]float64{}
	during := map[string]int{}
	for _, mode := range faultModes {
		detected[mode] = map[netip.Addr]float64{}
	}
	wait := onset.Add(time.Duration((slices.Max(slices.Collect(maps.Values(w3))) + 5) * float64(time.Second)))
	for time.Now().Before(wait) && countAll(detected) < len(faultModes)*p.slice {
		if err := d.sleep(ctx, 200*time.Millisecond); err != nil {
			return nil, err
		}
		evs, err := ev.next(ctx)
		if err != nil {
			return nil, err
		}
		for _, x := range evs {
			if x.To != "unhealthy" {
				continue
			}
			ap, err := netip.ParseAddrPort(x.Target)
			if err != nil {
				return nil, fmt.Errorf("event target %q: %w", x.Target, err)
			}
			if !prefixesContain(slice, ap.Addr()) {
				during[x.pool()]++
				continue
			}
			if _, dup := detected[x.pool()][ap.Addr()]; !dup && detected[x.pool()] != nil {
				detected[x.pool()][ap.Addr()] = x.Time.Sub(onset).Seconds()
			}
		}
	}
	s.note("%s: the outage rule took %.1f ms to apply; detection times count from its end (the latest possible onset)", f.Name, onset.Sub(ruleStart).Seconds()*1e3)
	after, err := d.scrape(ctx)
	if err != nil {
		return nil, err
	}
	if err := e.fleet.SetDrop(nil); err != nil {
		return nil, err
	}
	if err := e.fleet.Impair(fleet.Impairment{}); err != nil {
		return nil, err
	}
	stopHogs()
	lost, dup, delayed, err := e.fleet.ImpairCounts()
	if err == nil {
		s.note("%s: the stage lost %d and duplicated %d TCP packets and delayed %d frames so far (cumulative)", f.Name, lost, dup, delayed)
	}
	for _, cause := range []string{"capture", "late", "buffers", "descriptors", "ports", "permissions"} {
		if n := after.Sum("sonde_probe_local_errors_total", map[string]string{"cause": cause}) - before.Sum("sonde_probe_local_errors_total", map[string]string{"cause": cause}); n > 0 {
			s.note("%s: local errors (%s): %.0f", f.Name, cause, n)
		}
	}
	// Every probe has at most one result: since the daemon started, results
	// applied never outnumber probes dispatched (the engine publishes both
	// together). Answers that come after their probe ended are dropped and
	// counted as stale.
	results, dispatched := after.Sum("sonde_scheduler_results_total", nil), after.Sum("sonde_scheduler_probes_dispatched_total", nil)
	s.note("%s: %.0f results applied for %.0f probes dispatched since the start (the rest were in flight); %.0f answers came after their probe ended (dropped); the prober dropped %.0f duplicate SYN replies",
		f.Name, results, dispatched,
		after.Sum("sonde_scheduler_stale_answers_total", nil)-before.Sum("sonde_scheduler_stale_answers_total", nil),
		after.Sum("sonde_syn_duplicate_replies_total", nil)-before.Sum("sonde_syn_duplicate_replies_total", nil))
	s.add(f.Name+": duplicate results", math.Max(0, results-dispatched), "results")

	var rows []faultRow
	for _, mode := range faultModes {
		r := faultRow{
			fault: f.Name, mode: mode,
			falseTransitions:  falses[mode],
			falsePerMin:       float64(falses[mode]) / p.measure.Minutes(),
			falseDuringOutage: during[mode],
			localErrors: after.Sum("sonde_probes_total", map[string]string{"pool": mode, "outcome": "local_error"}) -
				before.Sum("sonde_probes_total", map[string]string{"pool": mode, "outcome": "local_error"}),
			detected: len(detected[mode]), sliceN: p.slice, w1: w1[mode], w3: w3[mode],
		}
		if mode == "syn" {
			r.retransmits = after.Sum("sonde_syn_retransmits_total", nil) - before.Sum("sonde_syn_retransmits_total", nil)
		}
		var ts []float64
		for _, t := range detected[mode] {
			ts = append(ts, t)
			if t <= r.w3 {
				r.inside++
			}
		}
		if len(ts) > 0 {
			slices.Sort(ts)
			r.detectP50, r.detectMax = ts[len(ts)/2], ts[len(ts)-1]
		}
		rows = append(rows, r)
	}
	return rows, d.stop()
}

// faultConfig is the daemon's configuration: one pool per mode over the
// same targets.
func faultConfig(p faultPlan, targets []netip.Prefix) string {
	var t []string
	for _, b := range targets {
		t = append(t, fmt.Sprintf("%q", b.String()))
	}
	list := "[" + strings.Join(t, ", ") + "]"
	timing := fmt.Sprintf("interval: %s, timeout: %s, rise: %d, fall: %d", p.interval, p.timeout, p.fall, p.fall)
	return fmt.Sprintf(`checks:
  syn: {preset: globalaccelerator, protocol: tcp, tcp_mode: syn, port: %d, %s}
  connect: {preset: globalaccelerator, protocol: tcp, tcp_mode: connect, port: %d, %s}
  http: {preset: globalaccelerator, protocol: http, port: %d, path: /, %s}
pools:
  - {name: syn, check: syn, targets: %s}
  - {name: connect, check: connect, targets: %s}
  - {name: http, check: http, targets: %s}
metrics: {per_target: false}
`, ScanPort, timing, ScanPort, timing, HTTPPort, timing, list, list, list)
}

// startHogs starts n busy loops as separate processes and returns a
// function that kills them (by PID) and waits for them; calling it twice
// is harmless.
func startHogs(n int) (func(), error) {
	var cmds []*exec.Cmd
	stop := func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		cmds = nil
	}
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("start a busy loop: %w", err)
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

// eventReader follows /api/v1/events from the moment it is made.
type eventReader struct {
	d     *daemon
	since uint64
}

// faultEvent is the part of an event the scenario reads.
type faultEvent struct {
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"`
	Target string    `json:"target"`
	Pools  []string  `json:"pools"`
	To     string    `json:"to"`
}

func (x *faultEvent) pool() string {
	if len(x.Pools) == 0 {
		return ""
	}
	return x.Pools[0]
}

func newEventReader(ctx context.Context, d *daemon) (*eventReader, error) {
	var page struct {
		Next uint64 `json:"next"`
	}
	if err := d.getJSON(ctx, "/api/v1/events?since=0&limit=1", &page); err != nil {
		return nil, err
	}
	return &eventReader{d: d, since: page.Next}, nil
}

// next returns the state events since the last call.
func (r *eventReader) next(ctx context.Context) ([]faultEvent, error) {
	evs, err := r.all(ctx)
	return slices.DeleteFunc(evs, func(x faultEvent) bool { return x.Kind != "state" }), err
}

// all returns the events of every kind since the last call.
func (r *eventReader) all(ctx context.Context) ([]faultEvent, error) {
	var page struct {
		Events []faultEvent `json:"events"`
		Next   uint64       `json:"next"`
	}
	if err := r.d.getJSON(ctx, fmt.Sprintf("/api/v1/events?since=%d&limit=0", r.since), &page); err != nil {
		return nil, err
	}
	r.since = page.Next
	return page.Events, nil
}

func prefixesContain(ps []netip.Prefix, a netip.Addr) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
}

func countAll(m map[string]map[netip.Addr]float64) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
}

// faultTable adds the side-by-side table to the report.
func faultTable(s *Scenario, rows []faultRow) {
	t := &Table{Columns: []string{"fault", "probing", "false unhealthy/min", "false", "false in outage", "local errors", "retransmits", "outage detected", "in W3", "p50 s", "max s", "W1 s", "W3 s"}}
	for _, r := range rows {
		t.Rows = append(t.Rows, []string{r.fault, r.mode, fmt.Sprintf("%.2f", r.falsePerMin), fmt.Sprintf("%d", r.falseTransitions), fmt.Sprintf("%d", r.falseDuringOutage),
			fmt.Sprintf("%.0f", r.localErrors), fmt.Sprintf("%.0f", r.retransmits),
			fmt.Sprintf("%d/%d", r.detected, r.sliceN), fmt.Sprintf("%d", r.inside),
			fmt.Sprintf("%.2f", r.detectP50), fmt.Sprintf("%.2f", r.detectMax), fmt.Sprintf("%.1f", r.w1), fmt.Sprintf("%.1f", r.w3)})
		s.add(r.fault+" "+r.mode+": false unhealthy", r.falsePerMin, "/min")
	}
	s.Tables = append(s.Tables, t)
}

// faultGoals checks the scenario's goals on the rows it has.
func faultGoals(s *Scenario, rows []faultRow) {
	by := map[string]faultRow{}
	for _, r := range rows {
		by[r.fault+"/"+r.mode] = r
	}
	for _, name := range []string{"loss-1", "loss-5", "loss-10"} {
		syn, ok1 := by[name+"/syn"]
		conn, ok2 := by[name+"/connect"]
		if !ok1 || !ok2 {
			continue
		}
		s.goal(name+": syn false unhealthy/min ≤ connect's", syn.falsePerMin <= conn.falsePerMin,
			"syn %.2f/min, connect %.2f/min", syn.falsePerMin, conn.falsePerMin)
		if name != "loss-10" {
			s.goal(name+": no false unhealthy (syn)", syn.falseTransitions == 0, "%d false transitions", syn.falseTransitions)
		}
	}
	for _, name := range []string{"duplicate", "reorder", "delay-spikes", "starved"} {
		n, have := 0, false
		for _, mode := range faultModes {
			if r, ok := by[name+"/"+mode]; ok {
				n, have = n+r.falseTransitions+r.falseDuringOutage, true
			}
		}
		if have {
			s.goal(name+": no false unhealthy (syn, connect, http)", n == 0, "%d false transitions", n)
		}
		if m, ok := s.Metric(name + ": duplicate results"); ok && name != "starved" {
			s.goal(name+": no duplicate results", m.Value == 0, "%.0f", m.Value)
		}
	}
	for _, mode := range faultModes {
		if r, ok := by["loss-5/"+mode]; ok {
			s.goal("loss-5: outage detected within W3 ("+mode+")", r.inside == r.sliceN,
				"%d of %d within W3 = %.1f s (max %.2f s)", r.inside, r.sliceN, r.w3, r.detectMax)
		}
	}
}
