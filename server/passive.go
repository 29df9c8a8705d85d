package server

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/passive"
	"github.com/sondeprobe/sonde/server/web/api"
)

// passiveWatch is the daemon's passive evidence (docs/semantics.md, "Passive
// evidence"): the eBPF observer of the connections other processes on this
// host open to the targets of checks with a passive block, opened when the
// first such check is loaded; the tracker of their runs of failures, which
// acts on the engine; and their counters per pool.
//
// A watched endpoint (address and port) keeps its slot, and with it its
// counters, for as long as a check watches it; a slot given up is given out
// again only a load later, so that the records of the old endpoint still in
// the ring are not taken for the new one's.
type passiveWatch struct {
	d       *Daemon
	tracker *passive.Tracker
	view    atomic.Pointer[passiveView] // what the API and the trigger callback read

	triggers *prometheus.CounterVec // pool, action
	conns    *prometheus.CounterVec // pool, outcome
	retrans  *prometheus.CounterVec // pool

	// mu guards the fields below. Loads, scrapes and Stop take it, never
	// the goroutine that reads the observer's events.
	mu       sync.Mutex
	obs      *bpf.Passive
	openErr  error // why the observer could not be opened at the last try
	size     int   // the observer's slots
	cancel   context.CancelFunc
	done     chan struct{}
	slots    map[netip.AddrPort]uint32
	free     []uint32           // slots no endpoint holds, free to give out
	resting  []uint32           // slots given up at the last load: free from the next
	next     uint32             // the lowest slot never given out
	pools    [][]int            // per slot, the pools its connections count in (current generation)
	counted  []bpf.PassiveStats // per slot, what is already in conns and retrans
	series   map[string]bool    // pools whose series exist
	watching bool               // a check asks for passive evidence
}

// passiveView is what readers need of the watched set: the generation it was
// built for, and each target's slot.
type passiveView struct {
	g      *generation
	slotOf map[uint32]uint32 // target id → slot
}

// passiveMinSlots is the fewest slots the observer is opened with: its
// counters cost 72 bytes per slot (its watch table 32 bytes per watched
// IPv4 endpoint), and most fleets need no more.
const passiveMinSlots = 1 << 16

func newPassiveWatch(d *Daemon) *passiveWatch {
	pw := &passiveWatch{
		d:      d,
		slots:  map[netip.AddrPort]uint32{},
		series: map[string]bool{},
		triggers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sonde_passive_triggers_total",
			Help: "Triggers of passive evidence (failed connections in a row of other processes on this host to a target), by pool and action: recheck, eject, observe.",
		}, []string{"pool", "action"}),
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sonde_passive_connections_total",
			Help: "Connections other processes on this host opened to watched targets, by pool and outcome: connected, refused, timed_out, unreachable, abandoned (closed by the client while connecting: no evidence), reset (after the handshake).",
		}, []string{"pool", "outcome"}),
		retrans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sonde_passive_retransmits_total",
			Help: "TCP segments the watched connections retransmitted, by pool.",
		}, []string{"pool"}),
	}
	pw.tracker = passive.NewTracker(passiveEngine{d}, pw.onTrigger)
	pw.view.Store(&passiveView{})
	return pw
}

// passiveEngine is the running engine, for the tracker, which is made
// before it.
type passiveEngine struct{ d *Daemon }

func (e passiveEngine) Recheck(id uint32, gap time.Duration) bool {
	g := e.d.cur.Load()
	return g != nil && g.engine.Recheck(id, gap)
}

func (e passiveEngine) Evidence(id uint32, o probe.Outcome, at int64) bool {
	g := e.d.cur.Load()
	return g != nil && g.engine.Evidence(id, o, at)
}

// register adds the passive instruments to reg.
func (pw *passiveWatch) register(reg *prometheus.Registry) {
	reg.MustRegister(pw.triggers, (*passiveCollector)(pw))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sonde_passive_available",
		Help: "1 when passive evidence is observed; 0 when a check asks for it and the observer cannot run (see the log), or no check asks.",
	}, func() float64 {
		pw.mu.Lock()
		defer pw.mu.Unlock()
		if pw.obs != nil && pw.watching {
			return 1
		}
		return 0
	}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sonde_passive_watched_targets",
		Help: "Endpoints (address and port) whose connections from other processes on this host are watched.",
	}, func() float64 {
		pw.mu.Lock()
		defer pw.mu.Unlock()
		return float64(len(pw.slots))
	}))
}

// passiveCollector reports the connection counters, brought up to date with
// the observer's at each scrape, and the records the observer could not send.
type passiveCollector passiveWatch

var passiveDropsDesc = prometheus.NewDesc("sonde_passive_events_dropped_total",
	"Failure records of the passive observer not sent to sonde, by reason: rate_limited (past a target's threshold, more than about four per 100 ms) or ring_full. Connection counters stay exact.",
	[]string{"reason"}, nil)

