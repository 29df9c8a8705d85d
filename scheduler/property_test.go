package scheduler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// randomCheck draws a check from the space the property test covers: every
// combination of cadence, interval, timeout, thresholds or window, fast
// re-check, unhealthy interval and initial state, in whole milliseconds. A
// fixed-rate check gets a timeout no longer than its shortest gap.
func randomCheck(rng *rand.Rand, cadence Cadence, jitter bool) Check {
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
	c := Check{Timing: Timing{
		Cadence:  cadence,
		Interval: ms(1, 5000),
		Timeout:  ms(1, 5000),
		Initial:  State(rng.IntN(3)),
	}}
	if rng.IntN(3) == 0 {
		size := 1 + rng.IntN(12)
		c.Window = Window{Size: size, Required: 1 + rng.IntN(size)}
	} else {
		c.Rise, c.Fall = 1+rng.IntN(10), 1+rng.IntN(10)
	}
	if rng.IntN(3) == 0 {
		c.FastRecheck = ms(1, int(c.Interval/time.Millisecond))
	}
	if rng.IntN(3) == 0 {
		c.UnhealthyInterval = ms(1, 10000)
	}
	if jitter {
		c.Jitter = ms(1, 2000)
	}
	if cadence == FixedRate {
		c.Timeout = ms(1, int(c.shortestGap()/time.Millisecond))
	}
	return c
}

// TestDetectionWindows is the property that makes sonde's promises: for random
// checks of both cadences and failure kinds, simulated with a SimClock,
//   - a healthy target turns unhealthy after exactly k failed probes;
//   - when every failure is a timeout, exactly W1 after the first failing
//     probe was sent; with fast failures (RST, bad status) never later;
//   - an unhealthy target turns healthy after exactly k successful probes,
//     exactly at the window W2 computed with their latency, never later than
//     W2 with r = timeout;
//   - with jitter, never later than the windows that include it.
func TestDetectionWindows(t *testing.T) {
	t.Parallel()
	trials := 600
	if testing.Short() || raceEnabled {
		trials = 100
	}
	for _, cadence := range []Cadence{AfterCompletion, FixedRate} {
		t.Run(cadence.String(), func(t *testing.T) {
			for trial := range trials {
				rng := rand.New(rand.NewPCG(uint64(trial), 42+uint64(cadence)))
				jitter := trial%5 == 4
				c := randomCheck(rng, cadence, jitter)
				fast := rng.IntN(2) == 0
				name := fmt.Sprintf("trial %d (fast=%v jitter=%v) %+v", trial, fast, jitter, c)
				checkDetection(t, name, rng, c, fast)
			}
		})
	}
}

func checkDetection(t *testing.T, name string, rng *rand.Rand, c Check, fast bool) {
	t.Helper()
	s := newSim(t, []Check{c}, []TargetSpec{{Check: 0, Leader: 0}}, 1)
	c = *s.eng.Check(0)
	ms := func(hi time.Duration) time.Duration {
		return time.Duration(rng.Int64N(int64(hi/time.Millisecond)+1)) * time.Millisecond
	}
	upLatency := ms(c.Timeout)
	downLatency := ms(c.Timeout)
	up := answer{outcome: probe.Success, after: upLatency}
	down := answer{silent: true}
	if fast {
		down = answer{outcome: probe.Refused, after: downLatency}
	}
	cycle := c.Interval + c.Timeout + c.Jitter
	if c.UnhealthyInterval > c.Interval {
		cycle += c.UnhealthyInterval - c.Interval
	}
	limit := func(n int) time.Duration { return time.Duration(n+2) * cycle }

	// Phase 1: healthy, long enough to fill any window with successes.
	s.behave = func(probe.Request) answer { return up }
	s.runFor(limit(MaxWindow/4 + 12))
	if st := s.eng.Status(0); st.State != Healthy {
		t.Fatalf("%s: not healthy after a run of successes: %+v", name, st)
	}

	// Phase 2: failures from now on.
	failFrom := s.clock.Nanotime()
	s.events = s.events[:0]
	s.behave = func(probe.Request) answer { return down }
	kf := c.FailureThreshold()
	s.runFor(limit(kf + 1))
	ev := firstTransition(t, name, s, Unhealthy)
	first := firstSentAfter(s, failFrom)
	got := time.Duration(ev.At - first)
	if n := resultsBetween(s, first, ev.At); n != kf {
		t.Fatalf("%s: unhealthy after %d failed probes, want exactly %d", name, n, kf)
	}
	w1 := c.FailureWindow()
	switch {
	case c.Jitter > 0:
		if got > w1 {
			t.Fatalf("%s: detected after %v, later than W1 %v", name, got, w1)
		}
	case !fast:
		if got != w1 {
			t.Fatalf("%s: timeouts detected after %v, want exactly W1 %v", name, got, w1)
		}
	default:
		want := downLatency*time.Duration(kf) + c.failureGap()*time.Duration(kf-1)
		if c.Cadence == FixedRate {
			want = c.failureGap()*time.Duration(kf-1) + downLatency
		}
		if got != want || got > w1 {
			t.Fatalf("%s: fast failures detected after %v, want %v (W1 %v)", name, got, want, w1)
		}
	}

	// Let the window fill with failures, then recover.
	s.runFor(limit(c.Window.Size + 1))
	recoverFrom := s.clock.Nanotime()
	s.events = s.events[:0]
	s.behave = func(probe.Request) answer { return up }
	kr := c.SuccessThreshold()
	s.runFor(limit(kr + 1))
	ev = firstTransition(t, name, s, Healthy)
	first = firstSentAfter(s, recoverFrom)
	got = time.Duration(ev.At - first)
	if n := resultsBetween(s, first, ev.At); n != kr {
		t.Fatalf("%s: healthy after %d successful probes, want exactly %d", name, n, kr)
	}
	if worst := c.SuccessWindow(c.Timeout); got > worst {
		t.Fatalf("%s: recovered after %v, later than W2 %v", name, got, worst)
	}
	if c.Jitter == 0 {
		if want := c.SuccessWindow(upLatency); got != want {
			t.Fatalf("%s: recovered after %v, want exactly W2(r=%v) %v", name, got, upLatency, want)
		}
	}
}

