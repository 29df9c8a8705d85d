// Package passivewatch is the daemon's passive evidence (docs/semantics.md,
// "Passive evidence"): the eBPF observer of the connections other processes
// on this host open to the targets of checks with a passive block, opened
// when the first such check is loaded; the tracker of their runs of
// failures, which acts on the engine; and their counters per pool. It reads
// the running configuration through a [Fleet], so the daemon is one user of
// it among others.
//
// A watched endpoint (address and port) keeps its slot, and with it its
// counters, for as long as a check watches it; a slot given up is given out
// again only a load later, so that the records of the old endpoint still in
// the observer's ring are not taken for the new one's.
package passivewatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler/passive"
	"github.com/sondeprobe/sonde/server/web/api"
)

// Fleet is a running configuration as the watch reads it.
type Fleet interface {
	// Config is the configuration, its targets indexed by the engine's ids.
	Config() *config.Config
	// PoolsOf calls fn for every pool that lists target id.
	PoolsOf(id uint32, fn func(pi int))
}

// Trigger is a trigger of passive evidence with the fleet its target is of,
// handed to [Options.OnTrigger].
type Trigger struct {
	passive.Trigger
	Fleet Fleet
}

// Options configure a [Watch].
type Options struct {
	Engine passive.Engine // what triggers act on
	// OnTrigger, when not nil, is told of every trigger after it was
	// counted, on the goroutine that reads the observer; it must not block.
	OnTrigger func(Trigger)
	Logger    *slog.Logger
	// Open opens the observer; nil for bpf.OpenPassive (tests give one
	// that fails).
	Open func(bpf.PassiveOptions) (*bpf.Passive, error)
}

// Watch runs passive evidence for a daemon. Its methods are safe for
// concurrent use.
type Watch struct {
	opt     Options
	tracker *passive.Tracker
	view    atomic.Pointer[view] // what the API and the trigger callback read

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
	pools    [][]int            // per slot, the pools its connections count in (current fleet)
	counted  []bpf.PassiveStats // per slot, what is already in conns and retrans
	series   map[string]bool    // pools whose series exist
	watching bool               // a check asks for passive evidence
}

// view is what readers need of the watched set: the fleet it was built
// for, and each target's slot.
type view struct {
	fleet  Fleet
	slotOf map[uint32]uint32 // target id → slot
}

// minSlots is the fewest slots the observer is opened with: its counters
// cost 72 bytes per slot (its watch table 32 bytes per watched IPv4
// endpoint), and most fleets need no more.
const minSlots = 1 << 16

// New returns a watch that watches nothing until [Watch.Use] gives it a
// fleet whose checks ask for passive evidence.
func New(opt Options) *Watch {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Open == nil {
		opt.Open = bpf.OpenPassive
	}
	w := &Watch{
		opt:    opt,
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
	w.tracker = passive.NewTracker(opt.Engine, w.onTrigger)
	w.view.Store(&view{})
	return w
}

// Register adds the watch's instruments to reg.
func (w *Watch) Register(reg prometheus.Registerer) {
	reg.MustRegister(w.triggers, (*collector)(w))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sonde_passive_available",
		Help: "1 when passive evidence is observed; 0 when a check asks for it and the observer cannot run (see the log), or no check asks.",
	}, func() float64 {
		if w.Runs() {
			return 1
		}
		return 0
	}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sonde_passive_watched_targets",
		Help: "Endpoints (address and port) whose connections from other processes on this host are watched.",
	}, func() float64 {
		w.mu.Lock()
		defer w.mu.Unlock()
		return float64(len(w.slots))
	}))
}

// collector reports the connection counters, brought up to date with the
// observer's at each scrape, and the records the observer could not send.
type collector Watch

var dropsDesc = prometheus.NewDesc("sonde_passive_events_dropped_total",
	"Failure records of the passive observer not sent to sonde, by reason: rate_limited (past a target's threshold, more than about four per 100 ms) or ring_full. Connection counters stay exact.",
	[]string{"reason"}, nil)

