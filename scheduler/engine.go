package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler/internal/ring"
)

// TargetSpec describes one target to the engine.
type TargetSpec struct {
	Check uint16 // index of the target's check
	// Leader names the target whose probes this one shares (P4). For [New]
	// it is the leader's index in the slice, the target's own index when it
	// leads. For [Edit.Add] it is the id of a target in the engine (or one
	// added earlier in the same edit) whose stream this one joins, or
	// [Alone].
	Leader   uint32
	Disabled bool // excluded from probing, evaluation and pool decisions (E6)
	// Resume, when not nil, is the state the target starts in instead of
	// its check's initial state: its state before a restart. Only the
	// published fields count; Disabled is taken from the spec.
	Resume *TargetStatus
}

// Alone as a [TargetSpec.Leader] given to [Edit.Add] makes the target lead a
// probe stream of its own.
const Alone = ^uint32(0)

// Event is a state change of one target.
type Event struct {
	Target  uint32        // target id
	From    State         // state before
	To      State         // state after
	Outcome probe.Outcome // outcome of the probe (or passive evidence) that caused the change
	Status  uint16        // its HTTP status, if any
	Streak  int           // consecutive results of that kind, the change's included
	At      int64         // Nanotime at which the probe completed, or the passive evidence was seen
	// Passive says that passive evidence ([Engine.Evidence]), not a probe,
	// caused the change. It only ever makes a target unhealthy.
	Passive bool
}

// Observer is told about results and state changes. Its methods are called on
// shard goroutines, concurrently for different shards; they must be quick and
// must not call back into the engine's Step or Run.
type Observer interface {
	// Result is called for every applied probe outcome, once for each
	// enabled target that shares the probe, and for every applied piece
	// of passive evidence ([Engine.Evidence]), which has r.Passive set.
	Result(id uint32, r probe.Result)
	// Transition is called when a target's state changes.
	Transition(e Event)
}

// Options tune an Engine. The zero value is usable.
type Options struct {
	Shards   int           // number of shards; default runtime.GOMAXPROCS(0)
	Tick     time.Duration // timing-wheel resolution, 1 ms..1 s; default 1 ms
	RingSize int           // results a shard can queue; default 65536
	Clock    Clock         // default a RealClock
	Observer Observer      // may be nil
	Seed     uint64        // seeds jitter and the placement of targets on shards; same seed, same schedule
}

// Engine schedules probes and evaluates their results. Build it with [New],
// then either call [Engine.Run] (real time) or drive it with [Engine.Step]
// (simulation); change its checks and targets while it works with
// [Engine.Edit]. Deliver, Edit and the reader methods are safe for
// concurrent use.
type Engine struct {
	clock     Clock
	observer  Observer
	tick      int64 // ns
	base      int64 // Nanotime of tick 0
	seed      uint64
	shardBits uint
	shards    []*shard
	locs      *locTable
	tab       atomic.Pointer[checkTable] // the latest checks, for readers and the editor
	live      atomic.Int64               // targets in the engine
	invalid   atomic.Uint64
	overflows atomic.Uint64
	stopped   atomic.Bool

	editMu sync.Mutex // one Edit at a time; guards books
	books  books
}

// ErrInvalidTarget is returned (wrapped) by New and Edit for a target the
// engine cannot run.
var ErrInvalidTarget = errors.New("invalid target")

// New builds an engine for targets evaluated by checks; target i gets id i.
// Each check of an enabled target needs a Launcher. The first probe of every
// stream leaves when the engine starts (its first Step or Run), paced only
// by its check's [Check.FirstProbes].
func New(checks []Check, targets []TargetSpec, opt Options) (*Engine, error) {
	return NewFunc(checks, len(targets), func(id uint32) TargetSpec { return targets[id] }, opt)
}