func firstTransition(t *testing.T, name string, s *sim, to State) Event {
	t.Helper()
	for _, e := range s.events {
		if e.To == to {
			return e
		}
		t.Fatalf("%s: unexpected transition %v→%v before %v", name, e.From, e.To, to)
	}
	t.Fatalf("%s: no transition to %v (status %+v)", name, to, s.eng.Status(0))
	return Event{}
}

// firstSentAfter returns the send time of the first probe dispatched after
// ns. A probe sent at ns itself was sent, and answered, before the test
// changed the targets' behaviour at ns (runUntil handles every event up to
// and including its end).
func firstSentAfter(s *sim, ns int64) int64 {
	for _, r := range s.sent {
		if r.Sent > ns {
			return r.Sent
		}
	}
	s.t.Fatalf("no probe sent after %d", ns)
	return 0
}

// resultsBetween counts results applied of probes sent at or after from and
// completed by to. (At a fixed rate with timeout = interval, a probe's
// deadline is the next one's send: completion alone cannot tell them apart.)
func resultsBetween(s *sim, from, to int64) int {
	n := 0
	for _, a := range s.result {
		if a.r.Done-int64(a.r.Latency) >= from && a.r.Done <= to {
			n++
		}
	}
	return n
}

// TestDetectionWindowsAcrossEdits is the property of an engine edited while
// it runs, as a configuration reload or service discovery edits it: for
// random checks and random edits at random times — targets added (alone or
// joining the tracked target's stream), removed, disabled and enabled — a
// target no edit names
//   - keeps its state: it changes state only when its own results say so;
//   - turns unhealthy after exactly k failed probes, never later than W1 from
//     the first failing probe's send nor W3 from the failure's onset, and
//     exactly at W1 when every failure times out and nothing joined its
//     stream (a member joining may only make its probes more frequent);
//   - recovers after exactly k successes, never later than W2;
//
// and a removed target gets no result after the edit that removed it.
func TestDetectionWindowsAcrossEdits(t *testing.T) {
	t.Parallel()
	trials := 200
	if testing.Short() || raceEnabled {
		trials = 40
	}
	for _, cadence := range []Cadence{AfterCompletion, FixedRate} {
		t.Run(cadence.String(), func(t *testing.T) {
			for trial := range trials {
				rng := rand.New(rand.NewPCG(uint64(trial), 4242+uint64(cadence)))
				jitter := trial%5 == 4
				c := randomCheck(rng, cadence, jitter)
				join := trial%2 == 0
				fast := rng.IntN(2) == 0
				name := fmt.Sprintf("trial %d (fast=%v jitter=%v join=%v) %+v", trial, fast, jitter, join, c)
				checkDetectionAcrossEdits(t, name, rng, c, fast, join)
			}
		})
	}
}

// editor makes random edits of a sim's engine around one tracked target.
type editor struct {
	s       *sim
	rng     *rand.Rand
	tracked uint32
	join    bool                // let targets join the tracked target's stream
	live    map[uint32]bool     // ids of other targets in the engine: enabled?
	gone    map[uint32]struct{} // removed ids, until they are given out again
	seen    int                 // results of s.result checked by verify
	edits   int
}

