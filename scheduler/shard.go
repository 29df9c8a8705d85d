package scheduler

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler/internal/ring"
)

// Per-target flags kept by a shard.
const (
	flagLeader   = 1 << iota // the target's probes are sent (it leads its stream)
	flagActive               // leader with at least one enabled member: it is scheduled
	flagInFlight             // a probe is out; its deadline queue holds it
	flagDisabled             // excluded from evaluation (E6)
	flagShared               // member of a shared stream: shard.members holds its successor
	flagSent                 // leader whose stream has completed a probe since its first was filed: with none out, dq and tries hold the send mark
)

// The kinds of arrival: a probe's result, or one of the passive entry points
// ([Engine.Recheck], [Engine.Evidence]), which share the ring so that a
// shard has one queue to drain and one thing to wake for.
const (
	arriveResult   uint8 = iota // a probe's result
	arriveEvidence              // passive evidence: r is the failure, r.Done when it was seen
	arriveRecheck               // a recheck: r.Latency is the gap after the stream's previous send
)

// arrival is a probe result on its way to its shard, with the shard-local
// index of its target that Deliver looked up, so the shard does not look it
// up again. kind fits in the struct's padding: a probe result travels in 40
// bytes either way.
type arrival struct {
	r    probe.Result
	idx  uint32
	kind uint8 // arriveResult, arriveEvidence or arriveRecheck
}

// maxBatch is the most requests handed to a launcher in one call.
const maxBatch = 256

// record is a target's state as its shard keeps it: everything a probe's
// dispatch and result touch, including what readers see, in one 64-byte cache
// line. The shard writes word, latency, last and since with atomic stores;
// readers load them (see [Engine.Status]). Every other field is the shard's
// alone. A free record (its target removed, its id not yet given out again)
// has no flags; it keeps gen, so an answer to its last probe can never pass
// for one of a later target's.
type record struct {
	id      uint32        // global target id
	dq      uint32        // position (low 32 bits) of the probe in flight in its deadline queue; with none out, the low bits of the stream's send mark (flagSent)
	at      int64         // due time of the next probe, or send time while in flight
	word    atomic.Uint64 // published state, see packWord
	latency atomic.Uint64 // published latency: last success in µs << 32 | smoothed µs
	last    atomic.Int64  // published Nanotime of the last result, 0 before the first
	since   atomic.Int64  // published Nanotime of the last state change
	gen     uint32        // generation of the latest probe
	ev      evalState     // evaluator state
	check   uint16        // index into the check table
	flags   uint8         // flag* bits
	tries   uint8         // retransmissions of the probe in flight so far; with none out, the high bits of the send mark
}

// shard owns a subset of the targets: their records, their timers in its own
// timing wheel, the ring through which their results arrive and the inbox
// through which edits arrive. Only the shard's goroutine (or the single
// goroutine calling Engine.Step) touches its fields, except ring producers,
// the inbox, the parked/wake pair, the published stats, the record directory
// and the published fields of records, which are atomic, and the overflow
// list, which has its lock.
type shard struct {
	e   *Engine
	idx int

	blocks  []*recBlock                 // the shard's copy of dir
	dir     atomic.Pointer[[]*recBlock] // records by local index; grown by the editor
	members []uint32                    // successor in a shared stream (P4), a circle; valid where flagShared

	tab       *checkTable
	wheel     *wheel
	deadlines []deadlineQueue // one per distinct timeout; checkTable.queueOf maps checks to them
	ring      *ring.Ring[arrival]
	batches   [][]probe.Request // per launcher
	resends   [][]probe.Request // per launcher: retransmissions to hand to its Resend
	settled   []int64           // per launcher that is a Settler: its Settled as read this step
	settling  []settling        // probes past their deadline whose launcher has not settled yet
	now       int64             // time of the step in progress
	rng       uint64            // jitter random state
	first     []pacer           // per launcher: the pace of its first probes
	paces     []Pace            // per launcher: the pace its pacer was made for
	fire      func(t timer)     // s.onTimer, bound once
	touched   uint8             // keeps touch's loads from being optimised away
	rx        [64]arrival       // batch of results being applied

	inbox   atomic.Pointer[cmdBatch] // edits, newest first
	applied atomic.Uint64            // seq of the last edit applied

	count  shardCounts // the shard's own tallies, published to stats after each step
	stats  shardStats
	parked atomic.Bool
	soon   atomic.Bool // parked with its timer due within one tick: a result can wait for it
	wake   chan struct{}

	// Results that found the ring full wait here, so a burst never blocks
	// a producer (not even a launcher answering from inside Launch on the
	// shard's own goroutine) and nothing is dropped. Off the hot path.
	overflowed atomic.Bool
	overflowMu sync.Mutex
	overflow   []arrival
	spare      []arrival // consumer-owned, swapped with overflow
}