var missedDesc = prometheus.NewDesc("sonde_passive_missed_total",
	"Socket state changes and retransmissions the kernel did not run the passive observer for, because another BPF program was running on that CPU: their connections' outcomes may be missing from the counters.",
	nil, nil)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	c.conns.Describe(ch)
	c.retrans.Describe(ch)
	ch <- dropsDesc
	ch <- missedDesc
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	w := (*Watch)(c)
	w.mu.Lock()
	w.harvest()
	var rate, full, missed uint64
	if w.obs != nil {
		rate, full = w.obs.Drops()
		missed = w.obs.Missed()
	}
	w.mu.Unlock()
	c.conns.Collect(ch)
	c.retrans.Collect(ch)
	ch <- prometheus.MustNewConstMetric(dropsDesc, prometheus.CounterValue, float64(rate), "rate_limited")
	ch <- prometheus.MustNewConstMetric(dropsDesc, prometheus.CounterValue, float64(full), "ring_full")
	ch <- prometheus.MustNewConstMetric(missedDesc, prometheus.CounterValue, float64(missed))
}

// outcomes are the outcome labels of sonde_passive_connections_total.
var outcomes = [...]string{bpf.PassiveConnected.String(), bpf.PassiveRefused.String(), bpf.PassiveTimedOut.String(),
	bpf.PassiveUnreachable.String(), bpf.PassiveAbandoned.String(), bpf.PassiveReset.String()}

// harvest adds what the observer counted since the last harvest to the
// counters of each slot's pools. w.mu is held.
func (w *Watch) harvest() {
	if w.obs == nil {
		return
	}
	for slot, pools := range w.pools {
		if len(pools) == 0 {
			continue
		}
		s, err := w.obs.Stats(uint32(slot))
		if err != nil {
			continue
		}
		was := &w.counted[slot]
		counts := [len(outcomes)][2]uint64{
			{s.Connected, was.Connected}, {s.Refused, was.Refused}, {s.TimedOut, was.TimedOut},
			{s.Unreachable, was.Unreachable}, {s.Abandoned, was.Abandoned}, {s.Reset, was.Reset},
		}
		for i, c := range counts {
			if c[0] > c[1] {
				for _, pi := range pools {
					w.conns.WithLabelValues(w.poolName(pi), outcomes[i]).Add(float64(c[0] - c[1]))
				}
			}
		}
		if s.Retransmits > was.Retransmits {
			for _, pi := range pools {
				w.retrans.WithLabelValues(w.poolName(pi)).Add(float64(s.Retransmits - was.Retransmits))
			}
		}
		*was = s
	}
}

// poolName returns the name of pool pi of the fleet the slots' pools
// belong to.
func (w *Watch) poolName(pi int) string {
	return w.view.Load().fleet.Config().Pools[pi].Name
}

// Use watches the targets of f's checks that ask for passive evidence,
// opening the observer the first time one does. Call it for each new
// configuration, after readers see it and before the engine runs its
// changes: targets it adds are refused by the engine until then, and the
// ids of targets it removes are not given out again before.
func (w *Watch) Use(f Fleet) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cfg := f.Config()
	members := map[netip.AddrPort][]passive.Member{}
	var order []netip.AddrPort
	for id := range cfg.Targets {
		t := &cfg.Targets[id]
		if !t.Valid() {
			continue
		}
		rule := cfg.Checks[t.Check].Passive
		if rule == nil {
			continue
		}
		ap := netip.AddrPortFrom(t.Addr().Unmap(), t.Port)
		if _, ok := members[ap]; !ok {
			order = append(order, ap)
		}
		members[ap] = append(members[ap], passive.Member{Target: uint32(id), Rule: *rule})
	}
	w.watching = len(order) > 0
	if !w.watching && w.obs == nil || w.watching && w.obs == nil && !w.open(len(order)) {
		w.view.Store(&view{fleet: f})
		w.tracker.SetTable(emptyTable)
		return
	}
	w.harvest() // with the pools the counts were made in
	// Slots of endpoints no longer watched rest a load before they are
	// given out again; those that rested since the last load are free.
	w.free = append(w.free, w.resting...)
	w.resting = w.resting[:0]
	for ap, s := range w.slots {
		if _, ok := members[ap]; !ok {
			delete(w.slots, ap)
			w.resting = append(w.resting, s)
		}
	}
	var fresh []uint32
	for _, ap := range order {
		if _, ok := w.slots[ap]; ok {
			continue
		}
		var s uint32
		if n := len(w.free); n > 0 {
			s, w.free = w.free[n-1], w.free[:n-1]
		} else {
			s = w.next
			w.next++
		}
		w.slots[ap] = s
		fresh = append(fresh, s)
	}
	if int(w.next) > w.size && !w.reopen(int(w.next)) {
		w.view.Store(&view{fleet: f})
		w.tracker.SetTable(emptyTable)
		return
	}
	if n := int(w.next); len(w.counted) < n {
		w.counted = append(w.counted, make([]bpf.PassiveStats, n-len(w.counted))...)
	}
	for _, s := range fresh {
		w.counted[s] = bpf.PassiveStats{} // the observer starts a slot that gets an endpoint from zero
	}
	if err := w.watch(f, order, members); err != nil {
		w.opt.Logger.Error("passive evidence: the watched set could not be changed; probing goes on", "err", err)
	}
}

