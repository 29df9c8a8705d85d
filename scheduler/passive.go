package scheduler

import (
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// Passive evidence: what other traffic to a target (the host's own clients,
// seen by eBPF) says about it reaches the engine through two entry points.
// Both travel through the shard's result ring as arrivals of their own kind,
// so the probes' delivery path is unchanged and nothing is allocated; the
// shard applies them between its steps like any result.

// Recheck asks for the next probe of target id's stream now: a fast re-check
// on passive evidence. Unless a probe of the stream is in flight (its result
// is the re-check), the probe leaves at the shard's next step, but never
// sooner than gap after the stream's previous send, and never later than it
// was due anyway. Rechecks of a stream already pulled forward coalesce: they
// send nothing more. A target that shares its probe stream with others
// (P4) pulls the whole stream forward; they all get the probe's result.
//
// A recheck does nothing for a target that is disabled (E6) or unhealthy
// (its evidence says what its state says; its probes keep the unhealthy
// interval, E5), nor before the stream's first probe (due at once, paced
// only by its check's [Check.FirstProbes]). A gap below zero counts as zero,
// one above [MaxDelay] as MaxDelay. Like a scheduled probe, a pulled-forward
// one may leave up to one tick early.
//
// It reports whether the recheck was queued for the target's shard: false
// for an id the engine does not have (never had, or whose removal its shard
// has applied; a recheck that returned before the [Edit] that removes the
// target was committed never reaches a target that later takes the id), for
// a target that is disabled or unhealthy as its shard last published, and
// after [Engine.Run] returned. The shard checks again when it applies the
// recheck, and counts one that changed nothing in [Stats].PassiveIgnored.
//
// Recheck is safe for concurrent use and never blocks: like [Engine.Deliver]
// it takes no lock unless the shard's ring is full.
func (e *Engine) Recheck(id uint32, gap time.Duration) bool {
	s, i, ok := e.passiveTarget(id, true)
	if !ok {
		return false
	}
	a := arrival{r: probe.Result{ID: id, Latency: min(max(gap, 0), MaxDelay)}, idx: i, kind: arriveRecheck}
	if s.enqueue(&a) {
		e.overflows.Add(1)
	}
	return true
}

// Evidence counts a failure seen outside the probes (passive evidence: a
// connection of another process to the target refused, timed out or reset)
// as one failed probe of target id with outcome o, at time at (engine
// nanoseconds, [Clock.Nanotime]). It feeds the evaluator exactly as a failed
// probe would, toward fall (E1) or into the window (E2), so it may make the
// target unhealthy; the [Observer] then sees a Result with Passive set and,
// for a change of state, an [Event] with Passive set. It never makes a
// target healthy.
//
// It changes no schedule except as a failed probe would: when the target's
// new state asks for a shorter gap (the fast re-check interval of E4 while a
// failure is being confirmed), the stream's next probe is pulled forward to
// that gap after at. A probe in flight stays in flight and its result counts
// when it comes, after the evidence. The evidence applies to target id alone,
// even when it shares its probe stream with others: it is about that
// target's address.
//
// Evidence older than the target's latest probe result is stale (the probe
// is newer news) and ignored, as is evidence from before the engine was
// built; evidence dated after the shard's present counts at its present.
// Evidence does nothing for a disabled target (E6). It reports whether the
// evidence was queued, as [Engine.Recheck] does (and the same for an id
// removed or reused), and false for an outcome that is no failure: Success,
// LocalError (no verdict on the target) or one out of range.
//
// Evidence is safe for concurrent use and never blocks: like
// [Engine.Deliver] it takes no lock unless the shard's ring is full.
func (e *Engine) Evidence(id uint32, o probe.Outcome, at int64) bool {
	if o == probe.Success || o >= probe.NumOutcomes || !o.Verdict() {
		return false
	}
	s, i, ok := e.passiveTarget(id, false)
	if !ok {
		return false
	}
	a := arrival{r: probe.Result{ID: id, Outcome: o, Done: at, Passive: true}, idx: i, kind: arriveEvidence}
	if s.enqueue(&a) {
		e.overflows.Add(1)
	}
	return true
}

// passiveTarget locates target id for a recheck (recheck true) or passive
// evidence. It reports false when the engine has stopped, never had id, or,
// as the target's shard last published, does not run it, or it is disabled,
// or unhealthy and recheck is set. A target whose shard runs it has its
// record in the shard's own copy of the directory, which the shard's drain
// relies on.
func (e *Engine) passiveTarget(id uint32, recheck bool) (*shard, uint32, bool) {
	s, i, ok := e.locate(id)
	if !ok || e.stopped.Load() {
		return nil, 0, false
	}
	rec := s.published(i)
	if rec == nil {
		return nil, 0, false
	}
	w := rec.word.Load()
	if w&(wordOff|wordDisabled) != 0 || recheck && State(w&wordStateMask) == Unhealthy {
		return nil, 0, false
	}
	return s, i, true
}

// passive applies a recheck or passive evidence to the target at local index
// a.idx, if the shard still runs it and it is enabled.
func (s *shard) passive(a *arrival) {
	rec := s.rec(a.idx)
	if rec.flags&(flagLeader|flagShared) == 0 || rec.flags&flagDisabled != 0 {
		s.count.passiveIgnored++ // removed, or disabled since it was queued
		return
	}
	if a.kind == arriveRecheck {
		s.recheck(a.idx, rec, int64(a.r.Latency))
		return
	}
	s.evidence(a.idx, rec, &a.r)
}

// recheck pulls the next probe of record i's stream forward to gap after
// the stream's previous send, or to now when that has passed, unless the
// target is unhealthy, the stream has a probe out or has sent none yet, or
// its next probe is due as soon.
func (s *shard) recheck(i uint32, rec *record, gap int64) {
	l := s.leaderOf(i)
	lead := s.rec(l)
	if rec.ev.state == Unhealthy || lead.flags&(flagActive|flagInFlight|flagSent) != flagActive|flagSent {
		s.count.passiveIgnored++
		return
	}
	at := max(s.now, s.lastSent(lead)+gap)
	if at >= lead.at {
		s.count.passiveIgnored++ // already due as soon: it coalesces
		return
	}
	s.count.rechecks++
	s.schedule(l, lead, at)
}

// evidence applies passive evidence r to record i as a failed probe and, as
// a failed probe's completion would, brings the stream's next probe forward
// when the target's new state asks for a shorter gap (E4) than the one it
// waits for.
func (s *shard) evidence(i uint32, rec *record, r *probe.Result) {
	if r.Done < rec.last.Load() || r.Done < s.e.base {
		s.count.passiveIgnored++ // stale: a probe result is newer
		return
	}
	r.Done = min(r.Done, s.now)
	c := &s.tab.checks[rec.check]
	s.count.evidence++
	s.apply(rec, c, r)
	l := s.leaderOf(i)
	lead := s.rec(l)
	if lead.flags&(flagActive|flagInFlight|flagSent) != flagActive|flagSent {
		return // a probe is out (its completion schedules), or the first is yet to go
	}
	due := r.Done + int64(c.gap(&rec.ev))
	if c.Jitter > 0 {
		due += int64(s.random() % uint64(c.Jitter))
	}
	if due = max(due, s.now); due < lead.at {
		s.schedule(l, lead, due)
	}
}

// A stream's send mark is the time of its latest send, kept while no probe
// is out in the 40 bits of record.dq (low 32) and record.tries (high 8),
// which only a probe in flight uses: the time since the engine's base in
// units of 2^sendShift ns (256 ns), rounded up, modulo 2^40 units, 78 hours.
// That is more than can lie between a send and its stream's next due time (a
// day of timeout and a day of interval and jitter at most), from which the
// full value is recovered. A recheck from the mark asks for a time at most
// 256 ns after the exact one, never before it.
const (
	sendShift = 8
	markBits  = 40
	markMask  = 1<<markBits - 1
)

// setSendMark records in rec, whose probe has ended, that it was sent at
// sent.
func (s *shard) setSendMark(rec *record, sent int64) {
	m := uint64(sent-s.e.base+1<<sendShift-1) >> sendShift
	rec.dq, rec.tries = uint32(m), uint8(m>>32)
}

// lastSent returns when the stream led by rec sent its latest probe, rounded
// up to the mark's resolution. The stream has sent one (flagSent) and has
// none out: rec.at is its next due time, at or after that send.
func (s *shard) lastSent(rec *record) int64 {
	due := (rec.at - s.e.base) >> sendShift
	mark := uint64(rec.tries)<<32 | uint64(rec.dq)
	// Units from the send to the due time: -1 when both fall in one unit
	// (the send is rounded up, the due time down).
	back := int64((uint64(due)-mark+1)&markMask) - 1
	return s.e.base + (due-back)<<sendShift
}

// RecheckWindow is the detection bound with passive evidence and rechecks:
// from the moment the passive evidence that asks for a recheck reaches the
// engine, a target whose probes all fail is declared unhealthy within
//
//	k·max(g, t) + t
//
// with g the recheck's gap, t the failing probe's time (the timeout for a
// target that drops packets, about a round trip for one that refuses; at
// most the timeout) and k
// the failure threshold ([Timing.FailureThreshold]): about fall × max(gap,
// probe time). The first failing probe leaves within max(g, t) (the probe
// in flight, if any, completes first), and each one after it max(g, t)
// after the one before, provided the target's own traffic keeps failing, so
// that each failure's recheck pulls the next probe forward, or the fast
// re-check interval (E4) is at most g. It assumes no jitter on those probes
// (rechecks have none) and, like every bound, a tick of resolution. The
// bound depends on traffic: without it no evidence comes, and W1–W3 remain
// the guarantees. Passive evidence counted as failed probes
// ([Engine.Evidence]) needs no probe at all: the target is unhealthy at its
// k-th failure, probed or seen.
func (c *Timing) RecheckWindow(gap, t time.Duration) time.Duration {
	t = min(max(t, 0), c.Timeout)
	k := time.Duration(c.FailureThreshold())
	return k*max(gap, t) + t
}