func (c *passiveCollector) Describe(ch chan<- *prometheus.Desc) {
	c.conns.Describe(ch)
	c.retrans.Describe(ch)
	ch <- passiveDropsDesc
}

func (c *passiveCollector) Collect(ch chan<- prometheus.Metric) {
	pw := (*passiveWatch)(c)
	pw.mu.Lock()
	pw.harvest()
	var rate, full uint64
	if pw.obs != nil {
		rate, full = pw.obs.Drops()
	}
	pw.mu.Unlock()
	c.conns.Collect(ch)
	c.retrans.Collect(ch)
	ch <- prometheus.MustNewConstMetric(passiveDropsDesc, prometheus.CounterValue, float64(rate), "rate_limited")
	ch <- prometheus.MustNewConstMetric(passiveDropsDesc, prometheus.CounterValue, float64(full), "ring_full")
}

// harvest adds what the observer counted since the last harvest to the
// counters of each slot's pools. pw.mu is held.
func (pw *passiveWatch) harvest() {
	if pw.obs == nil {
		return
	}
	for slot, pools := range pw.pools {
		if len(pools) == 0 {
			continue
		}
		s, err := pw.obs.Stats(uint32(slot))
		if err != nil {
			continue
		}
		was := &pw.counted[slot]
		add := [...]struct {
			outcome string
			now     uint64
			was     *uint64
		}{
			{"connected", s.Connected, &was.Connected}, {"refused", s.Refused, &was.Refused},
			{"timed_out", s.TimedOut, &was.TimedOut}, {"unreachable", s.Unreachable, &was.Unreachable},
			{"abandoned", s.Abandoned, &was.Abandoned}, {"reset", s.Reset, &was.Reset},
		}
		for _, a := range add {
			if a.now > *a.was {
				for _, pi := range pools {
					pw.conns.WithLabelValues(pw.poolName(pi), a.outcome).Add(float64(a.now - *a.was))
				}
			}
			*a.was = a.now
		}
		if s.Retransmits > was.Retransmits {
			for _, pi := range pools {
				pw.retrans.WithLabelValues(pw.poolName(pi)).Add(float64(s.Retransmits - was.Retransmits))
			}
		}
		*was = s
	}
}

// poolName returns the name of pool pi of the generation the slots' pools
// belong to.
func (pw *passiveWatch) poolName(pi int) string {
	return pw.view.Load().g.cfg.Pools[pi].Name
}

// use watches the targets of g's checks that ask for passive evidence,
// opening the observer the first time one does. It runs with the daemon's
// updateMu held, after g is published and before the engine applies g's
// edit: targets it adds are refused by the engine until then, and the ids
// of targets it removes are not given out again before.
func (pw *passiveWatch) use(g *generation) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	members := map[netip.AddrPort][]passive.Member{}
	var order []netip.AddrPort
	for id := range g.cfg.Targets {
		t := &g.cfg.Targets[id]
		if !t.Valid() {
			continue
		}
		rule := g.cfg.Checks[t.Check].Passive
		if rule == nil {
			continue
		}
		ap := netip.AddrPortFrom(t.Addr().Unmap(), t.Port)
		if _, ok := members[ap]; !ok {
			order = append(order, ap)
		}
		members[ap] = append(members[ap], passive.Member{Target: uint32(id), Rule: *rule})
	}
	pw.watching = len(order) > 0
	if !pw.watching && pw.obs == nil || pw.watching && pw.obs == nil && !pw.open(len(order)) {
		pw.view.Store(&passiveView{g: g})
		pw.tracker.SetTable(emptyPassiveTable)
		return
	}
	pw.harvest() // with the pools the counts were made in
	// Slots of endpoints no longer watched rest a load before they are
	// given out again; those that rested since the last load are free.
	pw.free = append(pw.free, pw.resting...)
	pw.resting = pw.resting[:0]
	for ap, s := range pw.slots {
		if _, ok := members[ap]; !ok {
			delete(pw.slots, ap)
			pw.resting = append(pw.resting, s)
		}
	}
	var fresh []uint32
	for _, ap := range order {
		if _, ok := pw.slots[ap]; ok {
			continue
		}
		var s uint32
		if n := len(pw.free); n > 0 {
			s, pw.free = pw.free[n-1], pw.free[:n-1]
		} else {
			s = pw.next
			pw.next++
		}
		pw.slots[ap] = s
		fresh = append(fresh, s)
	}
	if int(pw.next) > pw.size && !pw.reopen(int(pw.next)) {
		pw.view.Store(&passiveView{g: g})
		pw.tracker.SetTable(emptyPassiveTable)
		return
	}
	if n := int(pw.next); len(pw.counted) < n {
		pw.counted = append(pw.counted, make([]bpf.PassiveStats, n-len(pw.counted))...)
	}
	for _, s := range fresh {
		pw.counted[s] = bpf.PassiveStats{} // the observer starts a slot that gets an endpoint from zero
	}
	if err := pw.watch(g, order, members); err != nil {
		pw.d.log.Error("passive evidence: the watched set could not be changed; probing goes on", "err", err)
	}
}

