package scheduler

import (
	"slices"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/probetest"
	"github.com/sondeprobe/sonde/probe"
)

// answer is what a simulated target does with one probe.
type answer struct {
	outcome probe.Outcome
	after   time.Duration // time to the answer
	silent  bool          // never answers: the engine must time it out
}

// sim drives an Engine with a SimClock and a fake prober, deterministically:
// it jumps from event to event (the engine's next timer or the next pending
// answer), delivers due answers and steps the engine, on one goroutine.
type sim struct {
	t       *testing.T
	clock   *SimClock
	eng     *Engine
	pending probetest.Answers
	// behave decides each probe's answer; it sees the request and the
	// target's endpoint id.
	behave func(req probe.Request) answer
	sent   []probe.Request // every dispatched request, in order
	events []Event
	result []appliedResult
}

type appliedResult struct {
	id uint32
	r  probe.Result
}

// Launch records the batch and schedules each answer.
func (s *sim) Launch(lane int, batch []probe.Request) {
	for _, req := range batch {
		s.sent = append(s.sent, req)
		a := s.behave(req)
		if a.silent {
			continue
		}
		s.pending.Add(probe.Result{
			ID: req.ID, Gen: req.Gen, Outcome: a.outcome, Latency: a.after, Done: req.Sent + int64(a.after),
		})
	}
}

func (s *sim) Result(id uint32, r probe.Result) { s.result = append(s.result, appliedResult{id, r}) }
func (s *sim) Transition(e Event)               { s.events = append(s.events, e) }

// newSim builds an engine over a copy of checks whose Launcher is the sim,
// and targets. It leaves checks as they are, so tests may share them.
func newSim(t *testing.T, checks []Check, targets []TargetSpec, shards int) *sim {
	t.Helper()
	s := &sim{t: t, clock: NewSimClock(time.Unix(1_700_000_000, 0))}
	s.behave = func(probe.Request) answer { return answer{outcome: probe.Success} }
	checks = slices.Clone(checks)
	for i := range checks {
		checks[i].Launcher = s
	}
	eng, err := New(checks, targets, Options{Shards: shards, Clock: s.clock, Observer: s, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.eng = eng
	return s
}

// runUntil advances simulated time to end, processing every event before it.
func (s *sim) runUntil(end int64) {
	next := s.eng.Step(s.clock.Nanotime())
	for {
		at := next
		if done, ok := s.pending.Next(); ok && (at < 0 || done < at) {
			at = done
		}
		if at < 0 || at > end {
			s.clock.Set(max(end, s.clock.Nanotime()))
			return
		}
		s.clock.Set(max(at, s.clock.Nanotime()))
		s.pending.Due(at, s.eng.Deliver)
		next = s.eng.Step(at)
	}
}

// runFor advances simulated time by d.
func (s *sim) runFor(d time.Duration) { s.runUntil(s.clock.Nanotime() + int64(d)) }