// step applies edits, arrived results and the timeouts of probes past their
// deadline, and launches due probes, at time now.
func (s *shard) step(now int64) {
	s.now = now
	s.applyEdits()
	s.drain()
	s.retransmit()
	s.expire()
	s.wheel.advance(s.e.tickFloor(now), s.fire)
	s.flush()
	s.publish()
}

// expire ends every probe whose deadline is at or before now: as a timeout,
// or as a local error when its launcher says the silence may be this host's
// doing. A probe whose launcher has not yet delivered every result up to its
// deadline waits in the settling list (see [probe.Settler]). An ended probe
// can make the next send due at once; expire then dispatches it, which may
// queue new deadlines behind the current ones, never before.
func (s *shard) expire() {
	if len(s.settling) == 0 && !s.deadlineDue() {
		return
	}
	// Launchers settle after they deliver: read how far they have
	// settled, then take what they delivered before saying so.
	s.readSettled()
	s.drain()
	if len(s.settling) > 0 {
		s.resettle()
	}
	for qi := range s.deadlines {
		q := &s.deadlines[qi]
		for {
			e, ok := q.front()
			if !ok {
				break
			}
			rec := s.rec(e.idx)
			if rec.flags&flagInFlight == 0 || rec.gen != e.gen {
				q.pop() // its probe ended otherwise; the entry was not struck out
				continue
			}
			if rec.at+q.timeout > s.now {
				break
			}
			q.pop()
			if !s.expired(e.idx, rec, q.timeout) {
				s.settling = append(s.settling, settling{idx: e.idx, gen: e.gen, timeout: q.timeout})
			}
		}
	}
}

// settling is a probe past its deadline that waits for its launcher to
// settle.
type settling struct {
	idx, gen uint32
	timeout  int64
}

// settleLimit is how long past its deadline a probe waits for its launcher
// to settle. A launcher that lags longer (a reply reader starved of CPU for
// seconds, or stuck) cannot say whether the target answered: the probe then
// ends as a local error (CauseLate), no verdict on the target.
const settleLimit = 5 * time.Second

// expired ends target i's probe in flight, whose deadline has passed, unless
// its launcher has not settled up to the deadline yet: then it reports
// false and the probe stays in flight.
func (s *shard) expired(i uint32, rec *record, timeout int64) bool {
	cause := probe.CauseNone
	if li := s.tab.launcherOf[rec.check]; li >= 0 && s.tab.settlers[li] != nil {
		deadline := rec.at + timeout
		switch {
		case s.settledOf(li) >= deadline:
			cause = s.tab.settlers[li].Expired(probe.Request{ID: rec.id, Gen: rec.gen, Sent: rec.at, Deadline: deadline})
		case s.now-deadline < int64(settleLimit):
			return false
		default:
			cause = probe.CauseLate
		}
	}
	s.timeout(i, rec, timeout, cause)
	return true
}

// resettle ends the probes of the settling list whose launcher has settled
// since, and forgets those that ended otherwise (an answer came, or the
// target left).
func (s *shard) resettle() {
	keep := s.settling[:0]
	for _, w := range s.settling {
		rec := s.rec(w.idx)
		if rec.flags&flagInFlight == 0 || rec.gen != w.gen {
			continue
		}
		if !s.expired(w.idx, rec, w.timeout) {
			keep = append(keep, w)
		}
	}
	clear(s.settling[len(keep):])
	s.settling = keep
}

// deadlineDue reports whether a probe in flight has reached its deadline.
func (s *shard) deadlineDue() bool {
	for qi := range s.deadlines {
		q := &s.deadlines[qi]
		if e, ok := q.front(); ok && s.rec(e.idx).at+q.timeout <= s.now {
			return true
		}
	}
	return false
}

// readSettled reads every settling launcher's Settled for this step.
func (s *shard) readSettled() {
	for li, st := range s.tab.settlers {
		if st != nil {
			s.settled[li] = st.Settled()
		}
	}
}

// settledOf returns launcher li's Settled as read this step.
func (s *shard) settledOf(li int) int64 { return s.settled[li] }

