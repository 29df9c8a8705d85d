package scheduler

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
)

// passiveCheck probes every 30 s with a 1 s timeout and falls after 3
// failures; its targets answer in 10 ms unless a test says otherwise.
var passiveCheck = Check{Timing: Timing{Interval: 30 * sec, Timeout: sec, Rise: 1, Fall: 3}}

// newPassiveSim builds a sim of the given targets of passiveCheck (or of
// check, when given) whose targets answer with a success in 10 ms, and runs
// it until every first probe has been answered. It forgets the state
// changes so far.
func newPassiveSim(t *testing.T, check Check, targets []TargetSpec) *sim {
	t.Helper()
	s := newSim(t, []Check{check}, targets, 1)
	s.behave = func(probe.Request) answer { return answer{outcome: probe.Success, after: 10 * time.Millisecond} }
	s.runFor(100 * time.Millisecond)
	s.events = nil
	return s
}

// alone returns n targets that each lead their own stream.
func alone(n int) []TargetSpec {
	ts := make([]TargetSpec, n)
	for i := range ts {
		ts[i].Leader = uint32(i)
	}
	return ts
}

// sentSince returns the requests dispatched at or after from.
func sentSince(s *sim, from int64) []probe.Request {
	var out []probe.Request
	for _, r := range s.sent {
		if r.Sent >= from {
			out = append(out, r)
		}
	}
	return out
}

// passiveResults returns how many passive results the observer saw for id.
func passiveResults(s *sim, id uint32) int {
	n := 0
	for _, r := range s.result {
		if r.id == id && r.r.Passive {
			n++
		}
	}
	return n
}

func TestRecheckPullsProbeForward(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		after time.Duration // from the previous send to the recheck
		gap   time.Duration
		want  time.Duration // from the previous send to the pulled-forward probe
	}{
		{"gap not yet passed: waits for it", 2 * sec, 5 * sec, 5 * sec},
		{"gap passed: at once", 2 * sec, sec, 2 * sec},
		{"zero gap: at once", 7 * sec, 0, 7 * sec},
		{"negative gap counts as zero", 7 * sec, -sec, 7 * sec},
		{"gap beyond the due time: stays due", 2 * sec, 40 * sec, 30*sec + 10*time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newPassiveSim(t, passiveCheck, alone(1))
			prev := s.sent[0].Sent
			s.runUntil(prev + int64(tt.after))
			if !s.eng.Recheck(0, tt.gap) {
				t.Fatal("Recheck refused a healthy target")
			}
			s.runUntil(prev + int64(31*sec))
			got := sentSince(s, prev+1)
			if len(got) == 0 || got[0].Sent != prev+int64(tt.want) {
				t.Fatalf("probes after the recheck %+v, want the next at %v after the previous send", got, tt.want)
			}
			wantRechecks := uint64(1)
			if tt.gap >= 30*sec {
				wantRechecks = 0
			}
			if st := s.eng.Stats(); st.Rechecks != wantRechecks {
				t.Fatalf("Stats.Rechecks %d, want %d", st.Rechecks, wantRechecks)
			}
		})
	}
}

// TestRecheckFromTheLastSend checks that the gap counts from the stream's
// latest send, at send and recheck times off the tick grid: the
// pulled-forward probe leaves at max(recheck, previous send + gap), up to
// one tick early as any scheduled probe may, never later.
func TestRecheckFromTheLastSend(t *testing.T) {
	t.Parallel()
	s := newPassiveSim(t, passiveCheck, alone(1))
	rng := rand.New(rand.NewPCG(1, 2))
	// Sub-millisecond answer times move the sends off the tick grid.
	s.behave = func(probe.Request) answer {
		return answer{outcome: probe.Success, after: time.Duration(rng.Int64N(int64(5 * time.Millisecond)))}
	}
	for range 200 {
		prev := s.sent[len(s.sent)-1].Sent
		gap := time.Duration(rng.Int64N(int64(3 * sec)))
		s.runUntil(prev + int64(10*time.Millisecond) + rng.Int64N(int64(2*sec)))
		want := max(s.clock.Nanotime(), prev+int64(gap))
		if !s.eng.Recheck(0, gap) {
			t.Fatal("Recheck refused")
		}
		s.runUntil(prev + int64(4*sec))
		next := s.sent[len(s.sent)-1].Sent
		if next == prev || next > want || next <= want-int64(time.Millisecond) {
			t.Fatalf("previous send %d, gap %v: next probe at %+d ns from the wanted %d", prev, gap, next-want, want)
		}
	}
}

