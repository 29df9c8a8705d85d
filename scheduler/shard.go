package scheduler

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// Per-target flags kept by a shard.
const (
	flagLeader   = 1 << iota // the target's probes are sent (it leads its stream)
	flagActive               // leader with at least one enabled member: it is scheduled
	flagInFlight             // a probe is out; the wheel holds its deadline
	flagDisabled             // excluded from evaluation (E6)
	flagShared               // member of a shared stream with a successor in shard.members
)

// maxBatch is the most requests handed to a launcher in one call.
const maxBatch = 256

// record is a target's state as its shard keeps it: everything a probe's
// dispatch and result touch, including what readers see, in one 64-byte cache
// line. The shard writes word, latency, last and since with atomic stores;
// readers load them (see [Engine.Status]). Every other field is the shard's
// alone.
type record struct {
	id      uint32        // global target id
	dq      uint32        // position (low 32 bits) of the probe in flight in its deadline queue
	at      int64         // due time of the next probe, or send time while in flight
	word    atomic.Uint64 // published state, see packWord
	latency atomic.Uint64 // published latency: last success in µs << 32 | smoothed µs
	last    atomic.Int64  // published Nanotime of the last result, 0 before the first
	since   atomic.Int64  // published Nanotime of the last state change
	gen     uint32        // generation of the latest probe
	ev      evalState     // evaluator state
	check   uint16        // index into Engine.checks
	flags   uint8         // flag* bits
	_       uint8
}

// shard owns a subset of the targets: their evaluator state, their timers in
// its own timing wheel and the ring through which their results arrive. Only
// the shard's goroutine (or the single goroutine calling Engine.Step) touches
// its fields, except ring producers, the parked/wake pair, the published
// stats and the views, which are atomic.
type shard struct {
	e   *Engine
	idx int

	rec     []record // per target, by shard-local index
	members []uint32 // next member of a shared stream (P4), noEntry at the end; nil without shared streams

	wheel     *wheel
	deadlines []deadlineQueue // one per distinct timeout; Engine.queueOf maps checks to them
	ring      *ring[probe.Result]
	batches   [][]probe.Request // per launcher
	now       int64             // time of the step in progress
	rng       uint64            // jitter random state
	first     []pacer           // per check: the pace of its first probes
	fire      func(t timer)     // s.onTimer, bound once
	touched   uint8             // keeps touch's loads from being optimised away
	rx        [64]probe.Result  // batch of results being applied

	count  shardCounts // the shard's own tallies, published to stats after each step
	stats  shardStats
	parked atomic.Bool
	wake   chan struct{}

	// Results that found the ring full wait here, so a burst never blocks
	// a producer (not even a launcher answering from inside Launch on the
	// shard's own goroutine) and nothing is dropped. Off the hot path.
	overflowed atomic.Bool
	overflowMu sync.Mutex
	overflow   []probe.Result
	spare      []probe.Result // consumer-owned, swapped with overflow
}

// step applies arrived results, records the timeouts of probes past their
// deadline, and launches due probes, at time now.
func (s *shard) step(now int64) {
	s.now = now
	s.drain()
	s.expire()
	s.wheel.advance(s.e.tickFloor(now), s.fire)
	s.flush()
	s.publish()
}

// expire records a timeout for every probe whose deadline is at or before
// now. A timeout can make the next send due at once; expire then dispatches
// it, which may queue new deadlines behind the current ones, never before.
func (s *shard) expire() {
	for qi := range s.deadlines {
		q := &s.deadlines[qi]
		for {
			e, ok := q.front()
			if !ok || s.rec[e.idx].at+q.timeout > s.now {
				break
			}
			q.pop()
			s.timeout(e.idx, q.timeout)
		}
	}
}

// drain applies every result waiting in the ring and the overflow list. It
// takes them in batches and loads the batch's records together first, so the
// cache misses of a burst of answers overlap.
func (s *shard) drain() {
	for {
		n := 0
		for n < len(s.rx) && s.ring.pop(&s.rx[n]) {
			n++
		}
		if n == 0 {
			break
		}
		batch := s.rx[:n]
		var sum uint8
		for i := range batch {
			sum += s.rec[s.e.loc[batch[i].ID]>>s.e.shardBits].flags
		}
		s.touched += sum
		for i := range batch {
			s.receive(&batch[i])
		}
	}
	if !s.overflowed.Load() {
		return
	}
	s.overflowMu.Lock()
	s.overflow, s.spare = s.spare[:0], s.overflow
	s.overflowed.Store(false)
	s.overflowMu.Unlock()
	for i := range s.spare {
		s.receive(&s.spare[i])
	}
}