// retransmit sends again every probe in flight that has had no answer by
// its queue's next retransmission offset (T5), in batches to its
// launcher's Resend. Each retransmission stage walks its queue in send
// order, skipping the entries of answered probes without touching their
// records.
func (s *shard) retransmit() {
	for qi := range s.deadlines {
		q := &s.deadlines[qi]
		for j, off := range q.stages {
			for {
				rec, ok := s.stageFront(q, j)
				if !ok || rec.at+off > s.now {
					break
				}
				q.cursor[j]++
				li := s.tab.launcherOf[rec.check]
				if li < 0 || s.tab.resenders[li] == nil {
					continue // its check changed launcher while the probe was out
				}
				rec.tries = uint8(j + 1)
				b := append(s.resends[li], probe.Request{ID: rec.id, Gen: rec.gen, Sent: rec.at, Deadline: rec.at + q.timeout})
				s.resends[li] = b
				s.count.retransmits++
				if len(b) == maxBatch {
					s.resendOne(li)
				}
			}
		}
	}
}

// stageFront returns the first probe still in flight at or after
// retransmission stage j's cursor in q, moving the cursor past entries of
// probes that ended.
func (s *shard) stageFront(q *deadlineQueue, j int) (*record, bool) {
	p := max(q.cursor[j], q.head)
	for ; p != q.tail; p++ {
		e := q.buf[p&uint64(len(q.buf)-1)]
		if e.idx == noEntry {
			continue
		}
		if rec := s.rec(e.idx); rec.flags&flagInFlight != 0 && rec.gen == e.gen {
			q.cursor[j] = p
			return rec, true
		}
	}
	q.cursor[j] = p
	return nil, false
}