// NewFunc is [New] for n targets whose specs spec gives by index, so that a
// large fleet's specs need not all be held at once: spec may be called more
// than once for an index, and must give the same spec each time.
func NewFunc(checks []Check, n int, spec func(id uint32) TargetSpec, opt Options) (*Engine, error) {
	if opt.Shards <= 0 {
		opt.Shards = runtime.GOMAXPROCS(0)
	}
	if opt.Tick <= 0 {
		opt.Tick = time.Millisecond
	}
	if opt.Tick < time.Millisecond || opt.Tick > time.Second {
		return nil, fmt.Errorf("tick %v: want 1ms..1s", opt.Tick)
	}
	if opt.RingSize <= 0 {
		opt.RingSize = 1 << 16
	}
	if opt.Clock == nil {
		opt.Clock = NewRealClock()
	}
	if n >= 1<<32-1 {
		return nil, fmt.Errorf("%w: %d targets is more than the engine holds", ErrInvalidTarget, n)
	}
	tab, err := newCheckTable(checks, nil)
	if err != nil {
		return nil, err
	}
	if err := validateTargets(tab.checks, n, spec); err != nil {
		return nil, err
	}
	e := &Engine{
		clock:     opt.Clock,
		observer:  opt.Observer,
		tick:      int64(opt.Tick),
		base:      opt.Clock.Nanotime(),
		seed:      opt.Seed,
		shardBits: uint(bits.Len(uint(opt.Shards - 1))),
		locs:      newLocTable(),
	}
	e.tab.Store(tab)
	e.shards = make([]*shard, opt.Shards)
	for i := range e.shards {
		e.shards[i] = e.newShard(i, opt)
		e.shards[i].use(tab)
	}
	e.books.init(len(e.shards))
	if err := e.place(n, spec); err != nil {
		return nil, err
	}
	return e, nil
}

// validateTargets checks the specs given to New.
func validateTargets(checks []Check, n int, spec func(uint32) TargetSpec) error {
	active := make([]bool, n)
	for id := range uint32(n) {
		t := spec(id)
		if int(t.Check) >= len(checks) {
			return fmt.Errorf("%w: target %d: check %d does not exist", ErrInvalidTarget, id, t.Check)
		}
		if int(t.Leader) >= n {
			return fmt.Errorf("%w: target %d: leader %d does not lead a stream", ErrInvalidTarget, id, t.Leader)
		}
		l := spec(t.Leader)
		if l.Leader != t.Leader {
			return fmt.Errorf("%w: target %d: leader %d does not lead a stream", ErrInvalidTarget, id, t.Leader)
		}
		if checks[t.Check].Timeout != checks[l.Check].Timeout {
			return fmt.Errorf("%w: target %d: its timeout differs from its leader %d's", ErrInvalidTarget, id, t.Leader)
		}
		if !t.Disabled {
			active[t.Leader] = true
		}
	}
	for id := range uint32(n) {
		if t := spec(id); t.Leader == id && active[id] && checks[t.Check].Launcher == nil {
			return fmt.Errorf("%w: target %d: check %d has no launcher", ErrInvalidTarget, id, t.Check)
		}
	}
	return nil
}

// placeChunk is how many of New's targets are queued before their shards
// apply them: a fleet's additions are never all held as commands at once.
const placeChunk = 1 << 16

// place gives New's targets ids equal to their indices, puts every stream on
// one shard (its leader's, chosen by a hash) and adds them to their shards,
// each leader before its followers, placeChunk at a time. The shards do not
// run yet: New applies the additions itself, at the clock's present, so
// their first probes are due at once.
func (e *Engine) place(count int, spec func(uint32) TargetSpec) error {
	n := uint64(len(e.shards))
	shardOf := func(leader uint32) int { return int(mix64(e.seed^uint64(leader)) % n) }
	maxLocal := uint32(1<<(32-e.shardBits) - 1)
	ed := e.Edit()
	e.locs.reserve(count)
	for id := range uint32(count) {
		t := spec(id)
		sh := shardOf(t.Leader)
		if ed.e.books.shards[sh].next == maxLocal {
			ed.Abort()
			return fmt.Errorf("%w: %d targets do not fit %d shards", ErrInvalidTarget, count, n)
		}
		ed.assign(id, sh, t)
	}
	now := e.clock.Nanotime()
	queued := 0
	apply := func() {
		for si, s := range e.shards {
			s.now = now
			s.refresh()
			for i := range ed.cmds[si] {
				s.command(&ed.cmds[si][i])
			}
			ed.cmds[si] = ed.cmds[si][:0]
		}
		queued = 0
	}
	for pass := range 2 {
		for id := range uint32(count) {
			t := spec(id)
			if (t.Leader == id) != (pass == 0) {
				continue
			}
			leader := Alone
			if pass == 1 {
				leader = t.Leader
			}
			ed.queueAdd(id, leader, t)
			if queued++; queued == placeChunk {
				apply()
			}
		}
	}
	apply()
	ed.Commit() // nothing left to post: the books and the edit sequence
	for _, s := range e.shards {
		s.publish()
	}
	return nil
}

