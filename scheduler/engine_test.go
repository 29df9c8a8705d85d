package scheduler

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/probe"
)

const sec = time.Second

// TestSharedStream checks P4: two checks that share a probe stream are probed
// once, at the lower interval, and each evaluates the shared results with its
// own thresholds and window.
func TestSharedStream(t *testing.T) {
	t.Parallel()
	checks := []Check{
		{Timing: Timing{Interval: 5 * sec, Timeout: sec, Rise: 1, Fall: 3, Initial: Healthy}},
		{Timing: Timing{Interval: 2 * sec, Timeout: sec, Rise: 1, Fall: 2, Initial: Healthy}},
	}
	targets := []TargetSpec{
		{Check: 0, Leader: 0},
		{Check: 1, Leader: 0}, // same endpoint, other check: follows target 0
	}
	s := newSim(t, checks, targets, 2)
	s.runFor(60 * sec)
	for _, r := range s.sent {
		if r.ID != 0 {
			t.Fatalf("probe sent for follower %d", r.ID)
		}
	}
	// One stream at the 2 s interval: about 60/(2+latency 0) probes.
	if n := len(s.sent); n < 28 || n > 31 {
		t.Fatalf("sent %d probes in 60 s, want one stream at 2 s (~30)", n)
	}
	s.events = nil
	failFrom := s.clock.Nanotime()
	s.behave = func(probe.Request) answer { return answer{silent: true} }
	s.runFor(30 * sec)
	first := firstSentAfter(s, failFrom)
	at := map[uint32]time.Duration{}
	for _, e := range s.events {
		if e.To == Unhealthy {
			at[e.Target] = time.Duration(e.At - first)
		}
	}
	// Follower: its own W1 at its own interval: 1*2 + 2*1 = 4 s.
	if got, want := at[1], checks[1].FailureWindow(); got != want {
		t.Errorf("follower detected after %v, want W1 %v", got, want)
	}
	// Leader: fall 3 at the stream's 2 s gaps: 3*1 + 2*2 = 7 s, inside its
	// own W1 of 3*1 + 2*5 = 13 s.
	if got := at[0]; got != 7*sec || got > checks[0].FailureWindow() {
		t.Errorf("leader detected after %v, want 7s (W1 %v)", got, checks[0].FailureWindow())
	}
}

// TestDisabled checks E6: a target disabled everywhere is never probed and
// keeps no state; a disabled leader still probes for its enabled follower.
func TestDisabled(t *testing.T) {
	t.Parallel()
	checks := []Check{{Timing: Timing{Interval: sec, Timeout: sec, Rise: 1, Fall: 1}}}
	targets := []TargetSpec{
		{Check: 0, Leader: 0, Disabled: true},
		{Check: 0, Leader: 1, Disabled: true},
		{Check: 0, Leader: 1},
	}
	s := newSim(t, checks, targets, 1)
	s.runFor(10 * sec)
	for _, r := range s.sent {
		if r.ID == 0 {
			t.Fatal("disabled target 0 was probed")
		}
	}
	if st := s.eng.Status(0); !st.Disabled || st.Probed {
		t.Fatalf("target 0 status %+v, want disabled and never probed", st)
	}
	if st := s.eng.Status(1); !st.Disabled || st.Probed {
		t.Fatalf("disabled leader 1 status %+v, want disabled and not evaluated", st)
	}
	if st := s.eng.Status(2); st.State != Healthy {
		t.Fatalf("follower 2 status %+v, want healthy through its leader's probes", st)
	}
}