// watch hands the observer and the tracker the watched set. pw.mu is held.
func (pw *passiveWatch) watch(g *generation, order []netip.AddrPort, members map[netip.AddrPort][]passive.Member) error {
	bySlot := make([][]passive.Member, pw.next)
	pools := make([][]int, pw.next)
	entries := make([]bpf.WatchEntry, 0, len(order))
	slotOf := make(map[uint32]uint32, len(order))
	for _, ap := range order {
		s := pw.slots[ap]
		ms := members[ap]
		bySlot[s] = ms
		for _, m := range ms {
			slotOf[m.Target] = s
			g.poolsOf(m.Target, func(pi int) {
				if !slices.Contains(pools[s], pi) {
					pools[s] = append(pools[s], pi)
				}
			})
		}
		entries = append(entries, bpf.WatchEntry{Addr: ap, Slot: s, Threshold: passiveThreshold(ms)})
	}
	tab, err := passive.NewTable(bySlot)
	if err != nil {
		return err
	}
	err = pw.obs.Watch(entries)
	// Whatever the observer took, the pools and names are g's from now on.
	pw.pools = pools
	pw.view.Store(&passiveView{g: g, slotOf: slotOf})
	pw.tracker.SetTable(tab)
	pw.keepSeries(g)
	return err
}

// passiveOutcomes are the outcome labels of sonde_passive_connections_total.
var passiveOutcomes = [...]string{"connected", "refused", "timed_out", "unreachable", "abandoned", "reset"}

// keepSeries makes the series of the pools of g's passive checks, at zero
// until something counts, and deletes those of pools that are gone or no
// longer watched. pw.mu is held.
func (pw *passiveWatch) keepSeries(g *generation) {
	now := map[string]bool{}
	for _, p := range g.cfg.Pools {
		rule := g.cfg.Checks[p.CheckIndex].Passive
		if rule == nil {
			continue
		}
		now[p.Name] = true
		for _, o := range passiveOutcomes {
			pw.conns.WithLabelValues(p.Name, o)
		}
		pw.retrans.WithLabelValues(p.Name)
		pw.triggers.WithLabelValues(p.Name, rule.Action.String())
	}
	for name := range pw.series {
		if !now[name] {
			pw.conns.DeletePartialMatch(prometheus.Labels{"pool": name})
			pw.retrans.DeletePartialMatch(prometheus.Labels{"pool": name})
			pw.triggers.DeletePartialMatch(prometheus.Labels{"pool": name})
		}
	}
	pw.series = now
}

// passiveThreshold returns the failures in a row the observer reports one
// by one for an endpoint: the most any of its members' rules asks for.
func passiveThreshold(ms []passive.Member) int {
	n := 1
	for _, m := range ms {
		n = max(n, m.Rule.Failures)
	}
	return n
}

var emptyPassiveTable, _ = passive.NewTable(nil)

// open opens the observer for at least n endpoints and starts reading its
// events; it reports whether it could. pw.mu is held.
func (pw *passiveWatch) open(n int) bool {
	// A quarter more than asked: a reload that adds a few targets needs
	// no new observer (which would start every counter from zero).
	size := max(passiveMinSlots, n+n/4)
	obs, err := bpf.OpenPassive(bpf.PassiveOptions{MaxTargets: size})
	if err != nil {
		if pw.openErr == nil || pw.openErr.Error() != err.Error() {
			pw.d.log.Warn("passive evidence unavailable: checks with a passive block are probed as without", "err", err)
		}
		pw.openErr = err
		return false
	}
	if pw.openErr != nil || pw.size == 0 {
		pw.d.log.Info("passive evidence: watching this host's connections to the targets", "slots", size)
	}
	pw.openErr = nil
	pw.obs, pw.size = obs, size
	ctx, cancel := context.WithCancel(context.Background())
	pw.cancel, pw.done = cancel, make(chan struct{})
	go pw.read(ctx, obs, pw.done)
	return true
}

// reopen replaces the observer with one of at least n slots; the counts
// of the old one are harvested first. pw.mu is held.
func (pw *passiveWatch) reopen(n int) bool {
	pw.harvest()
	pw.closeObserver()
	clear(pw.counted)
	return pw.open(n)
}

