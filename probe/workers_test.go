package probe

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// funcProber is a Prober made of a function.
type funcProber func(ctx context.Context, t Target) Result

func (f funcProber) Probe(ctx context.Context, t Target) Result { return f(ctx, t) }

// funcReporter is a Prober and Reporter made of a function; Probe fails the
// test, since Workers must prefer Report.
type funcReporter struct {
	t *testing.T
	f func(ctx context.Context, t Target) Report
}

func (r funcReporter) Probe(context.Context, Target) Result {
	r.t.Error("Probe called on a Reporter")
	return Result{}
}

func (r funcReporter) Report(ctx context.Context, t Target) Report { return r.f(ctx, t) }

// collector is a Sink that keeps results; wg counts deliveries down.
type collector struct {
	mu      sync.Mutex
	results []Result
	wg      sync.WaitGroup
}

func (c *collector) Deliver(r Result) {
	c.mu.Lock()
	c.results = append(c.results, r)
	c.mu.Unlock()
	c.wg.Done()
}

// taken returns a copy of the results delivered so far, in order.
func (c *collector) taken() []Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Result(nil), c.results...)
}

func (c *collector) byID() map[uint32]Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[uint32]Result, len(c.results))
	for _, r := range c.results {
		m[r.ID] = r
	}
	return m
}

func targetOf(id uint32) Target {
	return Target{Addr: netip.AddrFrom4([4]byte{10, 0, byte(id >> 8), byte(id)}), Port: 80}
}