// verify checks the results applied since the last call: none may be for a
// removed or a disabled target.
func (ed *editor) verify() {
	s := ed.s
	if ed.seen > len(s.result) {
		ed.seen = 0
	}
	for _, a := range s.result[ed.seen:] {
		if _, ok := ed.gone[a.id]; ok {
			s.t.Fatalf("result %+v applied to removed target %d", a.r, a.id)
		}
		if enabled, ok := ed.live[a.id]; ok && !enabled {
			s.t.Fatalf("result %+v applied to disabled target %d", a.r, a.id)
		}
	}
	ed.seen = len(s.result)
}

// edit makes one random edit: some targets removed, some added, some
// disabled or enabled.
func (ed *editor) edit() {
	s, rng := ed.s, ed.rng
	ed.verify()
	e := s.eng.Edit()
	for id := range ed.live {
		switch rng.IntN(8) {
		case 0:
			if err := e.Remove(id); err != nil {
				s.t.Fatal(err)
			}
			delete(ed.live, id)
			ed.gone[id] = struct{}{}
		case 1:
			disable := rng.IntN(2) == 0
			if err := e.SetDisabled(id, disable); err != nil {
				s.t.Fatal(err)
			}
			ed.live[id] = !disable
		}
	}
	var added []uint32
	for range rng.IntN(4) {
		spec := TargetSpec{Check: uint16(1 + rng.IntN(2)), Leader: Alone, Disabled: rng.IntN(4) == 0}
		switch {
		case ed.join && rng.IntN(3) == 0:
			spec.Check, spec.Leader = 1, ed.tracked // check 1 has the tracked check's timeout
		case len(ed.live) > 0 && rng.IntN(3) == 0:
			for id := range ed.live {
				if b := s.eng.books.ids[id]; b.check != 2 {
					spec.Check, spec.Leader = 1, id
				}
				break
			}
		}
		id, err := e.Add(spec)
		if err != nil {
			s.t.Fatalf("add %+v: %v", spec, err)
		}
		ed.live[id] = !spec.Disabled
		delete(ed.gone, id)
		added = append(added, id)
	}
	e.Commit()
	for _, id := range added {
		c := s.eng.Check(int(s.eng.books.ids[id].check))
		if st := s.eng.Status(id); st.Probed || st.State != c.Initial {
			s.t.Fatalf("target %d added reads %+v, want its check's initial state %v", id, st, c.Initial)
		}
	}
	ed.edits++
}

// run runs the sim for d, editing at random times, about every gap.
func (ed *editor) run(d time.Duration, gap time.Duration) {
	end := ed.s.clock.Nanotime() + int64(d)
	for {
		at := ed.s.clock.Nanotime() + 1 + ed.rng.Int64N(int64(gap))
		if at > end {
			ed.s.runUntil(end)
			ed.verify()
			return
		}
		ed.s.runUntil(at)
		ed.edit()
	}
}