func (e *Engine) newShard(idx int, opt Options) *shard {
	s := &shard{
		e:    e,
		idx:  idx,
		ring: ring.New[arrival](opt.RingSize),
		rng:  mix64(opt.Seed+uint64(idx)) | 1,
		wake: make(chan struct{}, 1),
	}
	s.dir.Store(new([]*recBlock))
	s.refresh()
	// One tick before the start: New files its targets' first probes, due
	// at the start, in the wheel, and the first step sends them.
	s.wheel = newWheel(e.tickFloor(e.base) - 1)
	s.fire = s.onTimer
	s.wheel.touch = s.touch
	return s
}

// locate returns the shard and local index of id, or false for an id the
// engine never had.
func (e *Engine) locate(id uint32) (*shard, uint32, bool) {
	l, ok := e.locs.get(id)
	if !ok {
		return nil, 0, false
	}
	return e.shards[l&(1<<e.shardBits-1)], l >> e.shardBits, true
}

// tickFloor returns the last tick at or before ns.
func (e *Engine) tickFloor(ns int64) int64 { return floorDiv(ns-e.base, e.tick) }

// floorDiv divides rounding towards minus infinity; b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Deliver hands a probe result to the shard that owns its target. It is safe
// for concurrent use, never blocks and never drops a result: it takes no lock
// unless the shard's lock-free ring is full, when the result waits in an
// overflow list (counted in [Stats].Overflows). Results for ids the engine
// never had are counted and dropped, and so are results after Run returned;
// results for a probe no longer in flight (its target removed, say) are
// counted as stale by the shard.
func (e *Engine) Deliver(r probe.Result) {
	s, i, ok := e.locate(r.ID)
	if !ok {
		e.invalid.Add(1)
		return
	}
	if e.stopped.Load() {
		return
	}
	if s.deliver(&r, i) {
		e.overflows.Add(1)
	}
}

// Step runs every shard once at time now, in shard order on the calling
// goroutine, and returns the Nanotime of the next timer (-1 when none). It is
// for simulations with a [SimClock]; do not mix it with Run. Edits committed
// before a Step take effect in it.
func (e *Engine) Step(now int64) int64 {
	next := int64(-1)
	for _, s := range e.shards {
		s.step(now)
		if t := s.nextEvent(); t >= 0 && (next < 0 || t < next) {
			next = t
		}
	}
	return next
}

// Run drives the engine in real time, one goroutine per shard, until ctx is
// done. Results delivered after Run returns are dropped.
func (e *Engine) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, s := range e.shards {
		wg.Go(func() { s.run(ctx) })
	}
	wg.Wait()
	e.stopped.Store(true)
}

// Len returns the number of ids the engine has given out, in use or free:
// every id it ever had is below it.
func (e *Engine) Len() int { return int(e.locs.n.Load()) }

// Checks returns the number of checks as of the latest edit.
func (e *Engine) Checks() int { return len(e.tab.Load().checks) }

// Check returns the settings of check ci as of the latest edit.
func (e *Engine) Check(ci int) *Check { return &e.tab.Load().checks[ci] }

// Status returns a reader's copy of target id's health. It is safe to call at
// any time from any goroutine; an id the engine never had reads as the zero
// TargetStatus.
func (e *Engine) Status(id uint32) TargetStatus {
	s, i, ok := e.locate(id)
	if !ok {
		return TargetStatus{}
	}
	rec := s.published(i)
	if rec == nil {
		return TargetStatus{}
	}
	return rec.load()
}

// Clock returns the engine's clock.
func (e *Engine) Clock() Clock { return e.clock }

// Stats returns the engine's counters summed over its shards.
func (e *Engine) Stats() Stats {
	st := Stats{
		Targets:   int(e.live.Load()),
		Shards:    len(e.shards),
		Invalid:   e.invalid.Load(),
		Overflows: e.overflows.Load(),
	}
	for _, s := range e.shards {
		ss := &s.stats
		// Results before dispatched: every result read is of a probe
		// whose dispatch is counted, so Results never exceeds Dispatched.
		st.Results += ss.results.Load()
		st.Dispatched += ss.dispatched.Load()
		st.Timeouts += ss.timeouts.Load()
		st.Stale += ss.stale.Load()
		st.Late += ss.late.Load()
		st.Transitions += ss.transition.Load()
		st.Retransmits += ss.retransmit.Load()
		st.Rechecks += ss.rechecks.Load()
		st.Evidence += ss.evidence.Load()
		st.PassiveIgnored += ss.ignored.Load()
		st.LatenessSum += time.Duration(ss.lateSum.Load())
		st.LatenessMax = max(st.LatenessMax, time.Duration(ss.lateMax.Load()))
		for b := range ss.lateCount {
			st.LatenessCounts[b] += ss.lateCount[b].Load()
		}
	}
	return st
}

// mix64 is the splitmix64 finaliser: a fast, well-spread hash of x.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