// receive applies one result if it answers the target's probe in flight.
func (s *shard) receive(r *probe.Result) {
	i := s.e.loc[r.ID] >> s.e.shardBits
	rec := &s.rec[i]
	if rec.flags&flagInFlight == 0 || rec.gen != r.Gen {
		s.count.stale++
		return
	}
	deadline := rec.at + int64(s.e.checks[rec.check].Timeout)
	if r.Done > deadline {
		// Answered after its timeout: it is a timeout, and the wheel
		// will record it at the deadline.
		s.count.late++
		return
	}
	if r.Done < rec.at {
		r.Done = rec.at
	}
	s.deadlines[s.e.queueOf[rec.check]].strike(rec.dq, i, rec.gen)
	s.complete(i, r)
}

// touch loads the records of a chunk of due timers before they fire: the
// loads are independent, so their cache misses overlap.
func (s *shard) touch(ts []timer) {
	var sum uint8
	for _, t := range ts {
		sum += s.rec[t.idx].flags
	}
	s.touched += sum
}

// onTimer handles a wheel expiry: a target's next send is due.
func (s *shard) onTimer(t timer) { s.dispatch(t.idx) }

// timeout records that target i's probe in flight reached its deadline.
func (s *shard) timeout(i uint32, timeout int64) {
	rec := &s.rec[i]
	r := probe.Result{
		ID:      rec.id,
		Gen:     rec.gen,
		Outcome: probe.Timeout,
		Latency: time.Duration(timeout),
		Done:    rec.at + timeout,
	}
	s.count.timeouts++
	s.complete(i, &r)
}

// fileFirst files target i's first probe: at once, or as soon as its check's
// first-probe pace allows. Every first probe is filed here, at the engine's
// start and for a target added later, so none waits for a slot inside its
// interval.
func (s *shard) fileFirst(i uint32) {
	rec := &s.rec[i]
	rec.at = s.first[rec.check].slot(s.now)
	if t := s.e.tickFloor(rec.at); t > s.wheel.now {
		s.wheel.add(i, t)
		return
	}
	s.dispatch(i) // due now; the step in progress (or the next) flushes it
}

// dispatch sends target i's next probe.
func (s *shard) dispatch(i uint32) {
	now := s.now
	rec := &s.rec[i]
	s.observeLateness(now - rec.at)
	rec.gen++
	rec.flags |= flagInFlight
	rec.at = now
	qi := s.e.queueOf[rec.check]
	deadline := now + s.deadlines[qi].timeout
	rec.dq = uint32(s.deadlines[qi].push(i, rec.gen))
	li := s.e.launcherOf[rec.check]
	b := append(s.batches[li], probe.Request{ID: rec.id, Gen: rec.gen, Sent: now, Deadline: deadline})
	s.batches[li] = b
	s.count.dispatched++
	if len(b) == maxBatch {
		s.flushOne(li)
	}
}

// complete applies a finished probe of leader i to every member of its stream
// and schedules the stream's next probe: the earliest any member wants, each
// counting its gap from the probe's completion or, at a fixed rate, from its
// send.
func (s *shard) complete(i uint32, r *probe.Result) {
	rec := &s.rec[i]
	rec.flags &^= flagInFlight
	s.count.results++
	sent := rec.at
	due, jitter, first := int64(0), time.Duration(0), true
	for m := i; m != noEntry; m = s.nextMember(m) {
		mr := &s.rec[m]
		if mr.flags&flagDisabled != 0 {
			continue
		}
		c := &s.e.checks[mr.check]
		s.apply(m, c, r)
		from := r.Done
		if c.Cadence == FixedRate {
			from = sent
		}
		if d := from + int64(c.gap(&mr.ev)); first || d < due {
			due = d
		}
		if first || c.Jitter < jitter {
			jitter = c.Jitter
		}
		first = false
	}
	if jitter > 0 {
		due += int64(s.random() % uint64(jitter))
	}
	rec.at = due
	// File the send in the tick that contains its due time: the wheel's
	// resolution may send a probe up to one tick early, never late, so it
	// never lengthens a detection window.
	if t := s.e.tickFloor(due); t > s.wheel.now {
		s.wheel.add(i, t)
		return
	}
	s.dispatch(i) // already due (a late result or a zero gap)
}

// nextMember returns the member after m in m's stream, or noEntry.
func (s *shard) nextMember(m uint32) uint32 {
	if s.rec[m].flags&flagShared == 0 {
		return noEntry
	}
	return s.members[m]
}