// TestStaleAndLateAnswers checks that answers for an older probe, for an
// unknown id, or completed after the deadline are dropped and counted, and
// that a probe answered too late still counts as a timeout.
func TestStaleAndLateAnswers(t *testing.T) {
	t.Parallel()
	checks := []Check{{Timing: Timing{Interval: sec, Timeout: sec, Rise: 1, Fall: 1, Initial: Healthy}}}
	s := newSim(t, checks, []TargetSpec{{Leader: 0}}, 1)
	s.behave = func(probe.Request) answer { return answer{silent: true} }
	for len(s.sent) == 0 {
		s.runFor(100 * time.Millisecond)
	}
	req := s.sent[0]
	// An answer that completed after the deadline, delivered before the
	// deadline timer fires.
	s.eng.Deliver(probe.Result{ID: 0, Gen: req.Gen, Outcome: probe.Success, Done: req.Deadline + 1})
	s.eng.Deliver(probe.Result{ID: 0, Gen: req.Gen + 7, Outcome: probe.Success, Done: req.Sent})
	s.eng.Deliver(probe.Result{ID: 99})
	s.runUntil(req.Deadline)
	st := s.eng.Stats()
	if st.Late != 1 || st.Stale != 1 || st.Invalid != 1 {
		t.Fatalf("stats %+v: want one late, one stale and one invalid answer", st)
	}
	if st.Timeouts != 1 || s.eng.Status(0).State != Unhealthy {
		t.Fatalf("stats %+v, status %+v: the late answer must count as a timeout", st, s.eng.Status(0))
	}
}

// TestLocalErrorNoVerdict checks that a LocalError (the prober's host could
// not run the probe) moves neither state nor streak, shows as the last
// outcome, and leaves the next probe at the state's interval: a run of local
// errors between failures does not delay nor hasten detection by more than
// the probes it cost.
func TestLocalErrorNoVerdict(t *testing.T) {
	t.Parallel()
	checks := []Check{{Timing: Timing{Interval: sec, Timeout: sec, Rise: 1, Fall: 3, FastRecheck: 200 * time.Millisecond, Initial: Healthy}}}
	s := newSim(t, checks, []TargetSpec{{Leader: 0}}, 1)
	s.runFor(5 * sec)
	before := s.eng.Status(0)
	if before.State != Healthy || before.Streak < 4 {
		t.Fatalf("status %+v, want healthy with a streak of successes", before)
	}
	s.behave = func(probe.Request) answer { return answer{outcome: probe.LocalError, after: time.Millisecond} }
	sent := len(s.sent)
	s.runFor(10 * sec)
	st := s.eng.Status(0)
	if st.State != Healthy || st.Streak != before.Streak || st.LastOutcome != probe.LocalError {
		t.Fatalf("after local errors: status %+v, want healthy, streak %d, last outcome local_error", st, before.Streak)
	}
	if len(s.events) != 0 {
		t.Fatalf("local errors made transitions: %+v", s.events)
	}
	// The interval, not the fast re-check: a local error is no failure.
	if n := len(s.sent) - sent; n < 9 || n > 11 {
		t.Errorf("%d probes in 10 s of local errors, want about 10 (1 s interval)", n)
	}
	// Failures still count from where the streak stood.
	s.behave = func(probe.Request) answer { return answer{outcome: probe.Refused, after: time.Millisecond} }
	s.runFor(5 * sec)
	if len(s.events) != 1 || s.events[0].To != Unhealthy || s.events[0].Streak != 3 {
		t.Fatalf("events %+v, want one change to unhealthy after 3 failures", s.events)
	}
	var local int
	for _, r := range s.result {
		if r.r.Outcome == probe.LocalError {
			local++
		}
	}
	if local == 0 {
		t.Error("the observer saw no local_error result")
	}
}