// read hands the observer's events to the tracker until ctx is done or the
// observer closed.
func (pw *passiveWatch) read(ctx context.Context, obs *bpf.Passive, done chan struct{}) {
	defer close(done)
	err := obs.Read(ctx, func(e bpf.PassiveEvent) {
		ev := passive.Event{At: e.At, Slot: e.Slot, Run: e.Run}
		switch e.Outcome {
		case bpf.PassiveConnected:
			ev.Outcome = probe.Success
		case bpf.PassiveRefused:
			ev.Failure, ev.Outcome = true, probe.Refused
		case bpf.PassiveTimedOut:
			ev.Failure, ev.Outcome = true, probe.Timeout
		case bpf.PassiveUnreachable:
			ev.Failure, ev.Outcome = true, probe.Unreachable
		default:
			return // not evidence
		}
		pw.tracker.Handle(ev)
	})
	if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
		pw.d.log.Error("passive evidence: reading the observer stopped", "err", err)
	}
}

// closeObserver stops reading and closes the observer. pw.mu is held.
func (pw *passiveWatch) closeObserver() {
	if pw.obs == nil {
		return
	}
	pw.cancel()
	if err := pw.obs.Close(); err != nil {
		pw.d.log.Warn("passive evidence: closing the observer", "err", err)
	}
	<-pw.done
	pw.obs = nil
}

// stop closes the observer for good.
func (pw *passiveWatch) stop() {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	pw.closeObserver()
	pw.watching = false
}

// onTrigger counts a trigger, keeps it in the target's history and makes
// it an event. It runs on the reading goroutine.
func (pw *passiveWatch) onTrigger(tr passive.Trigger) {
	v := pw.view.Load()
	g := v.g
	if g == nil || !g.has(tr.Target) {
		return
	}
	d := pw.d
	action := tr.Rule.Action.String()
	t := g.cfg.Targets[tr.Target]
	ev := api.Event{
		Kind:    api.KindPassive,
		Time:    scheduler.WallTime(g.engine.Clock(), tr.At),
		Target:  t.AddrPort().String(),
		Host:    g.cfg.Hostnames[tr.Target],
		Check:   g.checkName(tr.Target),
		To:      action,
		Reason:  passiveReason(tr.Outcome),
		Streak:  tr.Rule.Failures,
		Message: fmt.Sprintf("%d failed connections in a row from this host within %v", tr.Rule.Failures, tr.Span.Round(time.Millisecond)),
	}
	g.poolsOf(tr.Target, func(pi int) {
		name := g.cfg.Pools[pi].Name
		ev.Pools = append(ev.Pools, name)
		pw.triggers.WithLabelValues(name, action).Inc()
	})
	if tr.Rule.Action != passive.Eject {
		// Evidence the engine applies reaches the history through the
		// observer; a recheck or an observation is marked here.
		r := probe.Result{ID: tr.Target, Outcome: tr.Outcome, Done: tr.At, Passive: true}
		d.hist.Record(g.hist, tr.Target, &r, g.engine)
	}
	d.events.Add(ev)
	d.log.Debug("passive trigger", "target", ev.Target, "pool", ev.Pools, "check", ev.Check, "action", action,
		"reason", ev.Reason, "failures", tr.Rule.Failures, "span", tr.Span, "accepted", tr.Accepted)
}

// passiveReason names a failure as the observer does.
func passiveReason(o probe.Outcome) string {
	if o == probe.Timeout {
		return "timed_out"
	}
	return o.String()
}

// PassiveRuns reports whether the passive observer runs: a check asks for
// passive evidence and the observer could be opened.
func (d *Daemon) PassiveRuns() bool {
	pw := d.passive
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return pw.obs != nil && pw.watching
}

// describe says how passive evidence runs, for the load's log line: "off"
// (no check asks for it), "unavailable" (the observer cannot run: the
// warning before says why) or "N targets watched".
func (pw *passiveWatch) describe() string {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	switch {
	case !pw.watching:
		return "off"
	case pw.obs == nil:
		return "unavailable"
	}
	return fmt.Sprintf("%d targets watched", len(pw.slots))
}

// json returns the observer's counters of target id for the API, false
// when it is not watched.
func (pw *passiveWatch) json(id uint32) (api.PassiveJSON, bool) {
	s, ok := pw.view.Load().slotOf[id]
	if !ok {
		return api.PassiveJSON{}, false
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.obs == nil {
		return api.PassiveJSON{}, false
	}
	st, err := pw.obs.Stats(s)
	if err != nil {
		return api.PassiveJSON{}, false
	}
	j := api.PassiveJSON{Connected: st.Connected, Refused: st.Refused, TimedOut: st.TimedOut, Unreachable: st.Unreachable,
		Abandoned: st.Abandoned, Reset: st.Reset, Retransmits: st.Retransmits, FailuresInARow: st.Run}
	if st.Connected > 0 {
		h := (st.HandshakeSum / time.Duration(st.Connected)).Seconds()
		j.HandshakeSeconds = &h
	}
	return j, true
}