// drain applies every result waiting in the ring and the overflow list. It
// takes them in batches and loads the batch's records together first, so the
// cache misses of a burst of answers overlap.
func (s *shard) drain() {
	for {
		n := 0
		for n < len(s.rx) && s.ring.Pop(&s.rx[n]) {
			n++
		}
		if n == 0 {
			break
		}
		batch := s.rx[:n]
		var sum uint8
		for i := range batch {
			sum += s.rec(batch[i].idx).flags
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
	if cap(s.spare) > len(s.rx)<<10 {
		s.spare = nil // a burst's; the steady state needs no such room
	}
}

// receive applies one result if it answers the target's probe in flight,
// or hands a recheck or passive evidence to [shard.passive].
func (s *shard) receive(a *arrival) {
	if a.kind != arriveResult {
		s.passive(a)
		return
	}
	i, r := a.idx, &a.r
	rec := s.rec(i)
	if rec.flags&flagInFlight == 0 || rec.gen != r.Gen {
		s.count.stale++
		return
	}
	deadline := rec.at + int64(s.tab.checks[rec.check].Timeout)
	if r.Done > deadline && r.Outcome != probe.LocalError {
		// Answered after its timeout: it is a timeout, and the deadline
		// queue will record it. A local error carries no verdict and
		// may come late: it ends the probe whenever it comes.
		s.count.late++
		return
	}
	if r.Done < rec.at {
		r.Done = rec.at
	}
	if r.Retransmits = rec.tries; rec.tries > 0 {
		// The probe's duration from its first send, as a kernel's
		// connect() would take it; the launcher's time is from its
		// last send.
		r.Latency = time.Duration(r.Done - rec.at)
	}
	s.deadlines[s.tab.queueOf[rec.check]].strike(rec.dq, i, rec.gen)
	s.complete(i, rec, r)
}

// touch loads the records of a chunk of due timers before they fire: the
// loads are independent, so their cache misses overlap.
func (s *shard) touch(ts []timer) {
	var sum uint8
	for _, t := range ts {
		sum += s.rec(t.idx).flags
	}
	s.touched += sum
}

// onTimer handles a wheel expiry: a target's next send is due. Timers cannot
// be cancelled, so one may outlive what it was set for (its stream went idle,
// was taken over, or its target was removed and its record given to another):
// it counts only if its target leads an active stream, has no probe out, and
// is due in this very tick.
func (s *shard) onTimer(t timer) {
	rec := s.rec(t.idx)
	if rec.flags&(flagLeader|flagActive|flagInFlight) != flagLeader|flagActive {
		return
	}
	if lo := s.e.base + s.wheel.now*s.e.tick; rec.at < lo || rec.at >= lo+s.e.tick {
		return
	}
	s.dispatch(t.idx, rec)
}

// timeout records that target i's probe in flight reached its deadline
// without an answer: a Timeout, or a LocalError when cause says the silence
// may be this host's doing.
func (s *shard) timeout(i uint32, rec *record, timeout int64, cause probe.LocalCause) {
	r := probe.Result{
		ID:          rec.id,
		Gen:         rec.gen,
		Outcome:     probe.Timeout,
		Retransmits: rec.tries,
		Latency:     time.Duration(timeout),
		Done:        rec.at + timeout,
	}
	if cause != probe.CauseNone {
		r.Outcome, r.Cause = probe.LocalError, cause
	} else {
		s.count.timeouts++
	}
	s.complete(i, rec, &r)
}

// schedule sets leader i's next send at time at: in the wheel, in the tick
// that contains it (the wheel's resolution may send a probe up to one tick
// early, never late, so it never lengthens a detection window), or at once
// when that tick has come.
func (s *shard) schedule(i uint32, rec *record, at int64) {
	rec.at = at
	if t := s.e.tickFloor(at); t > s.wheel.now {
		s.wheel.add(i, t)
		return
	}
	s.dispatch(i, rec)
}

// fileFirst files the first probe of the stream led by i: at once, or as
// soon as its check's first-probe pace allows. Every first probe is filed
// here, at the engine's start and for a target added later, so none waits
// for a slot inside its interval.
func (s *shard) fileFirst(i uint32, rec *record) {
	rec.flags &^= flagSent // nothing to recheck from until it is sent
	at := s.now
	if li := s.tab.launcherOf[rec.check]; li >= 0 {
		at = s.first[li].slot(s.now)
	}
	s.schedule(i, rec, at)
}

// dispatch sends the next probe of target i, whose record is rec.
func (s *shard) dispatch(i uint32, rec *record) {
	now := s.now
	s.observeLateness(now - rec.at)
	rec.gen++
	rec.flags |= flagInFlight
	rec.tries = 0
	rec.at = now
	qi := s.tab.queueOf[rec.check]
	deadline := now + s.deadlines[qi].timeout
	rec.dq = uint32(s.deadlines[qi].push(i, rec.gen))
	li := s.tab.launcherOf[rec.check]
	b := append(s.batches[li], probe.Request{ID: rec.id, Gen: rec.gen, Sent: now, Deadline: deadline})
	s.batches[li] = b
	s.count.dispatched++
	if len(b) == maxBatch {
		s.flushOne(li)
	}
}

// complete applies a finished probe of leader i to every enabled member of
// its stream and schedules the stream's next probe, unless the stream went
// idle while the probe was out: the earliest any member wants, each counting
// its gap from the probe's completion or, at a fixed rate, from its send.
func (s *shard) complete(i uint32, lead *record, r *probe.Result) {
	sent := lead.at
	lead.flags = lead.flags&^flagInFlight | flagSent
	s.setSendMark(lead, sent)
	s.count.results++
	if lead.flags&flagActive == 0 {
		return
	}
	var due int64
	var jitter time.Duration
	if lead.flags&(flagShared|flagDisabled) == 0 {
		// Alone: the common case, without the walk of a stream.
		c := &s.tab.checks[lead.check]
		s.apply(lead, c, r)
		due, jitter = c.due(&lead.ev, sent, r.Done), c.Jitter
	} else {
		due, jitter = s.completeStream(i, sent, r)
	}
	if jitter > 0 {
		due += int64(s.random() % uint64(jitter))
	}
	s.schedule(i, lead, due)
}

// completeStream applies a result to every enabled member of the stream led
// by i, whose probe left at sent, and returns the earliest next send and the
// least jitter among them: no member waits longer than its own check says.
func (s *shard) completeStream(i uint32, sent int64, r *probe.Result) (due int64, jitter time.Duration) {
	first := true
	for m := i; ; {
		mr := s.rec(m)
		if mr.flags&flagDisabled == 0 {
			c := &s.tab.checks[mr.check]
			s.apply(mr, c, r)
			if d := c.due(&mr.ev, sent, r.Done); first || d < due {
				due = d
			}
			if first || c.Jitter < jitter {
				jitter = c.Jitter
			}
			first = false
		}
		if mr.flags&flagShared == 0 {
			break
		}
		if m = s.members[m]; m == i {
			break
		}
	}
	return due, jitter
}

// next returns the member after m in m's stream: m itself when it probes
// alone.
func (s *shard) next(m uint32) uint32 {
	if s.rec(m).flags&flagShared == 0 {
		return m
	}
	return s.members[m]
}

// apply evaluates one member's result, publishes it to readers and reports a
// state change. A result without a verdict on the target (a LocalError) is
// published and observed but not evaluated: state and streak stay, and the
// next probe follows the current state's gap. Passive evidence is applied as
// a failed probe, but leaves the time of the latest probe (record.last)
// alone: evidence older than it is stale.
func (s *shard) apply(rec *record, c *Check, r *probe.Result) {
	if !r.Outcome.Verdict() {
		rec.last.Store(r.Done)
		rec.word.Store(packWord(&rec.ev, false, true, r.Outcome, 0) | wordDetail(r))
		if obs := s.e.observer; obs != nil {
			obs.Result(rec.id, *r)
		}
		return
	}
	from := rec.ev.state
	ok := r.Outcome == probe.Success
	changed := c.observe(&rec.ev, ok)
	if ok {
		// A retransmitted probe's latency is no round-trip sample: which
		// send was answered is unknown (Karn's rule).
		rec.recordLatency(r.Latency, r.Retransmits == 0)
	}
	if !r.Passive {
		rec.last.Store(r.Done)
	}
	if changed {
		rec.since.Store(r.Done)
	}
	rec.word.Store(packWord(&rec.ev, false, true, r.Outcome, r.Status) | wordDetail(r))
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
			Passive: r.Passive,
		})
	}
}