// start runs w until the test ends.
func start(t *testing.T, w *Workers) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func newWorkers(t *testing.T, o WorkersOptions) *Workers {
	t.Helper()
	if o.Target == nil {
		o.Target = targetOf
	}
	w, err := NewWorkers(o)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWorkersDeliverAll(t *testing.T) {
	t.Parallel()
	const lanes, perLane = 4, 250
	var clock atomic.Int64
	clock.Store(12345)
	sink := &collector{}
	sink.wg.Add(lanes * perLane)
	w := newWorkers(t, WorkersOptions{
		Prober: funcProber(func(_ context.Context, tg Target) Result {
			if tg.Addr.As4()[3]%2 == 0 {
				return Result{Outcome: Success, Latency: time.Millisecond}
			}
			return Result{Outcome: Refused}
		}),
		Sink:        sink,
		Now:         clock.Load,
		Concurrency: 8,
	})
	start(t, w)

	var launchers sync.WaitGroup
	for lane := range lanes {
		launchers.Go(func() {
			for i := range perLane / 10 {
				batch := make([]Request, 10)
				for j := range batch {
					id := uint32(lane*perLane + i*10 + j)
					batch[j] = Request{ID: id, Gen: id + 7, Sent: 12000, Deadline: 1 << 62}
				}
				w.Launch(lane, batch)
			}
		})
	}
	launchers.Wait()
	sink.wg.Wait()

	got := sink.byID()
	if len(got) != lanes*perLane {
		t.Fatalf("%d distinct results, want %d", len(got), lanes*perLane)
	}
	for id, r := range got {
		want := Result{ID: id, Gen: id + 7, Outcome: Refused, Done: 12345}
		if targetOf(id).Addr.As4()[3]%2 == 0 {
			want.Outcome, want.Latency = Success, time.Millisecond
		}
		if diff := cmp.Diff(want, r); diff != "" {
			t.Fatalf("result of %d (-want +got):\n%s", id, diff)
		}
	}
	waitStats(t, w, "every result delivered", func(s WorkerStats) bool { return s.Delivered == lanes*perLane })
	want := WorkerStats{Queued: lanes * perLane, Started: lanes * perLane, Delivered: lanes * perLane}
	if diff := cmp.Diff(want, w.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

// waitStats waits until cond holds for w's stats: counters are updated just
// after the Sink sees a result. what says what cond awaits.
func waitStats(t *testing.T, w *Workers, what string, cond func(WorkerStats) bool) {
	t.Helper()
	testenv.Eventually(t, what, func() (WorkerStats, bool) {
		s := w.Stats()
		return s, cond(s)
	})
}

// TestWorkersSkipLate: requests past their deadline when a worker takes
// them are not probed: they are delivered as local errors (late) and
// counted, never left for the scheduler to call timeouts.
func TestWorkersSkipLate(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(1000)
	var probed atomic.Int32
	sink := &collector{}
	sink.wg.Add(3)
	w := newWorkers(t, WorkersOptions{
		Prober: funcProber(func(context.Context, Target) Result {
			probed.Add(1)
			return Result{Outcome: Success}
		}),
		Sink:        sink,
		Now:         clock.Load,
		Concurrency: 1, // FIFO: the last request's result means all were taken
	})
	w.Launch(0, []Request{
		{ID: 1, Deadline: 500},  // long past
		{ID: 2, Deadline: 1000}, // due now: no time left
		{ID: 3, Deadline: 2000},
	})
	start(t, w)
	sink.wg.Wait()
	got := sink.byID()
	for _, id := range []uint32{1, 2} {
		if r := got[id]; r.Outcome != LocalError || r.Cause != CauseLate || r.Done != 1000 {
			t.Errorf("late request %d delivered %+v, want a local error (late) at 1000", id, r)
		}
	}
	if got[3].Outcome != Success {
		t.Errorf("request 3 delivered %+v, want success", got[3])
	}
	waitStats(t, w, "three results delivered", func(s WorkerStats) bool { return s.Delivered == 3 })
	want := WorkerStats{Queued: 3, Started: 1, Delivered: 3, SkippedLate: 2}
	if diff := cmp.Diff(want, w.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	if probed.Load() != 1 {
		t.Errorf("%d probes ran, want 1", probed.Load())
	}
}

// TestWorkersLateTimeout: a probe that times out after its worker started
// it past half its time, or noticed its deadline late, is a local error
// (late); one started in time that times out is a timeout.
func TestWorkersLateTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		start, end int64 // the clock when the worker takes the request, and when the probe returns
		want       Outcome
	}{
		{"in time", 1100, 2000, Timeout},
		{"started past half its time", 1600, 2000, LocalError},
		{"saw its deadline late", 1100, 2000 + int64(lateWake) + 1, LocalError},
		{"saw its deadline a little late", 1100, 2000 + int64(lateWake), Timeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var clock atomic.Int64
			clock.Store(tc.start)
			sink := &collector{}
			sink.wg.Add(1)
			w := newWorkers(t, WorkersOptions{
				Prober: funcProber(func(context.Context, Target) Result {
					clock.Store(tc.end)
					return Result{Outcome: Timeout}
				}),
				Sink: sink, Now: clock.Load, Concurrency: 1,
			})
			w.Launch(0, []Request{{ID: 1, Sent: 1000, Deadline: 2000}})
			start(t, w)
			sink.wg.Wait()
			r := sink.byID()[1]
			if r.Outcome != tc.want || (tc.want == LocalError && r.Cause != CauseLate) {
				t.Errorf("delivered %+v, want %s", r, tc.want)
			}
		})
	}
}

// TestWorkersSettled: the pool has settled up to just before the oldest
// queued request's send and every running probe's deadline.
func TestWorkersSettled(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(5000)
	release := make(chan struct{})
	running := make(chan struct{}, 1)
	sink := &collector{}
	w := newWorkers(t, WorkersOptions{
		Prober: funcProber(func(context.Context, Target) Result {
			running <- struct{}{}
			<-release
			return Result{Outcome: Success}
		}),
		Sink: sink, Now: clock.Load, Concurrency: 1,
	})
	if got := w.Settled(); got != 5000 {
		t.Errorf("empty pool settled %d, want now (5000)", got)
	}
	sink.wg.Add(2)
	w.Launch(0, []Request{{ID: 1, Sent: 4000, Deadline: 9000}, {ID: 2, Sent: 4500, Deadline: 6000}})
	if got := w.Settled(); got != 3999 {
		t.Errorf("queued: settled %d, want 3999", got)
	}
	start(t, w)
	<-running // request 1 runs, request 2 waits
	if got := w.Settled(); got != 4499 {
		t.Errorf("one running, one queued: settled %d, want 4499", got)
	}
	release <- struct{}{}
	<-running // request 2 runs
	if got := w.Settled(); got != 5999 {
		t.Errorf("one running: settled %d, want 5999 (its deadline - 1)", got)
	}
	release <- struct{}{}
	sink.wg.Wait()
	waitStats(t, w, "nothing in flight", func(s WorkerStats) bool { return s.InFlight == 0 })
	testenv.Eventually(t, "Settled back at the clock, 5000", func() (int64, bool) { n := w.Settled(); return n, n == 5000 })
}

// TestWorkersDeadline: the probe's context ends at Request.Deadline, read
// on the scheduler's clock.
func TestWorkersDeadline(t *testing.T) {
	var clock atomic.Int64
	clock.Store(int64(time.Hour))
	deadlines := make(chan time.Time, 1)
	sink := &collector{}
	sink.wg.Add(1)
	w := newWorkers(t, WorkersOptions{
		Prober: funcProber(func(ctx context.Context, _ Target) Result {
			d, _ := ctx.Deadline()
			deadlines <- d
			return Result{}
		}),
		Sink: sink,
		Now:  clock.Load,
	})
	start(t, w)
	before := time.Now()
	w.Launch(0, []Request{{ID: 1, Deadline: int64(time.Hour + 3*time.Second)}})
	got := <-deadlines
	after := time.Now()
	if got.Before(before.Add(3*time.Second)) || got.After(after.Add(3*time.Second)) {
		t.Errorf("probe deadline %v from now, want 3s", got.Sub(before))
	}
	sink.wg.Wait()
}

// TestWorkersConcurrency: no more than Concurrency probes run at once.
func TestWorkersConcurrency(t *testing.T) {
	t.Parallel()
	const n, limit = 20, 4
	var running, peak atomic.Int32
	entered := make(chan struct{}, n)
	release := make(chan struct{})
	sink := &collector{}
	sink.wg.Add(n)
	w := newWorkers(t, WorkersOptions{
		Prober: funcProber(func(context.Context, Target) Result {
			cur := running.Add(1)
			for p := peak.Load(); cur > p && !peak.CompareAndSwap(p, cur); p = peak.Load() {
			}
			entered <- struct{}{}
			<-release
			running.Add(-1)
			return Result{}
		}),
		Sink:        sink,
		Now:         func() int64 { return 0 },
		Concurrency: limit,
	})
	start(t, w)
	batch := make([]Request, n)
	for i := range batch {
		batch[i] = Request{ID: uint32(i), Deadline: 1 << 62}
	}
	w.Launch(0, batch)
	for range limit {
		<-entered
	}
	if s := w.Stats(); s.InFlight != limit || s.Pending != n-limit {
		t.Errorf("with every worker blocked: %d in flight, %d pending; want %d, %d", s.InFlight, s.Pending, limit, n-limit)
	}
	close(release)
	sink.wg.Wait()
	if p := peak.Load(); p != limit {
		t.Errorf("peak concurrency %d, want %d", p, limit)
	}
}

// TestWorkersReport: a Reporter's Report is used and OnReport sees it on
// the worker before the Sink gets the Result.
func TestWorkersReport(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	var mu sync.Mutex
	var order []string
	sink := &collector{}
	sink.wg.Add(1)
	w := newWorkers(t, WorkersOptions{
		Prober: funcReporter{t, func(context.Context, Target) Report {
			return Report{Result: Result{Outcome: Error}, Err: boom, Phases: Phases{Connect: time.Millisecond}}
		}},
		Sink: sinkFunc(func(r Result) {
			mu.Lock()
			order = append(order, "deliver")
			mu.Unlock()
			sink.Deliver(r)
		}),
		Now: func() int64 { return 42 },
		OnReport: func(id uint32, r *Report) {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, "report")
			if id != 9 || r.ID != 9 || r.Gen != 3 || r.Done != 42 || !errors.Is(r.Err, boom) || r.Phases.Connect != time.Millisecond {
				t.Errorf("OnReport(%d, %+v)", id, *r)
			}
		},
	})
	start(t, w)
	w.Launch(0, []Request{{ID: 9, Gen: 3, Deadline: 100}})
	sink.wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{"report", "deliver"}, order); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

