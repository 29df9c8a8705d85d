package scheduler

import (
	"fmt"
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