// TestFirstProbesPrompt checks that first probes leave when the engine
// starts, not somewhere inside the first interval: without a pace all at
// once, with one the burst at once and the rest at the pace's rate, so the
// last leaves after (n - burst) / rate, not after an interval.
func TestFirstProbesPrompt(t *testing.T) {
	t.Parallel()
	const n = 10000
	for _, tt := range []struct {
		name string
		pace Pace
		last time.Duration // when the last first probe leaves
	}{
		{"no pace", Pace{}, 0},
		{"burst 1000 then 4500/s", Pace{Rate: 4500, Burst: 1000}, 2 * sec},
	} {
		t.Run(tt.name, func(t *testing.T) {
			checks := []Check{{Timing: Timing{Interval: 30 * sec, Timeout: 30 * sec, Rise: 1, Fall: 3, Initial: Unhealthy}, FirstProbes: tt.pace}}
			targets := make([]TargetSpec, n)
			for i := range targets {
				targets[i].Leader = uint32(i)
			}
			s := newSim(t, checks, targets, 3)
			start := s.clock.Nanotime()
			s.runFor(10 * sec)
			if len(s.sent) != n {
				t.Fatalf("%d first probes in 10 s, want %d", len(s.sent), n)
			}
			var atOnce int
			var last int64
			for _, r := range s.sent {
				if r.Sent == start {
					atOnce++
				}
				last = max(last, r.Sent-start)
			}
			// Shards pace their own share: their sizes differ a little.
			if got := time.Duration(last); got < tt.last*95/100 || got > tt.last*105/100+time.Millisecond {
				t.Fatalf("last first probe after %v, want %v", got, tt.last)
			}
			// Each of the 3 shards rounds its share of the burst up and
			// may send the next probe up to a tick early.
			if tt.pace.Rate > 0 && (atOnce < tt.pace.Burst || atOnce > tt.pace.Burst+6) {
				t.Fatalf("%d first probes at once, want the burst of %d", atOnce, tt.pace.Burst)
			}
			if tt.pace.Rate == 0 && atOnce != n {
				t.Fatalf("%d first probes at once, want all %d", atOnce, n)
			}
			// App Gateway starts unhealthy: one answered probe later the
			// target is healthy (rise 1).
			if st := s.eng.Status(0); st.State != Healthy {
				t.Fatalf("target 0 after its first probe: %v, want healthy", st.State)
			}
		})
	}
}

// TestFirstProbesShareALauncher checks that checks sending to one launcher
// share its first-probe pace: two checks of 5,000 targets, each asking for a
// burst of 1,000 then 4,500/s, leave as one burst then 4,500/s for all
// 10,000 (the last after 2 s), not at twice the rate.
func TestFirstProbesShareALauncher(t *testing.T) {
	t.Parallel()
	pace := Pace{Rate: 4500, Burst: 1000}
	timing := Timing{Interval: 30 * sec, Timeout: 30 * sec, Rise: 1, Fall: 3}
	checks := []Check{{Timing: timing, FirstProbes: pace}, {Timing: timing, FirstProbes: pace}}
	targets := make([]TargetSpec, 10000)
	for i := range targets {
		targets[i] = TargetSpec{Check: uint16(i % 2), Leader: uint32(i)}
	}
	s := newSim(t, checks, targets, 3)
	start := s.clock.Nanotime()
	s.runFor(10 * sec)
	var last int64
	for _, r := range s.sent {
		last = max(last, r.Sent-start)
	}
	if got := time.Duration(last); got < 1900*time.Millisecond || got > 2100*time.Millisecond {
		t.Fatalf("last first probe after %v, want 2 s: one pace for the launcher", got)
	}
}

// TestManyTargetsAcrossShards runs a mixed fleet over several shards and
// checks that every target is evaluated and lateness stays at zero in
// simulation.
func TestManyTargetsAcrossShards(t *testing.T) {
	t.Parallel()
	const n = 3000
	checks := []Check{
		{Timing: Timing{Interval: 2 * sec, Timeout: sec, Rise: 2, Fall: 3}},
		{Timing: Timing{Interval: 3 * sec, Timeout: 500 * time.Millisecond, Window: Window{Size: 4, Required: 2}}},
	}
	targets := make([]TargetSpec, n)
	for i := range targets {
		targets[i] = TargetSpec{Check: uint16(i % 2), Leader: uint32(i)}
	}
	s := newSim(t, checks, targets, 3)
	s.behave = func(req probe.Request) answer {
		if req.ID%10 == 0 {
			return answer{outcome: probe.Refused, after: time.Millisecond}
		}
		return answer{outcome: probe.Success, after: 3 * time.Millisecond}
	}
	s.runFor(60 * sec)
	for id := range uint32(n) {
		st := s.eng.Status(id)
		want := Healthy
		if id%10 == 0 {
			want = Unhealthy
		}
		if st.State != want {
			t.Fatalf("target %d: %v, want %v", id, st.State, want)
		}
	}
	st := s.eng.Stats()
	if st.LatenessMax != 0 {
		t.Fatalf("lateness max %v in simulation, want 0", st.LatenessMax)
	}
	if st.Results == 0 || st.Results > st.Dispatched {
		t.Fatalf("stats %+v: results must be positive and at most dispatched", st)
	}
}