// flush hands every pending batch to its launcher, and every pending
// retransmission to its Resend.
func (s *shard) flush() {
	for li := range s.tab.launchers {
		if len(s.batches[li]) > 0 {
			s.flushOne(li)
		}
		if len(s.resends[li]) > 0 {
			s.resendOne(li)
		}
	}
}

func (s *shard) flushOne(li int) {
	s.tab.launchers[li].Launch(s.idx, s.batches[li])
	s.batches[li] = s.batches[li][:0]
}

func (s *shard) resendOne(li int) {
	s.tab.resenders[li].Resend(s.idx, s.resends[li])
	s.resends[li] = s.resends[li][:0]
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

// nextEvent returns the Nanotime of the shard's next timer, retransmission
// or deadline, or -1 when it has none. While probes wait for their launcher
// to settle it is at most a tick away.
func (s *shard) nextEvent() int64 {
	next := int64(-1)
	at := func(t int64) {
		if next < 0 || t < next {
			next = t
		}
	}
	if t := s.wheel.nextDue(); t >= 0 {
		at(s.e.base + t*s.e.tick)
	}
	for qi := range s.deadlines {
		q := &s.deadlines[qi]
		if e, ok := q.front(); ok {
			at(s.rec(e.idx).at + q.timeout)
		}
		for j, off := range q.stages {
			if rec, ok := s.stageFront(q, j); ok {
				at(rec.at + off)
			}
		}
	}
	if len(s.settling) > 0 {
		at(s.now + s.e.tick)
	}
	return next
}

// maxPark bounds how long an idle shard sleeps, so it notices a stopped
// context even with an empty wheel.
const maxPark = time.Second

// run is the shard's goroutine: step, then sleep until the next timer or
// until a result or an edit arrives while it sleeps.
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
		s.soon.Store(int64(wait) <= s.e.tick)
		s.parked.Store(true)
		if !s.ring.Empty() || s.overflowed.Load() || s.inbox.Load() != nil {
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

// deliver queues a result for the target at local index i and wakes the
// shard if it sleeps for longer than a tick; a shard whose timer fires
// within the tick takes the result then, before it expires any deadline, so
// the result counts as it would have at once. Under load that spares the
// shard a second wake-up per tick. A result that overflows the ring always
// wakes the shard. It reports whether the result overflowed the ring.
func (s *shard) deliver(r *probe.Result, i uint32) (overflowed bool) {
	a := arrival{r: *r, idx: i}
	return s.enqueue(&a)
}

// enqueue is [shard.deliver] for any arrival.
func (s *shard) enqueue(a *arrival) (overflowed bool) {
	if !s.ring.Push(a) {
		s.overflowMu.Lock()
		s.overflow = append(s.overflow, *a)
		s.overflowed.Store(true)
		s.overflowMu.Unlock()
		s.wakeUp()
		return true
	}
	if !s.soon.Load() {
		s.wakeUp()
	}
	return false
}

// wakeUp wakes the shard if it sleeps.
func (s *shard) wakeUp() {
	if s.parked.Load() && s.parked.CompareAndSwap(true, false) {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// pacer spaces the first probes of one launcher in one shard: up to a burst at
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