// apply evaluates one member's result, publishes it to readers and reports a
// state change. A result without a verdict on the target (a LocalError) is
// published and observed but not evaluated: state and streak stay, and the
// next probe follows the current state's gap.
func (s *shard) apply(m uint32, c *Check, r *probe.Result) {
	rec := &s.rec[m]
	if !r.Outcome.Verdict() {
		rec.last.Store(r.Done)
		rec.word.Store(packWord(&rec.ev, false, true, r.Outcome, 0))
		if obs := s.e.observer; obs != nil {
			obs.Result(rec.id, *r)
		}
		return
	}
	from := rec.ev.state
	ok := r.Outcome == probe.Success
	changed := c.observe(&rec.ev, ok)
	if ok {
		rec.recordLatency(r.Latency)
	}
	rec.last.Store(r.Done)
	if changed {
		rec.since.Store(r.Done)
	}
	rec.word.Store(packWord(&rec.ev, false, true, r.Outcome, r.Status))
	obs := s.e.observer
	if obs != nil {
		obs.Result(rec.id, *r)
	}
	if !changed {
		return
	}
	s.count.transitions++
	if obs != nil {
		obs.Transition(Event{
			Target:  rec.id,
			From:    from,
			To:      rec.ev.state,
			Outcome: r.Outcome,
			Status:  r.Status,
			Streak:  int(rec.ev.streak),
			At:      r.Done,
		})
	}
}

// flush hands every pending batch to its launcher.
func (s *shard) flush() {
	for li := range s.batches {
		if len(s.batches[li]) > 0 {
			s.flushOne(li)
		}
	}
}

func (s *shard) flushOne(li int) {
	s.e.launchers[li].Launch(s.idx, s.batches[li])
	s.batches[li] = s.batches[li][:0]
}

// random returns the next value of the shard's xorshift64* generator.
func (s *shard) random() uint64 {
	x := s.rng
	x ^= x >> 12
	x ^= x << 25
	x ^= x >> 27
	s.rng = x
	return x * 0x2545F4914F6CDD1D
}

// nextEvent returns the Nanotime of the shard's next timer or deadline, or
// -1 when it has neither.
func (s *shard) nextEvent() int64 {
	next := int64(-1)
	if t := s.wheel.nextDue(); t >= 0 {
		next = s.e.base + t*s.e.tick
	}
	for qi := range s.deadlines {
		q := &s.deadlines[qi]
		if e, ok := q.front(); ok {
			if d := s.rec[e.idx].at + q.timeout; next < 0 || d < next {
				next = d
			}
		}
	}
	return next
}

// maxPark bounds how long an idle shard sleeps, so it notices a stopped
// context even with an empty wheel.
const maxPark = time.Second

// run is the shard's goroutine: step, then sleep until the next timer or
// until a result arrives while it sleeps.
func (s *shard) run(ctx context.Context) {
	clock := s.e.clock
	timer := time.NewTimer(maxPark)
	defer timer.Stop()
	for ctx.Err() == nil {
		s.step(clock.Nanotime())
		wait := maxPark
		if next := s.nextEvent(); next >= 0 {
			wait = min(wait, time.Duration(next-clock.Nanotime()))
		}
		if wait <= 0 {
			continue
		}
		s.parked.Store(true)
		if !s.ring.empty() || s.overflowed.Load() {
			s.parked.Store(false)
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
		case <-s.wake:
		case <-timer.C:
		}
		s.parked.Store(false)
	}
}

// deliver queues a result for the shard and wakes it if it sleeps. It reports
// whether the result overflowed the ring.
func (s *shard) deliver(r *probe.Result) (overflowed bool) {
	if !s.ring.push(r) {
		s.overflowMu.Lock()
		s.overflow = append(s.overflow, *r)
		s.overflowed.Store(true)
		s.overflowMu.Unlock()
		overflowed = true
	}
	if s.parked.Load() && s.parked.CompareAndSwap(true, false) {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return overflowed
}

// pacer spaces the first probes of one check in one shard: up to a burst at
// once, then one per step nanoseconds (the generic cell rate algorithm,
// delaying instead of dropping). The zero pacer lets every probe go at once.
type pacer struct {
	step int64 // ns between probes once the burst is spent; 0 means no limit
	tau  int64 // burst tolerance: (burst - 1) * step
	tat  int64 // theoretical arrival time of the next probe
}

// newPacer returns the pacer of p for one of shards shards, each of which
// takes an equal share of the rate and the burst.
func newPacer(p Pace, shards int) pacer {
	if p.Rate <= 0 {
		return pacer{}
	}
	step := max(int64(float64(shards)*float64(time.Second)/p.Rate), 1)
	burst := max((p.Burst+shards-1)/shards, 1)
	return pacer{step: step, tau: int64(burst-1) * step}
}

// slot returns when a probe asked for at now may leave, and books it.
func (p *pacer) slot(now int64) int64 {
	if p.step == 0 {
		return now
	}
	at := max(now, p.tat-p.tau)
	p.tat = max(p.tat, now) + p.step
	return at
}