// watch hands the observer and the tracker the watched set. w.mu is held.
func (w *Watch) watch(f Fleet, order []netip.AddrPort, members map[netip.AddrPort][]passive.Member) error {
	bySlot := make([][]passive.Member, w.next)
	pools := make([][]int, w.next)
	entries := make([]bpf.WatchEntry, 0, len(order))
	slotOf := make(map[uint32]uint32, len(order))
	for _, ap := range order {
		s := w.slots[ap]
		ms := members[ap]
		bySlot[s] = ms
		for _, m := range ms {
			slotOf[m.Target] = s
			f.PoolsOf(m.Target, func(pi int) {
				if !slices.Contains(pools[s], pi) {
					pools[s] = append(pools[s], pi)
				}
			})
		}
		entries = append(entries, bpf.WatchEntry{Addr: ap, Slot: s})
	}
	tab, err := passive.NewTable(bySlot)
	if err != nil {
		return err
	}
	for i := range entries {
		entries[i].Threshold = tab.Threshold(entries[i].Slot)
	}
	err = w.obs.Watch(entries)
	// Whatever the observer took, the pools and names are f's from now on.
	w.pools = pools
	w.view.Store(&view{fleet: f, slotOf: slotOf})
	w.tracker.SetTable(tab)
	w.keepSeries(f.Config())
	return err
}

// keepSeries makes the series of the pools of cfg's passive checks, at zero
// until something counts, and deletes those of pools that are gone or no
// longer watched. w.mu is held.
func (w *Watch) keepSeries(cfg *config.Config) {
	now := map[string]bool{}
	for _, p := range cfg.Pools {
		rule := cfg.Checks[p.CheckIndex].Passive
		if rule == nil {
			continue
		}
		now[p.Name] = true
		for _, o := range outcomes {
			w.conns.WithLabelValues(p.Name, o)
		}
		w.retrans.WithLabelValues(p.Name)
		w.triggers.WithLabelValues(p.Name, rule.Action.String())
	}
	for name := range w.series {
		if !now[name] {
			w.conns.DeletePartialMatch(prometheus.Labels{"pool": name})
			w.retrans.DeletePartialMatch(prometheus.Labels{"pool": name})
			w.triggers.DeletePartialMatch(prometheus.Labels{"pool": name})
		}
	}
	w.series = now
}

var emptyTable, _ = passive.NewTable(nil)