func TestRecheckCoalesces(t *testing.T) {
	t.Parallel()
	s := newPassiveSim(t, passiveCheck, alone(1))
	prev := s.sent[0].Sent
	s.runUntil(prev + int64(2*sec))
	for range 5 {
		s.eng.Recheck(0, 5*sec)
	}
	s.runUntil(prev + int64(3*sec))
	s.eng.Recheck(0, 5*sec) // already pulled forward to the same time
	s.eng.Recheck(0, 6*sec) // later than it is due
	s.runUntil(prev + int64(5*sec) + int64(5*time.Millisecond))
	// In flight: the probe is the re-check.
	s.eng.Recheck(0, 0)
	s.runUntil(prev + int64(20*sec))
	got := sentSince(s, prev+1)
	if len(got) != 1 || got[0].Sent != prev+int64(5*sec) {
		t.Fatalf("sent %+v after the rechecks, want one probe 5 s after the previous", got)
	}
	if st := s.eng.Stats(); st.Rechecks != 1 || st.PassiveIgnored != 7 {
		t.Fatalf("Rechecks %d, PassiveIgnored %d; want 1 and 7", st.Rechecks, st.PassiveIgnored)
	}
}

func TestRecheckWhileUnhealthyDisabledOrGone(t *testing.T) {
	t.Parallel()
	check := passiveCheck
	check.UnhealthyInterval = 10 * sec
	s := newPassiveSim(t, check, alone(3))
	// Target 0 goes down; its probes keep the unhealthy interval.
	s.behave = func(r probe.Request) answer {
		if r.ID == 0 {
			return answer{outcome: probe.Refused, after: time.Millisecond}
		}
		return answer{outcome: probe.Success, after: 10 * time.Millisecond}
	}
	for range 3 {
		if !s.eng.Evidence(0, probe.Refused, s.clock.Nanotime()) {
			t.Fatal("Evidence refused")
		}
		s.runFor(time.Millisecond)
	}
	if st := s.eng.Status(0); st.State != Unhealthy {
		t.Fatalf("target 0 %v after 3 passive failures, want unhealthy", st.State)
	}
	if s.eng.Recheck(0, 0) {
		t.Fatal("Recheck queued for an unhealthy target")
	}
	// Queued while healthy, applied after the target fell: ignored.
	for range 3 {
		s.eng.Evidence(1, probe.Timeout, s.clock.Nanotime())
	}
	if !s.eng.Recheck(1, 0) {
		t.Fatal("Recheck refused target 1")
	}
	ed := s.eng.Edit()
	if err := ed.SetDisabled(2, true); err != nil {
		t.Fatal(err)
	}
	ed.Commit()
	from := s.clock.Nanotime()
	s.runFor(time.Millisecond)
	if s.eng.Recheck(2, 0) || s.eng.Evidence(2, probe.Refused, s.clock.Nanotime()) {
		t.Fatal("a disabled target took a recheck or evidence")
	}
	s.runFor(9 * sec)
	if got := sentSince(s, from); len(got) != 0 {
		t.Fatalf("probes %+v within the unhealthy interval after rechecks of unhealthy targets", got)
	}
	if s.eng.Recheck(99, 0) || s.eng.Evidence(99, probe.Refused, 0) {
		t.Fatal("an id the engine never had took a recheck or evidence")
	}
}

// TestPassiveAfterRemoval checks that rechecks and evidence queued for a
// target before its removal was committed never reach the target that
// takes its id, and that a removed id refuses them.
func TestPassiveAfterRemoval(t *testing.T) {
	t.Parallel()
	s := newPassiveSim(t, passiveCheck, alone(2))
	for range 3 {
		s.eng.Evidence(0, probe.Refused, s.clock.Nanotime())
	}
	s.eng.Recheck(0, 0)
	ed := s.eng.Edit()
	if err := ed.Remove(0); err != nil {
		t.Fatal(err)
	}
	ed.Commit()
	s.runFor(time.Millisecond)
	if s.eng.Recheck(0, 0) || s.eng.Evidence(0, probe.Refused, s.clock.Nanotime()) {
		t.Fatal("a removed id took a recheck or evidence")
	}
	ed = s.eng.Edit()
	id, err := ed.Add(TargetSpec{Leader: Alone})
	if err != nil {
		t.Fatal(err)
	}
	if id != 0 {
		t.Fatalf("the new target got id %d, want the freed 0", id)
	}
	// Added but not yet applied by its shard: not taken either.
	if s.eng.Evidence(0, probe.Refused, s.clock.Nanotime()) {
		t.Fatal("evidence taken before the shard started the target")
	}
	ed.Commit()
	s.runFor(time.Second)
	if n := passiveResults(s, 0); n != 0 {
		t.Fatalf("%d passive results for id 0; the evidence was for the removed target", n)
	}
	if st := s.eng.Status(0); st.State != Healthy || st.LastPassive {
		t.Fatalf("new target 0: %+v, want healthy by its own probe", st)
	}
	if st := s.eng.Stats(); st.Evidence != 0 || st.PassiveIgnored != 4 {
		t.Fatalf("Evidence %d, PassiveIgnored %d; want 0 and 4", st.Evidence, st.PassiveIgnored)
	}
	// The new target takes evidence.
	if !s.eng.Evidence(0, probe.Refused, s.clock.Nanotime()) {
		t.Fatal("the new target refused evidence")
	}
	s.runFor(time.Millisecond)
	if n := passiveResults(s, 0); n != 1 {
		t.Fatalf("%d passive results for the new target, want 1", n)
	}
}

