package scheduler

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
)

// add adds targets to the sim's engine in one edit and returns their ids.
func (s *sim) add(specs ...TargetSpec) []uint32 {
	s.t.Helper()
	ed := s.eng.Edit()
	ids := make([]uint32, len(specs))
	for i, sp := range specs {
		id, err := ed.Add(sp)
		if err != nil {
			ed.Abort()
			s.t.Fatalf("add %+v: %v", sp, err)
		}
		ids[i] = id
	}
	ed.Commit()
	return ids
}

// remove removes targets from the sim's engine in one edit.
func (s *sim) remove(ids ...uint32) {
	s.t.Helper()
	ed := s.eng.Edit()
	for _, id := range ids {
		if err := ed.Remove(id); err != nil {
			ed.Abort()
			s.t.Fatal(err)
		}
	}
	ed.Commit()
}

// sentFor returns the requests sent for id at or after ns.
func (s *sim) sentFor(id uint32, ns int64) []probe.Request {
	var out []probe.Request
	for _, r := range s.sent {
		if r.ID == id && r.Sent >= ns {
			out = append(out, r)
		}
	}
	return out
}

var oneCheck = []Check{{Timing: Timing{Interval: 10 * sec, Timeout: sec, Rise: 2, Fall: 2}}}

// TestEditAddProbesPromptly checks that a target added to a running engine
// gets its first probe at the step that applies the edit, not somewhere in
// its first interval, and starts in its check's initial state.
func TestEditAddProbesPromptly(t *testing.T) {
	t.Parallel()
	checks := []Check{{Timing: Timing{Interval: 10 * sec, Timeout: sec, Rise: 2, Fall: 2, Initial: Unhealthy}}}
	s := newSim(t, checks, []TargetSpec{{Leader: 0}}, 2)
	s.runFor(3 * sec)
	at := s.clock.Nanotime()
	ids := s.add(TargetSpec{Leader: Alone}, TargetSpec{Leader: Alone})
	for _, id := range ids {
		if st := s.eng.Status(id); st.State != Unhealthy || st.Probed {
			t.Fatalf("target %d right after its edit: %+v, want unhealthy and unprobed", id, st)
		}
	}
	s.runFor(time.Millisecond)
	for _, id := range ids {
		sent := s.sentFor(id, 0)
		if len(sent) != 1 || sent[0].Sent != at {
			t.Fatalf("target %d: sent %+v, want one probe at %d", id, sent, at)
		}
	}
	if got := s.eng.Stats().Targets; got != 3 {
		t.Fatalf("Stats().Targets = %d, want 3", got)
	}
}

// TestEditRemoveAndReuse checks that a removed target is probed no more,
// that the answer to its probe in flight counts as stale, and that its id,
// given to a new target, starts afresh and is not fooled by that answer.
func TestEditRemoveAndReuse(t *testing.T) {
	t.Parallel()
	s := newSim(t, oneCheck, []TargetSpec{{Leader: 0}, {Leader: 1}}, 1)
	s.behave = func(probe.Request) answer { return answer{silent: true} }
	for len(s.sentFor(0, 0)) == 0 {
		s.runFor(100 * time.Millisecond)
	}
	req := s.sentFor(0, 0)[0]
	s.remove(0)
	removedAt := s.clock.Nanotime()
	s.runFor(30 * sec)
	if sent := s.sentFor(0, removedAt); len(sent) != 0 {
		t.Fatalf("removed target probed again: %+v", sent)
	}
	for _, a := range s.result {
		if a.id == 0 {
			t.Fatalf("result applied to removed target: %+v", a)
		}
	}
	if st := s.eng.Stats(); st.Timeouts != uint64(len(s.result)) {
		t.Fatalf("%d timeouts, %d results applied: the removed target's probe must not time out", st.Timeouts, len(s.result))
	}

	// A new target takes id 0 again; the old probe's answer comes late.
	s.behave = func(probe.Request) answer { return answer{outcome: probe.Success} }
	ids := s.add(TargetSpec{Leader: Alone})
	if ids[0] != 0 {
		t.Fatalf("new target got id %d, want the freed id 0", ids[0])
	}
	s.runFor(time.Millisecond)
	stale := s.eng.Stats().Stale
	s.eng.Deliver(probe.Result{ID: 0, Gen: req.Gen, Outcome: probe.Refused, Done: s.clock.Nanotime()})
	s.runFor(time.Millisecond)
	if got := s.eng.Stats().Stale; got != stale+1 {
		t.Fatalf("stale answers %d, want %d: the old probe's answer must not count", got, stale+1)
	}
	if st := s.eng.Status(0); st.State != Unknown || st.LastOutcome != probe.Success {
		t.Fatalf("reused id 0: %+v, want unknown after one success", st)
	}
}