func checkDetectionAcrossEdits(t *testing.T, name string, rng *rand.Rand, c Check, fast, join bool) {
	t.Helper()
	other := randomCheck(rng, AfterCompletion, false)
	other.Timeout = c.Timeout // it may join the tracked target's stream
	third := randomCheck(rng, Cadence(rng.IntN(2)), rng.IntN(2) == 0)
	checks := []Check{c, other, third}
	s := newSim(t, checks, []TargetSpec{{Check: 0, Leader: 0}, {Check: 1, Leader: 1}, {Check: 2, Leader: 2}}, 2)
	ed := &editor{s: s, rng: rng, tracked: 0, join: join, live: map[uint32]bool{1: true, 2: true}, gone: map[uint32]struct{}{}}
	c = *s.eng.Check(0)

	ms := func(hi time.Duration) time.Duration {
		return time.Duration(rng.Int64N(int64(hi/time.Millisecond)+1)) * time.Millisecond
	}
	upLatency, downLatency := ms(c.Timeout), ms(c.Timeout)
	up := answer{outcome: probe.Success, after: upLatency}
	down := answer{silent: true}
	if fast {
		down = answer{outcome: probe.Refused, after: downLatency}
	}
	// The tracked target is down from downFrom to upFrom: a probe answered
	// in that time fails, as a probe in flight at the onset of a failure
	// would.
	downFrom, upFrom := int64(math.MaxInt64), int64(math.MaxInt64)
	s.behave = func(req probe.Request) answer {
		if req.ID == ed.tracked {
			if done := req.Sent + int64(upLatency); done >= downFrom && req.Sent < upFrom {
				return down
			}
			return up
		}
		switch rng.IntN(3) {
		case 0:
			return answer{silent: true}
		case 1:
			return answer{outcome: probe.Refused, after: ms(s.eng.Check(1).Timeout)}
		}
		return answer{outcome: probe.Success, after: ms(s.eng.Check(1).Timeout)}
	}
	results := func(from, to int64) int {
		n := 0
		for _, a := range s.result {
			if a.id == ed.tracked && a.r.Done >= from && a.r.Done <= to {
				n++
			}
		}
		return n
	}
	cycle := c.Interval + c.Timeout + c.Jitter
	if c.UnhealthyInterval > c.Interval {
		cycle += c.UnhealthyInterval - c.Interval
	}
	limit := func(n int) time.Duration { return time.Duration(n+2) * cycle }
	editGap := cycle / 2

	// Phase 1: healthy, with edits all along.
	ed.run(limit(MaxWindow/4+12), editGap)
	if st := s.eng.Status(0); st.State != Healthy {
		t.Fatalf("%s: not healthy after a run of successes and %d edits: %+v", name, ed.edits, st)
	}
	for _, e := range s.events {
		if e.Target == ed.tracked && e.To != Healthy {
			t.Fatalf("%s: tracked target went %v→%v while healthy", name, e.From, e.To)
		}
	}

	// Phase 2: the tracked target fails from a random moment on.
	s.events = s.events[:0]
	s.result = s.result[:0]
	// Probes out now answer before the onset: their answers were decided.
	onset := s.clock.Nanotime() + int64(upLatency) + rng.Int64N(int64(cycle))
	downFrom = onset
	kf := c.FailureThreshold()
	ed.run(time.Duration(onset-s.clock.Nanotime())+limit(kf+1), editGap)
	ev := trackedTransition(t, name, s, ed.tracked, Unhealthy)
	first := firstSentFor(s, ed.tracked, onset-int64(upLatency))
	got := time.Duration(ev.At - first)
	if n := results(first, ev.At); n != kf {
		for _, a := range s.result {
			if a.id == ed.tracked {
				t.Logf("result %+v", a.r)
			}
		}
		for _, r := range s.sent {
			if r.ID == ed.tracked && r.Sent > onset-int64(20*time.Second) {
				t.Logf("sent %+v", r)
			}
		}
		t.Logf("onset %d first %d ev %+v", onset, first, ev)
		t.Fatalf("%s: unhealthy after %d failed probes, want exactly %d", name, n, kf)
	}
	w1 := c.FailureWindow()
	if got > w1 || time.Duration(ev.At-onset) > c.FailureWindowFromOnset() {
		t.Fatalf("%s: detected %v after the first failing probe (W1 %v), %v after onset (W3 %v)",
			name, got, w1, time.Duration(ev.At-onset), c.FailureWindowFromOnset())
	}
	if !join && !fast && c.Jitter == 0 && got != w1 {
		t.Fatalf("%s: timeouts detected after %v, want exactly W1 %v", name, got, w1)
	}

	// Phase 3: recovery.
	ed.run(limit(c.Window.Size+1), editGap)
	s.events = s.events[:0]
	s.result = s.result[:0]
	recoverFrom := s.clock.Nanotime()
	upFrom = recoverFrom
	kr := c.SuccessThreshold()
	ed.run(limit(kr+1), editGap)
	ev = trackedTransition(t, name, s, ed.tracked, Healthy)
	first = firstSentFor(s, ed.tracked, recoverFrom)
	got = time.Duration(ev.At - first)
	if n := results(first, ev.At); n != kr {
		t.Fatalf("%s: healthy after %d successful probes, want exactly %d", name, n, kr)
	}
	if worst := c.SuccessWindow(c.Timeout); got > worst {
		t.Fatalf("%s: recovered after %v, later than W2 %v", name, got, worst)
	}
	if !join && c.Jitter == 0 {
		if want := c.SuccessWindow(upLatency); got != want {
			t.Fatalf("%s: recovered after %v, want exactly W2(r=%v) %v", name, got, upLatency, want)
		}
	}
	if ed.edits < 10 {
		t.Fatalf("%s: only %d edits", name, ed.edits)
	}
}

// trackedTransition returns the first transition of target id, which must
// be to state to.
func trackedTransition(t *testing.T, name string, s *sim, id uint32, to State) Event {
	t.Helper()
	for _, e := range s.events {
		if e.Target != id {
			continue
		}
		if e.To != to {
			t.Fatalf("%s: unexpected transition %v→%v before %v", name, e.From, e.To, to)
		}
		return e
	}
	t.Fatalf("%s: no transition to %v (status %+v)", name, to, s.eng.Status(id))
	return Event{}
}

// firstSentFor returns the send time of target id's first probe at or after
// ns.
func firstSentFor(s *sim, id uint32, ns int64) int64 {
	for _, r := range s.sent {
		if r.ID == id && r.Sent >= ns {
			return r.Sent
		}
	}
	s.t.Fatalf("no probe of %d sent after %d", id, ns)
	return 0
}