func TestPassiveAfterRun(t *testing.T) {
	t.Parallel()
	s := newPassiveSim(t, passiveCheck, alone(1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.eng.Run(ctx)
	if s.eng.Recheck(0, 0) || s.eng.Evidence(0, probe.Refused, s.clock.Nanotime()) {
		t.Fatal("a stopped engine took a recheck or evidence")
	}
}

// TestEvidenceCountsTowardFall checks that passive failures count toward
// fall (E1) like failed probes, together with them, and that the state
// change they cause says so.
func TestEvidenceCountsTowardFall(t *testing.T) {
	t.Parallel()
	s := newPassiveSim(t, passiveCheck, alone(2))
	prev := s.sent[0].Sent
	for i := range 2 {
		s.runFor(sec)
		for id := range uint32(2) {
			if !s.eng.Evidence(id, probe.Refused, s.clock.Nanotime()) {
				t.Fatal("Evidence refused")
			}
		}
		s.runFor(time.Millisecond)
		if st := s.eng.Status(0); st.State != Healthy || st.Streak != i+1 || st.StreakOK || !st.LastPassive || st.LastOutcome != probe.Refused || st.LastProbe != prev+int64(10*time.Millisecond) {
			t.Fatalf("after %d passive failures: %+v, want healthy with a passive failure streak of %d", i+1, st, i+1)
		}
	}
	if len(s.events) != 0 {
		t.Fatalf("state changes %+v before fall", s.events)
	}
	// Target 0: the third failure is passive; target 1: a probe's.
	at := s.clock.Nanotime() + int64(sec)
	s.runUntil(at)
	s.eng.Evidence(0, probe.Timeout, at)
	s.behave = func(probe.Request) answer { return answer{outcome: probe.Refused, after: time.Millisecond} }
	s.runUntil(prev + int64(31*sec))
	want := map[uint32]Event{
		0: {Target: 0, From: Healthy, To: Unhealthy, Outcome: probe.Timeout, Streak: 3, At: at, Passive: true},
		1: {Target: 1, From: Healthy, To: Unhealthy, Outcome: probe.Refused, Streak: 3, At: s.sent[len(s.sent)-1].Sent + int64(time.Millisecond)},
	}
	for _, e := range s.events {
		if e.To == Unhealthy && e != want[e.Target] {
			t.Errorf("event %+v, want %+v", e, want[e.Target])
		}
		delete(want, e.Target)
	}
	if len(want) != 0 {
		t.Fatalf("no state change for %v", want)
	}
	// The probes' schedule did not change: one probe each, 30 s after
	// the first one's answer.
	if got := sentSince(s, prev+1); len(got) != 2 || got[0].Sent != prev+int64(30*sec+10*time.Millisecond) {
		t.Fatalf("probes after the first %+v, want two at the interval", got)
	}
	if n := passiveResults(s, 0); n != 3 {
		t.Fatalf("%d passive results for target 0, want 3", n)
	}
	if st := s.eng.Stats(); st.Evidence != 5 {
		t.Fatalf("Stats.Evidence %d, want 5", st.Evidence)
	}
}

// TestEvidenceCountsInTheWindow checks E2: passive failures take places in
// the sliding window like failed probes.
func TestEvidenceCountsInTheWindow(t *testing.T) {
	t.Parallel()
	check := passiveCheck
	check.Window = Window{Size: 4, Required: 2} // 3 failures among the last 4
	s := newPassiveSim(t, check, alone(1))
	s.runFor(31 * sec) // a second success: 2 of 2
	s.events = nil
	for i := range 3 {
		if st := s.eng.Status(0); st.State != Healthy {
			t.Fatalf("%v after %d passive failures, want healthy", st.State, i)
		}
		s.eng.Evidence(0, probe.Refused, s.clock.Nanotime())
		s.runFor(time.Millisecond)
	}
	if st := s.eng.Status(0); st.State != Unhealthy {
		t.Fatalf("%v after 3 passive failures in a window of 4 needing 2, want unhealthy", st.State)
	}
	// A probe success then leaves 1 of the last 4: still unhealthy.
	s.runFor(31 * sec)
	if st := s.eng.Status(0); st.State != Unhealthy || st.LastPassive {
		t.Fatalf("after a success: %+v, want unhealthy with 1 of 4", st)
	}
	if len(s.events) != 1 || !s.events[0].Passive {
		t.Fatalf("events %+v, want one passive fall", s.events)
	}
}

// TestEvidenceNeverRaises drives targets of every evaluation with random
// probe results and passive failures: no state change caused by evidence
// is ever to healthy, and evidence alone never decides healthy.
func TestEvidenceNeverRaises(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		timing Timing
	}{
		{"rise 1 fall 1", Timing{Rise: 1, Fall: 1}},
		{"rise 2 fall 3", Timing{Rise: 2, Fall: 3}},
		{"window 1 of 1", Timing{Window: Window{Size: 1, Required: 1}}},
		{"window 2 of 5", Timing{Window: Window{Size: 5, Required: 2}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, initial := range []State{Unknown, Healthy, Unhealthy} {
				check := Check{Timing: tt.timing}
				check.Interval, check.Timeout, check.Initial = sec, 100*time.Millisecond, initial
				s := newSim(t, []Check{check}, alone(2), 1)
				rng := rand.New(rand.NewPCG(uint64(initial), 7))
				s.behave = func(probe.Request) answer {
					return answer{outcome: probe.Outcome(rng.IntN(2)), after: time.Millisecond}
				}
				for range 300 {
					s.eng.Evidence(0, probe.Refused, s.clock.Nanotime())
					s.eng.Evidence(1, probe.Refused, s.clock.Nanotime()) // target 1: evidence only, never a success
					s.runFor(time.Duration(rng.Int64N(int64(2 * sec))))
				}
				for _, e := range s.events {
					if e.Passive && e.To != Unhealthy {
						t.Fatalf("passive evidence made a change %+v", e)
					}
					if e.Target == 1 && e.To == Healthy && !resultOK(s, 1) {
						t.Fatalf("target 1 became healthy: %+v", e)
					}
				}
			}
		})
	}
}

// resultOK reports whether a probe of id succeeded.
func resultOK(s *sim, id uint32) bool {
	for _, r := range s.result {
		if r.id == id && !r.r.Passive && r.r.Outcome == probe.Success {
			return true
		}
	}
	return false
}

// TestEvidenceFastRecheck checks E4: a passive failure that starts a
// failure streak brings the next probe forward to the fast re-check gap
// after it, as a failed probe would, in both cadences.
func TestEvidenceFastRecheck(t *testing.T) {
	t.Parallel()
	for _, cadence := range []Cadence{AfterCompletion, FixedRate} {
		t.Run(cadence.String(), func(t *testing.T) {
			t.Parallel()
			check := passiveCheck
			check.Cadence, check.FastRecheck = cadence, 2*sec
			s := newPassiveSim(t, check, alone(1))
			s.runFor(5 * sec)
			at := s.clock.Nanotime() - int64(time.Second) // seen a second ago
			s.eng.Evidence(0, probe.Refused, at)
			s.runFor(10 * sec)
			got := sentSince(s, s.sent[0].Sent+1)
			if len(got) != 1 || got[0].Sent != at+int64(2*sec) {
				t.Fatalf("probes after the evidence %+v, want one at the fast re-check gap after it", got)
			}
		})
	}
}

// TestEvidenceInFlightAndStale checks that evidence leaves a probe in
// flight alone (its result counts after it) and that evidence older than
// the latest probe result is ignored.
func TestEvidenceInFlightAndStale(t *testing.T) {
	t.Parallel()
	s := newPassiveSim(t, passiveCheck, alone(1))
	// The second probe leaves 30 s after the first one's answer, at +10 ms.
	s.runUntil(s.sent[0].Sent + int64(30*sec+15*time.Millisecond))
	if len(s.sent) != 2 {
		t.Fatalf("%d probes sent, want the second in flight", len(s.sent))
	}
	s.eng.Evidence(0, probe.Refused, s.clock.Nanotime())
	s.runFor(time.Millisecond)
	if st := s.eng.Status(0); st.Streak != 1 || st.StreakOK {
		t.Fatalf("%+v, want a passive failure while the probe is out", st)
	}
	s.runFor(20 * time.Millisecond)
	st := s.eng.Status(0)
	if st.Streak != 1 || !st.StreakOK || st.LastPassive {
		t.Fatalf("%+v, want the probe's success after the evidence", st)
	}
	s.eng.Evidence(0, probe.Refused, st.LastProbe-1)
	s.runFor(time.Millisecond)
	if got := s.eng.Status(0); got != st {
		t.Fatalf("stale evidence changed %+v to %+v", st, got)
	}
	if stats := s.eng.Stats(); stats.Evidence != 1 || stats.PassiveIgnored != 1 {
		t.Fatalf("Evidence %d, PassiveIgnored %d; want 1 and 1", stats.Evidence, stats.PassiveIgnored)
	}
	for _, o := range []probe.Outcome{probe.Success, probe.LocalError, probe.NumOutcomes} {
		if s.eng.Evidence(0, o, s.clock.Nanotime()) {
			t.Fatalf("Evidence took outcome %v, which is no failure", o)
		}
	}
}

// TestPassiveSharedStream checks P4 with passive evidence: a recheck of a
// follower pulls the whole stream forward, and every member gets the
// probe's result; evidence applies to the target it names alone.
func TestPassiveSharedStream(t *testing.T) {
	t.Parallel()
	targets := []TargetSpec{{Leader: 0}, {Leader: 0}, {Leader: 0}}
	s := newPassiveSim(t, passiveCheck, targets)
	prev := s.sent[0].Sent
	s.runUntil(prev + int64(2*sec))
	s.eng.Evidence(1, probe.Refused, s.clock.Nanotime())
	s.eng.Recheck(2, sec)
	s.runFor(time.Millisecond)
	if st0, st1 := s.eng.Status(0), s.eng.Status(1); !st0.StreakOK || st1.StreakOK || !st1.LastPassive {
		t.Fatalf("evidence for 1 reached 0 or missed 1: %+v, %+v", st0, st1)
	}
	got := sentSince(s, prev+1)
	if len(got) != 1 || got[0].ID != 0 || got[0].Sent != prev+int64(2*sec) {
		t.Fatalf("sent %+v, want the stream's probe at once", got)
	}
	s.runFor(20 * time.Millisecond)
	for id := range uint32(3) {
		if st := s.eng.Status(id); !st.StreakOK || st.LastPassive || st.LastProbe != got[0].Sent+int64(10*time.Millisecond) {
			t.Fatalf("target %d: %+v, want the pulled-forward probe's success", id, st)
		}
	}
}

// TestRecheckWindow checks the bound of [Timing.RecheckWindow] with the
// simulated clock: client traffic fails every 10 ms and each failure asks
// for a recheck; a target that starts refusing, or dropping, is declared
// unhealthy within the bound after the first recheck, at an interval far
// longer.
func TestRecheckWindow(t *testing.T) {
	t.Parallel()
	const gap = 200 * time.Millisecond
	for _, tt := range []struct {
		name string
		a    answer
		t    time.Duration
	}{
		{"refusing", answer{outcome: probe.Refused, after: 2 * time.Millisecond}, 2 * time.Millisecond},
		{"dropping", answer{silent: true}, sec},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newPassiveSim(t, passiveCheck, alone(1))
			s.runFor(12345 * time.Millisecond)
			s.behave = func(probe.Request) answer { return tt.a }
			onset := s.clock.Nanotime()
			for s.eng.Status(0).State != Unhealthy && s.clock.Nanotime() < onset+int64(time.Minute) {
				s.eng.Recheck(0, gap)
				s.runFor(10 * time.Millisecond)
			}
			var at int64
			for _, e := range s.events {
				at = e.At
			}
			bound := passiveCheck.RecheckWindow(gap, tt.t)
			if at == 0 || at > onset+int64(bound) {
				t.Fatalf("unhealthy %v after the first recheck, want within %v", time.Duration(at-onset), bound)
			}
			if w3 := passiveCheck.FailureWindowFromOnset(); bound*4 > w3 {
				t.Fatalf("bound %v is not far below W3 %v: the test shows nothing", bound, w3)
			}
		})
	}
}