// TestEditLeaderRemovalHandsOver checks P4 across edits: when the leader of a
// shared stream goes, its follower takes the stream over on the leader's
// schedule, keeping its own state.
func TestEditLeaderRemovalHandsOver(t *testing.T) {
	t.Parallel()
	checks := []Check{
		{Timing: Timing{Interval: 5 * sec, Timeout: sec, Rise: 1, Fall: 3}},
		{Timing: Timing{Interval: 2 * sec, Timeout: sec, Rise: 1, Fall: 3}},
	}
	s := newSim(t, checks, []TargetSpec{{Check: 0, Leader: 0}, {Check: 1, Leader: 0}}, 1)
	s.runFor(20 * sec)
	if st := s.eng.Status(1); st.State != Healthy {
		t.Fatalf("follower %+v, want healthy", st)
	}
	last := s.sent[len(s.sent)-1]
	s.remove(0)
	s.runFor(10 * sec)
	next := s.sentFor(1, last.Sent)
	if len(next) == 0 {
		t.Fatal("the follower was not probed after its leader left")
	}
	if want := last.Sent + int64(2*sec); next[0].Sent != want {
		t.Fatalf("first probe of the heir at %d, want the stream's due time %d", next[0].Sent, want)
	}
	for _, e := range s.events {
		if e.Target == 1 && e.At > last.Sent {
			t.Fatalf("heir changed state %v→%v: it must keep its state", e.From, e.To)
		}
	}
	if len(s.sentFor(0, last.Sent+1)) != 0 {
		t.Fatal("removed leader still probed")
	}
}

// TestEditJoinAndDisable checks a target joining a stream (probed once for
// both, P4) and the stream going idle when every member is disabled, then
// probing promptly when one comes back.
func TestEditJoinAndDisable(t *testing.T) {
	t.Parallel()
	checks := []Check{
		{Timing: Timing{Interval: 2 * sec, Timeout: sec, Rise: 1, Fall: 1}},
		{Timing: Timing{Interval: 3 * sec, Timeout: sec, Rise: 1, Fall: 1}},
	}
	s := newSim(t, checks, []TargetSpec{{Check: 0, Leader: 0}}, 1)
	s.runFor(5 * sec)
	j := s.add(TargetSpec{Check: 1, Leader: 0})[0]
	s.runFor(10 * sec)
	if len(s.sentFor(j, 0)) != 0 {
		t.Fatal("a follower was probed on its own")
	}
	if st := s.eng.Status(j); st.State != Healthy {
		t.Fatalf("follower %+v, want healthy through its leader's probes", st)
	}

	ed := s.eng.Edit()
	for _, id := range []uint32{0, j} {
		if err := ed.SetDisabled(id, true); err != nil {
			t.Fatal(err)
		}
	}
	ed.Commit()
	s.runFor(2 * sec) // a probe in flight finishes
	idleFrom := s.clock.Nanotime()
	s.runFor(20 * sec)
	if n := len(s.sentFor(0, idleFrom)); n != 0 {
		t.Fatalf("%d probes of a stream whose members are all disabled", n)
	}
	if st := s.eng.Status(j); !st.Disabled {
		t.Fatalf("disabled follower reads %+v", st)
	}

	ed = s.eng.Edit()
	if err := ed.SetDisabled(j, false); err != nil {
		t.Fatal(err)
	}
	ed.Commit()
	at := s.clock.Nanotime()
	s.runFor(time.Millisecond)
	if sent := s.sentFor(0, at); len(sent) != 1 || sent[0].Sent != at {
		t.Fatalf("after enabling a member: %+v, want one probe at once (%d)", sent, at)
	}
}

// TestEditSetChecks checks that new timing applies to targets that keep
// their state, and that a check in use cannot change its timeout.
func TestEditSetChecks(t *testing.T) {
	t.Parallel()
	s := newSim(t, []Check{{Timing: Timing{Interval: 5 * sec, Timeout: sec, Rise: 1, Fall: 3}}}, []TargetSpec{{Leader: 0}}, 1)
	s.runFor(12 * sec)
	sinceBefore := s.eng.Status(0).Since
	faster := []Check{{Timing: Timing{Interval: sec, Timeout: sec, Rise: 1, Fall: 3}, Launcher: s}}
	ed := s.eng.Edit()
	if err := ed.SetChecks(faster); err != nil {
		t.Fatal(err)
	}
	ed.Commit()
	s.runFor(10 * sec)
	from := s.clock.Nanotime()
	s.runFor(10 * sec)
	if n := len(s.sentFor(0, from)); n < 9 {
		t.Fatalf("%d probes in 10 s after the interval became 1 s", n)
	}
	if st := s.eng.Status(0); st.State != Healthy || st.Since != sinceBefore {
		t.Fatalf("after new timing: %+v, want healthy since %d", st, sinceBefore)
	}
	ed = s.eng.Edit()
	err := ed.SetChecks([]Check{{Timing: Timing{Interval: sec, Timeout: 2 * sec, Rise: 1, Fall: 3}, Launcher: s}})
	ed.Abort()
	if !errors.Is(err, ErrInvalidCheck) {
		t.Fatalf("changing the timeout of a check in use: %v, want ErrInvalidCheck", err)
	}
}

