package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// TargetSpec describes one target to the engine. Its index in the slice given
// to [New] is its id.
type TargetSpec struct {
	Check    uint16 // index of the target's check
	Leader   uint32 // id of the target whose probes this one shares (P4); its own id when it leads
	Disabled bool   // excluded from probing, evaluation and pool decisions (E6)
}

// Event is a state change of one target.
type Event struct {
	Target  uint32        // target id
	From    State         // state before
	To      State         // state after
	Outcome probe.Outcome // outcome of the probe that caused the change
	Status  uint16        // its HTTP status, if any
	Streak  int           // consecutive results of that kind, the change's included
	At      int64         // Nanotime at which the probe completed
}

// Observer is told about results and state changes. Its methods are called on
// shard goroutines, concurrently for different shards; they must be quick and
// must not call back into the engine's Step or Run.
type Observer interface {
	// Result is called for every applied probe outcome, once for each
	// enabled target that shares the probe.
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
// (simulation). Deliver and the reader methods are safe for concurrent use.
type Engine struct {
	clock      Clock
	observer   Observer
	checks     []Check
	launchers  []probe.Launcher
	launcherOf []int    // per check, index into launchers
	queueOf    []int    // per check, index of its timeout's deadline queue in each shard
	timeouts   []int64  // per deadline queue, its timeout in ns
	loc        []uint32 // per target: local index << shardBits | shard
	shardBits  uint
	shards     []*shard
	tick       int64 // ns
	base       int64 // Nanotime of tick 0
	invalid    atomic.Uint64
	overflows  atomic.Uint64
	started    bool // first probes filed; set by the first Step or Run
	stopped    atomic.Bool
}

// ErrInvalidTarget is returned (wrapped) by New for a target it cannot run.
var ErrInvalidTarget = errors.New("invalid target")

// New builds an engine for targets evaluated by checks. Each check of an
// enabled target needs a Launcher. The first probe of every stream leaves
// when the engine starts, paced only by its check's [Check.FirstProbes].
func New(checks []Check, targets []TargetSpec, opt Options) (*Engine, error) {
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
	if len(targets) >= 1<<32-1 {
		return nil, fmt.Errorf("%w: %d targets is more than the engine holds", ErrInvalidTarget, len(targets))
	}
	e := &Engine{
		clock:    opt.Clock,
		observer: opt.Observer,
		checks:   append([]Check(nil), checks...),
		tick:     int64(opt.Tick),
		base:     opt.Clock.Nanotime(),
	}
	if err := e.indexLaunchers(); err != nil {
		return nil, err
	}
	active, err := validateTargets(e.checks, targets)
	if err != nil {
		return nil, err
	}
	e.shardBits = uint(bits.Len(uint(opt.Shards - 1)))
	if err := e.placeTargets(targets, active, opt); err != nil {
		return nil, err
	}
	return e, nil
}

// indexLaunchers assigns each distinct launcher an index.
func (e *Engine) indexLaunchers() error {
	e.launcherOf = make([]int, len(e.checks))
	for ci := range e.checks {
		c := &e.checks[ci]
		if err := c.Validate(); err != nil {
			return fmt.Errorf("check %d: %w", ci, err)
		}
		e.queueOf = append(e.queueOf, e.timeoutQueue(c.Timeout))
		e.launcherOf[ci] = -1
		if c.Launcher == nil {
			continue
		}
		for li, l := range e.launchers {
			if l == c.Launcher {
				e.launcherOf[ci] = li
				break
			}
		}
		if e.launcherOf[ci] < 0 {
			e.launcherOf[ci] = len(e.launchers)
			e.launchers = append(e.launchers, c.Launcher)
		}
	}
	return nil
}

// timeoutQueue returns the index of the deadline queue for timeout d,
// creating it on first use.
func (e *Engine) timeoutQueue(d time.Duration) int {
	for qi, t := range e.timeouts {
		if t == int64(d) {
			return qi
		}
	}
	e.timeouts = append(e.timeouts, int64(d))
	return len(e.timeouts) - 1
}

// validateTargets checks the specs and returns, per leader, whether any member
// of its stream is enabled.
func validateTargets(checks []Check, targets []TargetSpec) ([]bool, error) {
	active := make([]bool, len(targets))
	for id, t := range targets {
		if int(t.Check) >= len(checks) {
			return nil, fmt.Errorf("%w: target %d: check %d does not exist", ErrInvalidTarget, id, t.Check)
		}
		if int(t.Leader) >= len(targets) || targets[t.Leader].Leader != t.Leader {
			return nil, fmt.Errorf("%w: target %d: leader %d does not lead a stream", ErrInvalidTarget, id, t.Leader)
		}
		if checks[t.Check].Timeout != checks[targets[t.Leader].Check].Timeout {
			return nil, fmt.Errorf("%w: target %d: its timeout differs from its leader %d's", ErrInvalidTarget, id, t.Leader)
		}
		if !t.Disabled {
			active[t.Leader] = true
		}
	}
	for id, t := range targets {
		if t.Leader == uint32(id) && active[id] && checks[t.Check].Launcher == nil {
			return nil, fmt.Errorf("%w: target %d: check %d has no launcher", ErrInvalidTarget, id, t.Check)
		}
	}
	return active, nil
}

// placeTargets assigns every target to a shard (a stream's members share
// their leader's shard), fills the shards' tables and files each active
// leader's first probe.
func (e *Engine) placeTargets(targets []TargetSpec, active []bool, opt Options) error {
	n := opt.Shards
	e.loc = make([]uint32, len(targets))
	counts := make([]uint32, n)
	maxLocal := uint32(1<<(32-e.shardBits) - 1)
	for id, t := range targets {
		sh := uint32(mix64(opt.Seed^uint64(t.Leader)) % uint64(n))
		if counts[sh] == maxLocal {
			return fmt.Errorf("%w: %d targets do not fit %d shards", ErrInvalidTarget, len(targets), n)
		}
		e.loc[id] = counts[sh]<<e.shardBits | sh
		counts[sh]++
	}
	e.shards = make([]*shard, n)
	for i := range e.shards {
		e.shards[i] = e.newShard(i, int(counts[i]), opt)
	}
	last := make(map[uint32]uint32) // leader id → last local index in its chain, for shared streams
	now := e.clock.Nanotime()
	for id, t := range targets {
		s, i := e.locate(uint32(id))
		rec := &s.rec[i]
		rec.id = uint32(id)
		rec.check = t.Check
		c := &e.checks[t.Check]
		rec.ev.state = c.Initial
		rec.since.Store(now)
		rec.word.Store(packWord(&rec.ev, t.Disabled, false, 0, 0))
		if t.Disabled {
			rec.flags |= flagDisabled
		}
		if t.Leader == uint32(id) {
			rec.flags |= flagLeader
			if active[id] {
				rec.flags |= flagActive
				rec.at = unfiled // filed by start, after any Restore
			}
			continue
		}
		_, li := e.locate(t.Leader)
		prev, ok := last[t.Leader]
		if !ok {
			prev = li
		}
		if s.members == nil {
			s.members = make([]uint32, len(s.rec))
		}
		s.members[prev] = i
		s.members[i] = noEntry
		s.rec[prev].flags |= flagShared
		last[t.Leader] = i
	}
	return nil
}

func (e *Engine) newShard(idx, n int, opt Options) *shard {
	s := &shard{
		e:       e,
		idx:     idx,
		rec:     make([]record, n),
		wheel:   newWheel(e.tickFloor(e.base)),
		ring:    newRing[probe.Result](opt.RingSize),
		batches: make([][]probe.Request, len(e.launchers)),
		rng:     mix64(opt.Seed+uint64(idx)) | 1,
		wake:    make(chan struct{}, 1),
		first:   make([]pacer, len(e.checks)),
	}
	for ci := range e.checks {
		s.first[ci] = newPacer(e.checks[ci].FirstProbes, opt.Shards)
	}
	for i := range s.batches {
		s.batches[i] = make([]probe.Request, 0, maxBatch)
	}
	s.deadlines = make([]deadlineQueue, len(e.timeouts))
	for qi, t := range e.timeouts {
		s.deadlines[qi].timeout = t
	}
	s.fire = s.onTimer
	s.wheel.touch = s.touch
	return s
}

// locate returns the shard and local index of target id.
func (e *Engine) locate(id uint32) (*shard, uint32) {
	l := e.loc[id]
	return e.shards[l&(1<<e.shardBits-1)], l >> e.shardBits
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
// overflow list (counted in [Stats].Overflows). Results for unknown ids are
// counted and dropped, and so are results after Run returned.
func (e *Engine) Deliver(r probe.Result) {
	if int(r.ID) >= len(e.loc) {
		e.invalid.Add(1)
		return
	}
	if e.stopped.Load() {
		return
	}
	s, _ := e.locate(r.ID)
	if s.deliver(&r) {
		e.overflows.Add(1)
	}
}

// unfiled marks in record.at an active stream whose first probe is not
// filed yet.
const unfiled = math.MinInt64

// start files every active stream's next probe at time now: the time a
// Restore gave it, or a first probe paced by [shard.fileFirst]. It runs
// once, at the first Step or Run, so that Restore can set a stream's next
// probe before it is filed.
func (e *Engine) start(now int64) {
	if e.started {
		return
	}
	e.started = true
	for _, s := range e.shards {
		s.now = now
		for i := range s.rec {
			rec := &s.rec[i]
			switch {
			case rec.flags&flagActive == 0:
			case rec.at == unfiled:
				s.fileFirst(uint32(i))
			default:
				s.wheel.add(uint32(i), e.tickFloor(rec.at))
			}
		}
	}
}

// Step runs every shard once at time now, in shard order on the calling
// goroutine, and returns the Nanotime of the next timer (-1 when none). It is
// for simulations with a [SimClock]; do not mix it with Run.
func (e *Engine) Step(now int64) int64 {
	e.start(now)
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
	e.start(e.clock.Nanotime())
	var wg sync.WaitGroup
	for _, s := range e.shards {
		wg.Go(func() { s.run(ctx) })
	}
	wg.Wait()
	e.stopped.Store(true)
}

// Len returns the number of targets.
func (e *Engine) Len() int { return len(e.loc) }

// Check returns the settings of check ci.
func (e *Engine) Check(ci int) *Check { return &e.checks[ci] }

// CheckOf returns the index of target id's check.
func (e *Engine) CheckOf(id uint32) int {
	s, i := e.locate(id)
	return int(s.rec[i].check)
}

// Status returns a reader's copy of target id's health. It is safe to call at
// any time from any goroutine.
func (e *Engine) Status(id uint32) TargetStatus {
	s, i := e.locate(id)
	return s.rec[i].load()
}

// Clock returns the engine's clock.
func (e *Engine) Clock() Clock { return e.clock }

// Stats returns the engine's counters summed over its shards.
func (e *Engine) Stats() Stats {
	st := Stats{
		Targets:   len(e.loc),
		Shards:    len(e.shards),
		Invalid:   e.invalid.Load(),
		Overflows: e.overflows.Load(),
	}
	for _, s := range e.shards {
		ss := &s.stats
		st.Dispatched += ss.dispatched.Load()
		st.Results += ss.results.Load()
		st.Timeouts += ss.timeouts.Load()
		st.Stale += ss.stale.Load()
		st.Late += ss.late.Load()
		st.Transitions += ss.transition.Load()
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