// TestPassiveAllocatesNothing shows that rechecks and evidence, queued and
// applied, allocate nothing in steady state.
func TestPassiveAllocatesNothing(t *testing.T) {
	e, clock := newEchoEngine(t, 10000)
	e.Step(clock.Nanotime())
	i := uint32(0)
	allocs := testing.AllocsPerRun(2000, func() {
		clock.Advance(time.Millisecond)
		e.Recheck(i%10000, 100*time.Millisecond)
		e.Evidence((i+5000)%10000, probe.Refused, clock.Nanotime())
		i++
		e.Step(clock.Nanotime())
	})
	if st := e.Stats(); st.Rechecks < 1000 || st.Evidence < 1000 {
		t.Fatalf("Rechecks %d, Evidence %d: the measurement covers too little", st.Rechecks, st.Evidence)
	}
	if allocs != 0 {
		t.Fatalf("%v allocations per recheck and evidence, want 0", allocs)
	}
}

// TestPassiveConcurrent runs rechecks, evidence, stale answers and edits
// from several goroutines against a running engine (run it with -race):
// every recheck and piece of evidence queued is applied or ignored, none
// lost, and nothing crashes.
func TestPassiveConcurrent(t *testing.T) {
	const n = 512
	clock := NewRealClock()
	l := &countingLauncher{clock: clock, fail: func(id uint32) bool { return id%3 == 0 }}
	checks := []Check{{Timing: Timing{Interval: 5 * time.Millisecond, Timeout: time.Second, FastRecheck: time.Millisecond, Rise: 1, Fall: 3}, Launcher: l}}
	e, err := New(checks, alone(n), Options{Shards: 2, Clock: clock, Observer: nopObserver{}, RingSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	l.sink = e
	ctx, cancel := context.WithCancel(context.Background())
	var run sync.WaitGroup
	run.Go(func() { e.Run(ctx) })
	var queued atomic.Uint64
	var producers sync.WaitGroup
	for g := range 3 {
		producers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for range 20000 {
				id := uint32(rng.IntN(n + 8)) // a few ids the engine never had
				var ok bool
				switch rng.IntN(3) {
				case 0:
					ok = e.Recheck(id, time.Duration(rng.IntN(3))*time.Millisecond)
				case 1:
					ok = e.Evidence(id, probe.Refused, clock.Nanotime())
				default:
					e.Deliver(probe.Result{ID: id, Gen: rng.Uint32(), Outcome: probe.Success, Done: clock.Nanotime()})
				}
				if ok {
					queued.Add(1)
				}
			}
		})
	}
	producers.Go(func() {
		rng := rand.New(rand.NewPCG(9, 9))
		for range 200 {
			ed := e.Edit()
			id := uint32(rng.IntN(n))
			var err error
			switch rng.IntN(3) {
			case 0:
				err = ed.SetDisabled(id, rng.IntN(2) == 0)
			case 1:
				if err = ed.Remove(id); err == nil {
					_, err = ed.Add(TargetSpec{Leader: Alone})
				}
			default:
				_, err = ed.Add(TargetSpec{Leader: Alone})
			}
			if err != nil {
				ed.Abort()
				continue
			}
			ed.Commit()
		}
	})
	producers.Wait()
	want := queued.Load()
	testenv.Eventually(t, "every recheck and piece of evidence applied or ignored", func() (Stats, bool) {
		st := e.Stats()
		return st, st.Rechecks+st.Evidence+st.PassiveIgnored == want
	})
	cancel()
	run.Wait()
	if st := e.Stats(); st.Evidence == 0 || st.Rechecks == 0 {
		t.Fatalf("Evidence %d, Rechecks %d: the test exercised nothing", st.Evidence, st.Rechecks)
	}
}

func TestSendMarkRoundTrip(t *testing.T) {
	t.Parallel()
	e, _ := newBenchEngine(t, 1, 1, silentLauncher{})
	s := e.shards[0]
	rng := rand.New(rand.NewPCG(5, 5))
	for range 100000 {
		sent := e.base + rng.Int64N(int64(1000*time.Hour))
		due := sent + rng.Int64N(int64(49*time.Hour))
		rec := &record{at: due}
		s.setSendMark(rec, sent)
		if got := s.lastSent(rec); got < sent || got >= sent+1<<sendShift {
			t.Fatalf("sent %d, due %d: lastSent %d, want within a mark at or after the send", sent, due, got)
		}
	}
}