// TestEditRejects checks the edit's guards and that an aborted edit leaves
// the engine as it was.
func TestEditRejects(t *testing.T) {
	t.Parallel()
	checks := []Check{
		{Timing: Timing{Interval: sec, Timeout: sec, Rise: 1, Fall: 1}},
		{Timing: Timing{Interval: sec, Timeout: 2 * sec, Rise: 1, Fall: 1}},
	}
	s := newSim(t, checks, []TargetSpec{{Leader: 0}}, 1)
	ed := s.eng.Edit()
	for name, spec := range map[string]TargetSpec{
		"unknown check":    {Check: 7, Leader: Alone},
		"unknown leader":   {Leader: 99},
		"timeout differs":  {Check: 1, Leader: 0},
		"leader not alive": {Leader: 5},
	} {
		if _, err := ed.Add(spec); !errors.Is(err, ErrInvalidTarget) {
			t.Errorf("%s: Add = %v, want ErrInvalidTarget", name, err)
		}
	}
	if err := ed.Remove(42); !errors.Is(err, ErrInvalidTarget) {
		t.Errorf("Remove(42) = %v, want ErrInvalidTarget", err)
	}
	if _, err := ed.Add(TargetSpec{Leader: Alone}); err != nil {
		t.Fatal(err)
	}
	if err := ed.Remove(0); err != nil {
		t.Fatal(err)
	}
	ed.Abort()
	if st := s.eng.Stats(); st.Targets != 1 {
		t.Fatalf("after an aborted edit: %d targets, want 1", st.Targets)
	}
	s.runFor(3 * sec)
	if len(s.sentFor(0, 0)) == 0 {
		t.Fatal("the target an aborted edit removed is not probed")
	}
}

// TestResume checks that a target added with a saved state reads as that
// state at once and goes on counting from its streak.
func TestResume(t *testing.T) {
	t.Parallel()
	checks := []Check{{Timing: Timing{Interval: sec, Timeout: sec, Rise: 2, Fall: 3, Initial: Unhealthy}}}
	saved := &TargetStatus{State: Healthy, Probed: true, LastOutcome: probe.Refused, Streak: 2, Since: -int64(time.Hour), Smoothed: 3 * time.Millisecond}
	s := newSim(t, checks, []TargetSpec{{Leader: 0, Resume: saved}}, 1)
	if st := s.eng.Status(0); st.State != Healthy || st.Since != saved.Since || st.Streak != 2 || st.Smoothed != saved.Smoothed {
		t.Fatalf("resumed target reads %+v, want %+v", st, saved)
	}
	s.behave = func(probe.Request) answer { return answer{outcome: probe.Refused, after: time.Millisecond} }
	for len(s.events) == 0 {
		s.runFor(100 * time.Millisecond)
	}
	if e := s.events[0]; e.To != Unhealthy || e.Streak != 3 || len(s.result) != 1 {
		t.Fatalf("first event %+v after %d results, want unhealthy on the third failure in a row, the first new one", e, len(s.result))
	}
}

// TestResumeAfterLocalError saves the status of a healthy target whose run
// of successes a local error followed, and resumes it in a new engine: the
// saved streak is one of successes, though the last outcome is no success,
// so failures start a new run and the target turns unhealthy on the fall-th
// of them, not the first.
func TestResumeAfterLocalError(t *testing.T) {
	t.Parallel()
	timing := Timing{Interval: sec, Timeout: sec, Rise: 1, Fall: 3}
	s := newSim(t, []Check{{Timing: timing}}, []TargetSpec{{Leader: 0}}, 1)
	outcome := probe.Success
	s.behave = func(probe.Request) answer { return answer{outcome: outcome, after: time.Millisecond} }
	for len(s.result) < 10 {
		s.runFor(100 * time.Millisecond)
	}
	outcome = probe.LocalError
	for s.result[len(s.result)-1].r.Outcome != probe.LocalError {
		s.runFor(100 * time.Millisecond)
	}
	saved := s.eng.Status(0)
	if saved.State != Healthy || saved.Streak != 10 || !saved.StreakOK || saved.LastOutcome != probe.LocalError {
		t.Fatalf("after 10 successes and a local error: %+v, want healthy with a streak of 10 successes", saved)
	}

	s2 := newSim(t, []Check{{Timing: timing}}, []TargetSpec{{Leader: 0, Resume: &saved}}, 1)
	if st := s2.eng.Status(0); st.Streak != 10 || !st.StreakOK {
		t.Fatalf("resumed target reads %+v, want the saved streak of 10 successes", st)
	}
	s2.behave = func(probe.Request) answer { return answer{outcome: probe.Refused, after: time.Millisecond} }
	for len(s2.events) == 0 {
		s2.runFor(100 * time.Millisecond)
	}
	if e := s2.events[0]; e.To != Unhealthy || e.Streak != 3 || len(s2.result) != 3 {
		t.Fatalf("first event %+v after %d results, want unhealthy on the third failure", e, len(s2.result))
	}
}