func TestNewRejectsBadTargets(t *testing.T) {
	t.Parallel()
	l := &countingLauncher{}
	checks := []Check{{Timing: Timing{Interval: sec, Timeout: sec, Rise: 1, Fall: 1}, Launcher: l}, {Timing: Timing{Interval: sec, Timeout: 2 * sec, Rise: 1, Fall: 1}, Launcher: l}}
	bad := map[string][]TargetSpec{
		"unknown check":        {{Check: 9}},
		"leader out of range":  {{Leader: 5}},
		"leader not a leader":  {{Leader: 0}, {Leader: 2}, {Leader: 1}},
		"timeout differs":      {{Leader: 0}, {Check: 1, Leader: 0}},
		"no launcher to probe": nil,
	}
	for name, targets := range bad {
		t.Run(name, func(t *testing.T) {
			cs := checks
			if targets == nil {
				cs = []Check{{Timing: Timing{Interval: sec, Timeout: sec, Rise: 1, Fall: 1}}}
				targets = []TargetSpec{{}}
			}
			if _, err := New(cs, targets, Options{Clock: NewSimClock(time.Time{})}); !errors.Is(err, ErrInvalidTarget) {
				t.Fatalf("New = %v, want ErrInvalidTarget", err)
			}
		})
	}
	if _, err := New([]Check{{Timing: Timing{}}}, nil, Options{}); !errors.Is(err, ErrInvalidCheck) {
		t.Fatalf("New with a zero check = %v, want ErrInvalidCheck", err)
	}
}

// countingLauncher answers every probe at once from its own goroutine-safe
// path and counts launches.
type countingLauncher struct {
	sink     probe.Sink
	clock    Clock
	launched atomic.Int64
	fail     func(id uint32) bool
}

func (l *countingLauncher) Launch(lane int, batch []probe.Request) {
	for _, req := range batch {
		l.launched.Add(1)
		o := probe.Success
		if l.fail != nil && l.fail(req.ID) {
			o = probe.Refused
		}
		l.sink.Deliver(probe.Result{ID: req.ID, Gen: req.Gen, Outcome: o, Latency: time.Microsecond, Done: l.clock.Nanotime()})
	}
}

// transitionCounter signals when n transitions have been seen.
type transitionCounter struct {
	mu   sync.Mutex
	n    int
	want int
	done chan struct{}
}

func (c *transitionCounter) Result(uint32, probe.Result) {}
func (c *transitionCounter) Transition(Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.n == c.want {
		close(c.done)
	}
}

