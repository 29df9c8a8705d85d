package policy

import (
	"slices"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/probetest"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
)

const sec = time.Second

// answer is what a simulated target does with one probe.
type answer struct {
	outcome probe.Outcome
	after   time.Duration // time to the answer
	silent  bool          // never answers: the engine must time it out
}

// sim drives an engine with a SimClock and a fake prober, deterministically,
// as package scheduler's own tests do: it jumps from event to event (the
// engine's or the router's next timer, or the next pending answer), delivers
// due answers and steps the engine and the router, on one goroutine.
type sim struct {
	t       *testing.T
	clock   *scheduler.SimClock
	eng     *scheduler.Engine
	pending probetest.Answers
	// behave decides each probe's answer.
	behave func(req probe.Request) answer
	events []scheduler.Event
	// router, when set, is notified of every state change and stepped
	// with the engine; routes collects its events.
	router *Router
	routes []RouteEvent
	// routeByHand leaves stepping the router to the test, so notices
	// pile up between its steps.
	routeByHand bool
}

// Launch schedules each answer of the batch.
func (s *sim) Launch(lane int, batch []probe.Request) {
	for _, req := range batch {
		a := s.behave(req)
		if a.silent {
			continue
		}
		s.pending.Add(probe.Result{
			ID: req.ID, Gen: req.Gen, Outcome: a.outcome, Latency: a.after, Done: req.Sent + int64(a.after),
		})
	}
}

func (s *sim) Result(uint32, probe.Result) {}
func (s *sim) Route(ev RouteEvent)         { s.routes = append(s.routes, ev) }

func (s *sim) Transition(e scheduler.Event) {
	s.events = append(s.events, e)
	if s.router != nil {
		s.router.Notify(e.Target)
	}
}

// route builds a router over pools, reporting to the sim, stepped with the
// engine from now on.
func (s *sim) route(pools []*Pool, opt RouterOptions) *Router {
	opt.Observer = s
	s.router = NewRouter(s.eng, pools, opt)
	return s.router
}

// step steps the engine and the router at now and returns the next time
// either has something to do, -1 for none.
func (s *sim) step(now int64) int64 {
	next := s.eng.Step(now)
	if s.router != nil && !s.routeByHand {
		if r := s.router.Step(now); r >= 0 && (next < 0 || r < next) {
			next = r
		}
	}
	return next
}

// newSim builds an engine over a copy of checks whose Launcher is the sim,
// and targets. It leaves checks as they are, so tests may share them.
func newSim(t *testing.T, checks []scheduler.Check, targets []scheduler.TargetSpec, shards int) *sim {
	t.Helper()
	s := &sim{t: t, clock: scheduler.NewSimClock(time.Unix(1_700_000_000, 0))}
	s.behave = func(probe.Request) answer { return answer{outcome: probe.Success} }
	checks = slices.Clone(checks)
	for i := range checks {
		checks[i].Launcher = s
	}
	eng, err := scheduler.New(checks, targets, scheduler.Options{Shards: shards, Clock: s.clock, Observer: s, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.eng = eng
	return s
}

// runUntil advances simulated time to end, processing every event before it.
func (s *sim) runUntil(end int64) {
	next := s.step(s.clock.Nanotime())
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
		next = s.step(at)
	}
}

// runFor advances simulated time by d.
func (s *sim) runFor(d time.Duration) { s.runUntil(s.clock.Nanotime() + int64(d)) }