// TestEditWhileRunning edits a running engine from another goroutine while
// its shards probe and readers read, so the race detector sees edits, rings,
// shards and readers at work together, and checks that the targets in the
// engine at the end all reach their state.
func TestEditWhileRunning(t *testing.T) {
	clock := NewRealClock()
	l := &countingLauncher{clock: clock, fail: func(id uint32) bool { return id%3 == 0 }}
	checks := []Check{{Timing: Timing{Interval: 5 * time.Millisecond, Timeout: time.Second, Rise: 1, Fall: 1}, Launcher: l}}
	targets := make([]TargetSpec, 300)
	for i := range targets {
		targets[i].Leader = uint32(i)
	}
	e, err := New(checks, targets, Options{Shards: 3, Clock: clock, Observer: nopObserver{}})
	if err != nil {
		t.Fatal(err)
	}
	l.sink = e
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	go func() {
		for ctx.Err() == nil {
			for id := range uint32(e.Len()) {
				_ = e.Status(id)
			}
		}
	}()
	live := map[uint32]bool{}
	for i := range uint32(300) {
		live[i] = true
	}
	for round := range 50 {
		ed := e.Edit()
		n := 0
		for id := range live {
			if n++; n > 20 {
				break
			}
			if err := ed.Remove(id); err != nil {
				t.Fatal(err)
			}
			delete(live, id)
		}
		for range 20 {
			leader := Alone
			if round%2 == 0 {
				for id := range live {
					leader = id
					break
				}
			}
			id, err := ed.Add(TargetSpec{Leader: leader})
			if err != nil {
				t.Fatal(err)
			}
			live[id] = true
		}
		ed.Commit()
		// Not a wait for a condition: the engine probes between edits,
		// which is the interleaving this test is about.
		time.Sleep(time.Millisecond)
	}
	for id := range live {
		testenv.Eventually(t, fmt.Sprintf("target %d decided", id), func() (TargetStatus, bool) {
			st := e.Status(id)
			return st, st.State != Unknown
		})
	}
	cancel()
	<-done
	if got := e.Stats().Targets; got != len(live) {
		t.Fatalf("Stats().Targets = %d, want %d", got, len(live))
	}
}

// TestEditHeir checks the rule by which a stream passes on when its leader
// goes: to the enabled member with the lowest id, and to the lowest id when
// none is enabled (a caller mirrors the rule to know the leader).
func TestEditHeir(t *testing.T) {
	t.Parallel()
	checks := []Check{{Timing: Timing{Interval: sec, Timeout: sec, Rise: 1, Fall: 1}}}
	targets := []TargetSpec{{Leader: 0}, {Leader: 0, Disabled: true}, {Leader: 0}, {Leader: 0}}
	s := newSim(t, checks, targets, 1)
	s.runFor(3 * sec)
	s.remove(0)
	from := s.clock.Nanotime()
	s.runFor(3 * sec)
	for _, r := range s.sent {
		if r.Sent > from && r.ID != 2 {
			t.Fatalf("probe for %d after the leader left, want the heir 2 (enabled, lowest id)", r.ID)
		}
	}
	ed := s.eng.Edit()
	for _, id := range []uint32{2, 3} {
		if err := ed.SetDisabled(id, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := ed.Remove(2); err != nil {
		t.Fatal(err)
	}
	if err := ed.SetDisabled(3, false); err != nil {
		t.Fatal(err)
	}
	ed.Commit()
	from = s.clock.Nanotime()
	s.runFor(3 * sec)
	n := 0
	for _, r := range s.sent {
		if r.Sent > from {
			if r.ID != 1 {
				t.Fatalf("probe for %d, want 1: with no member enabled at the removal the lowest id leads", r.ID)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("the stream stopped though member 3 is enabled again")
	}
}