// open opens the observer for at least n endpoints and starts reading its
// events; it reports whether it could. w.mu is held.
func (w *Watch) open(n int) bool {
	// A quarter more than asked: a reload that adds a few targets needs
	// no new observer (which would start every counter from zero).
	size := max(minSlots, n+n/4)
	obs, err := w.opt.Open(bpf.PassiveOptions{MaxTargets: size})
	if err != nil {
		if w.openErr == nil || w.openErr.Error() != err.Error() {
			w.opt.Logger.Warn("passive evidence unavailable: checks with a passive block are probed as without", "err", err)
		}
		w.openErr = err
		return false
	}
	if w.openErr != nil || w.size == 0 {
		w.opt.Logger.Info("passive evidence: watching this host's connections to the targets", "slots", size)
	}
	w.openErr = nil
	w.obs, w.size = obs, size
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel, w.done = cancel, make(chan struct{})
	go w.read(ctx, obs, w.done)
	return true
}

// reopen replaces the observer with one of at least n slots; the counts
// of the old one are harvested first. w.mu is held.
func (w *Watch) reopen(n int) bool {
	w.harvest()
	w.closeObserver()
	clear(w.counted)
	return w.open(n)
}

// read hands the observer's events to the tracker until ctx is done or the
// observer closed.
func (w *Watch) read(ctx context.Context, obs *bpf.Passive, done chan struct{}) {
	defer close(done)
	err := obs.Read(ctx, func(e bpf.PassiveEvent) {
		if ev, ok := eventOf(e); ok {
			w.tracker.Handle(ev)
		}
	})
	if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
		w.opt.Logger.Error("passive evidence: reading the observer stopped", "err", err)
	}
}

// eventOf turns an observer's record into the tracker's event; false for
// one that is no evidence.
func eventOf(e bpf.PassiveEvent) (passive.Event, bool) {
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
		return ev, false
	}
	return ev, true
}

// closeObserver stops reading and closes the observer. w.mu is held.
func (w *Watch) closeObserver() {
	if w.obs == nil {
		return
	}
	w.cancel()
	if err := w.obs.Close(); err != nil {
		w.opt.Logger.Warn("passive evidence: closing the observer", "err", err)
	}
	<-w.done
	w.obs = nil
}

// Stop closes the observer for good.
func (w *Watch) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closeObserver()
	w.watching = false
}

// onTrigger counts a trigger in its target's pools and hands it on. It runs
// on the reading goroutine.
func (w *Watch) onTrigger(tr passive.Trigger) {
	f := w.view.Load().fleet
	if f == nil || int(tr.Target) >= len(f.Config().Targets) || !f.Config().Targets[tr.Target].Valid() {
		return
	}
	action := tr.Rule.Action.String()
	f.PoolsOf(tr.Target, func(pi int) {
		w.triggers.WithLabelValues(f.Config().Pools[pi].Name, action).Inc()
	})
	if w.opt.OnTrigger != nil {
		w.opt.OnTrigger(Trigger{Trigger: tr, Fleet: f})
	}
}

// Runs reports whether the observer runs: a check asks for passive
// evidence and the observer could be opened.
func (w *Watch) Runs() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.obs != nil && w.watching
}

// Describe says how passive evidence runs, for a load's log line: "off" (no
// check asks for it), "unavailable" (the observer cannot run: the warning
// before says why) or "N targets watched".
func (w *Watch) Describe() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !w.watching:
		return "off"
	case w.obs == nil:
		return "unavailable"
	}
	return fmt.Sprintf("%d targets watched", len(w.slots))
}

// Target returns what this host's connections to target id did, for the
// API, false when they are not watched.
func (w *Watch) Target(id uint32) (api.PassiveJSON, bool) {
	s, ok := w.view.Load().slotOf[id]
	if !ok {
		return api.PassiveJSON{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.obs == nil {
		return api.PassiveJSON{}, false
	}
	st, err := w.obs.Stats(s)
	if err != nil {
		return api.PassiveJSON{}, false
	}
	j := api.PassiveJSON{Connected: st.Connected, Refused: st.Refused, TimedOut: st.TimedOut, Unreachable: st.Unreachable,
		Abandoned: st.Abandoned, Reset: st.Reset, Retransmits: st.Retransmits, FailuresInARow: st.Run}
	if st.Handshakes > 0 {
		h := (st.HandshakeSum / time.Duration(st.Handshakes)).Seconds()
		j.HandshakeSeconds = &h
	}
	return j, true
}