// TestRunRealTime runs the engine with real goroutines and a real clock, so
// the race detector sees the shards, the rings and the readers at work. It
// asserts only that every target reaches its state, never how fast.
func TestRunRealTime(t *testing.T) {
	const n = 2000
	clock := NewRealClock()
	l := &countingLauncher{clock: clock, fail: func(id uint32) bool { return id%4 == 0 }}
	checks := []Check{{Timing: Timing{Interval: 20 * time.Millisecond, Timeout: time.Second, Rise: 2, Fall: 2}, Launcher: l}}
	targets := make([]TargetSpec, n)
	for i := range targets {
		targets[i].Leader = uint32(i)
	}
	obs := &transitionCounter{want: n, done: make(chan struct{})}
	e, err := New(checks, targets, Options{Shards: 3, Clock: clock, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	l.sink = e
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	// Readers poll concurrently with the shards.
	go func() {
		for ctx.Err() == nil {
			for id := range uint32(n) {
				_ = e.Status(id)
			}
			_ = e.Stats()
		}
	}()
	select {
	case <-obs.done:
	case <-ctx.Done():
		t.Fatalf("only %d of %d targets decided before the deadline", obs.n, n)
	}
	cancel()
	<-done
	for id := range uint32(n) {
		want := Healthy
		if id%4 == 0 {
			want = Unhealthy
		}
		if got := e.Status(id).State; got != want {
			t.Fatalf("target %d: %v, want %v", id, got, want)
		}
	}
	e.Deliver(probe.Result{ID: 1}) // after Run: dropped, must not block
}

// TestTickRoundingNeverLate checks that the wheel's 1 ms resolution never
// delays a probe: with answers at arbitrary sub-millisecond times, every
// probe leaves within one tick before its due time (completion plus
// interval), never after it, so detection windows are never stretched by the
// rounding.
func TestTickRoundingNeverLate(t *testing.T) {
	t.Parallel()
	checks := []Check{{Timing: Timing{Interval: 100 * time.Millisecond, Timeout: time.Second, Rise: 1, Fall: 1}}}
	targets := make([]TargetSpec, 50)
	for i := range targets {
		targets[i].Leader = uint32(i)
	}
	s := newSim(t, checks, targets, 2)
	s.behave = func(req probe.Request) answer {
		return answer{outcome: probe.Success, after: time.Duration(137+req.ID*7919%1000) * time.Microsecond}
	}
	s.runFor(5 * time.Second)
	done := map[uint32]int64{} // last completion per target
	ri := 0
	checked := 0
	for _, req := range s.sent {
		for ri < len(s.result) && s.result[ri].r.Done <= req.Sent {
			done[s.result[ri].id] = s.result[ri].r.Done
			ri++
		}
		prev, ok := done[req.ID]
		if !ok {
			continue
		}
		due := prev + int64(checks[0].Interval)
		if req.Sent > due || req.Sent <= due-int64(time.Millisecond) {
			t.Fatalf("target %d sent at %d, due %d: want within the tick before", req.ID, req.Sent, due)
		}
		checked++
	}
	if checked < 1000 {
		t.Fatalf("only %d sends checked", checked)
	}
}

// TestCadenceAtHangingServer checks the probe rate each cadence puts on a
// server that never answers: after completion one probe per timeout plus
// interval, at a fixed rate one per interval, whatever the last one did.
func TestCadenceAtHangingServer(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cadence Cadence
		gap     time.Duration // between consecutive sends
	}{
		{AfterCompletion, 5 * sec},
		{FixedRate, 3 * sec},
	} {
		t.Run(tt.cadence.String(), func(t *testing.T) {
			c := Check{Timing: Timing{Cadence: tt.cadence, Interval: 3 * sec, Timeout: 2 * sec, Rise: 1, Fall: 3}}
			s := newSim(t, []Check{c}, []TargetSpec{{Leader: 0}}, 1)
			s.behave = func(probe.Request) answer { return answer{silent: true} }
			s.runFor(60*sec - 1)
			if want := int(60 * sec / tt.gap); len(s.sent) != want {
				t.Fatalf("%d probes in 60 s, want %d", len(s.sent), want)
			}
			for i := 1; i < len(s.sent); i++ {
				if d := time.Duration(s.sent[i].Sent - s.sent[i-1].Sent); d != tt.gap {
					t.Fatalf("probe %d sent %v after the previous one, want %v", i, d, tt.gap)
				}
			}
			if got, want := c.TimeoutRate(), float64(sec)/float64(tt.gap); got != want {
				t.Fatalf("TimeoutRate = %v, want %v", got, want)
			}
		})
	}
}

// TestFixedRateWithAnswers checks that at a fixed rate the interval runs from
// send to send however long the answers take, as long as they come within
// the timeout.
func TestFixedRateWithAnswers(t *testing.T) {
	t.Parallel()
	c := Check{Timing: Timing{Cadence: FixedRate, Interval: sec, Timeout: sec, Rise: 1, Fall: 1}}
	s := newSim(t, []Check{c}, []TargetSpec{{Leader: 0}}, 1)
	s.behave = func(req probe.Request) answer {
		return answer{outcome: probe.Success, after: time.Duration(req.Gen%7) * 130 * time.Millisecond}
	}
	s.runFor(30*sec - 1)
	if len(s.sent) != 30 {
		t.Fatalf("%d probes in 30 s, want 30", len(s.sent))
	}
	for i, r := range s.sent {
		if r.Sent != int64(i)*int64(sec) {
			t.Fatalf("probe %d sent at %v, want %v", i, time.Duration(r.Sent), time.Duration(i)*sec)
		}
	}
}