type sinkFunc func(Result)

func (f sinkFunc) Deliver(r Result) { f(r) }

// TestWorkersStop: Run ends on cancel, probes in flight are cut short and
// dropped, queued and later requests are abandoned, Run runs only once.
func TestWorkersStop(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	var delivered atomic.Int32
	w := newWorkers(t, WorkersOptions{
		Prober: funcProber(func(ctx context.Context, _ Target) Result {
			entered <- struct{}{}
			<-ctx.Done()
			return Result{Outcome: Error}
		}),
		Sink:        sinkFunc(func(Result) { delivered.Add(1) }),
		Now:         func() int64 { return 0 },
		Concurrency: 1,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	w.Launch(0, []Request{{ID: 1, Deadline: 1 << 62}, {ID: 2, Deadline: 1 << 62}, {ID: 3, Deadline: 1 << 62}})
	<-entered
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	w.Launch(0, []Request{{ID: 4, Deadline: 1 << 62}})
	if err := w.Run(context.Background()); !errors.Is(err, ErrWorkersStarted) {
		t.Errorf("second Run: %v, want ErrWorkersStarted", err)
	}
	want := WorkerStats{Queued: 3, Started: 1, Abandoned: 4}
	if diff := cmp.Diff(want, w.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	if delivered.Load() != 0 {
		t.Errorf("%d results delivered after the stop, want 0", delivered.Load())
	}
}

func TestNewWorkersErrors(t *testing.T) {
	t.Parallel()
	ok := WorkersOptions{
		Prober: funcProber(func(context.Context, Target) Result { return Result{} }),
		Target: targetOf, Sink: sinkFunc(func(Result) {}), Now: func() int64 { return 0 },
	}
	tests := []struct {
		name   string
		modify func(*WorkersOptions)
		want   string
	}{
		{"no prober", func(o *WorkersOptions) { o.Prober = nil }, "new workers: prober is nil"},
		{"no target", func(o *WorkersOptions) { o.Target = nil }, "new workers: target function is nil"},
		{"no sink", func(o *WorkersOptions) { o.Sink = nil }, "new workers: sink is nil"},
		{"no clock", func(o *WorkersOptions) { o.Now = nil }, "new workers: now function is nil"},
		{"negative concurrency", func(o *WorkersOptions) { o.Concurrency = -1 }, "new workers: concurrency -1 is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ok
			tt.modify(&o)
			if _, err := NewWorkers(o); err == nil || err.Error() != tt.want {
				t.Errorf("NewWorkers: %v, want %q", err, tt.want)
			}
		})
	}
	w, err := NewWorkers(ok)
	if err != nil || w.n != DefaultConcurrency {
		t.Errorf("defaults: %v, concurrency %d", err, w.n)
	}
}

func TestRequestRing(t *testing.T) {
	t.Parallel()
	var r requestRing
	next, want := uint32(0), uint32(0)
	// Interleave pushes and pops so the ring wraps and grows while wrapped.
	for round := range 50 {
		for range round * 7 {
			r.push(Request{ID: next})
			next++
		}
		for range round * 5 {
			if got := r.pop().ID; got != want {
				t.Fatalf("pop = %d, want %d", got, want)
			}
			want++
		}
	}
	for r.len() > 0 {
		if got := r.pop().ID; got != want {
			t.Fatalf("pop = %d, want %d", got, want)
		}
		want++
	}
	if want != next {
		t.Fatalf("popped %d, pushed %d", want, next)
	}
	for i := range shrinkAbove + 1 {
		r.push(Request{ID: uint32(i)})
	}
	for r.len() > 0 {
		r.pop()
	}
	if r.buf != nil {
		t.Errorf("capacity %d kept after draining, want released", len(r.buf))
	}
}

// TestWorkersAllocs checks that dispatch does not allocate: Launch into a
// grown queue allocates nothing, and a full round (queue, worker, probe
// context, delivery) costs only the probe context's allocations.
func TestWorkersAllocs(t *testing.T) {
	batch := make([]Request, 64)
	for i := range batch {
		batch[i] = Request{ID: uint32(i), Deadline: 1 << 62}
	}
	t.Run("launch", func(t *testing.T) {
		w := newWorkers(t, WorkersOptions{
			Prober: funcProber(func(context.Context, Target) Result { return Result{} }),
			Sink:   sinkFunc(func(Result) {}), Now: func() int64 { return 0 },
		})
		w.Launch(0, batch) // grow the queue once
		allocs := testing.AllocsPerRun(100, func() {
			w.Launch(0, batch)
			w.mu.Lock()
			for w.q.len() > 0 { // what a worker does, without the probe
				w.q.pop()
			}
			w.mu.Unlock()
		})
		if allocs != 0 {
			t.Errorf("Launch of %d requests: %v allocations, want 0", len(batch), allocs)
		}
	})
	t.Run("round trip", func(t *testing.T) {
		var wg sync.WaitGroup
		w := newWorkers(t, WorkersOptions{
			Prober:      funcProber(func(context.Context, Target) Result { return Result{} }),
			Sink:        sinkFunc(func(Result) { wg.Done() }),
			Now:         func() int64 { return 0 },
			Concurrency: 4,
		})
		start(t, w)
		allocs := testing.AllocsPerRun(50, func() {
			wg.Add(len(batch))
			w.Launch(0, batch)
			wg.Wait()
		})
		perProbe := allocs / float64(len(batch))
		t.Logf("%.2f allocations per request", perProbe)
		// All of them are context.WithTimeout's (context, cancel function,
		// timer and its callback), as a memory profile shows.
		if perProbe > 4 {
			t.Errorf("%.2f allocations per request, want <= 4", perProbe)
		}
	})
}

// TestWorkersChangeWhileRunning changes a running pool's prober and size, as
// a configuration reload does: a probe that runs finishes with its prober,
// later ones use the new one, the pool grows and shrinks without losing a
// request, and requests of targets that are gone are dropped.
func TestWorkersChangeWhileRunning(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var running atomic.Int64
	prober := func(o Outcome) funcProber {
		return funcProber(func(ctx context.Context, tg Target) Result {
			running.Add(1)
			defer running.Add(-1)
			if tg.Port == 1 {
				<-release
			}
			return Result{Outcome: o}
		})
	}
	sink := &collector{}
	w := newWorkers(t, WorkersOptions{
		Prober: prober(Success),
		Target: func(id uint32) Target {
			if id == 99 {
				return Target{} // gone
			}
			return Target{Addr: netip.MustParseAddr("192.0.2.1"), Port: uint16(id)}
		},
		Sink:        sink,
		Now:         func() int64 { return 0 },
		Concurrency: 1,
	})
	start(t, w)
	sink.wg.Add(1)
	w.Launch(0, []Request{{ID: 1, Deadline: 1 << 62}}) // blocks the only worker
	testenv.Eventually(t, "the first probe running", func() (int64, bool) { n := running.Load(); return n, n != 0 })
	w.SetProber(prober(Refused))
	w.SetConcurrency(4)
	const more = 40
	sink.wg.Add(more)
	reqs := []Request{{ID: 99, Deadline: 1 << 62}}
	for i := range more {
		reqs = append(reqs, Request{ID: uint32(10 + i), Deadline: 1 << 62})
	}
	w.Launch(0, reqs)
	testenv.Eventually(t, fmt.Sprintf("%d results", more), func() (int, bool) { n := len(sink.taken()); return n, n == more })
	w.SetConcurrency(1)
	close(release)
	sink.wg.Wait()
	got := sink.taken()
	for _, r := range got[:more] {
		if r.Outcome != Refused {
			t.Fatalf("a probe started after SetProber: %v, want the new prober's refused", r.Outcome)
		}
	}
	if last := got[more]; last.ID != 1 || last.Outcome != Success {
		t.Fatalf("the probe running during SetProber: %+v, want id 1 success from its own prober", last)
	}
	st := w.Stats()
	if st.Abandoned != 1 || st.Delivered != more+1 {
		t.Fatalf("stats %+v: want one abandoned (the gone target) and every other delivered", st)
	}
	testenv.Eventually(t, "one worker running", func() (int, bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.running, w.running == 1
	})
}
