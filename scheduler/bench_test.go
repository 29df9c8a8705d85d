package scheduler

import (
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/sondeprobe/sonde/probe"
)

// echoLauncher answers every probe with a success, through the engine's
// ring, as a prober on another goroutine would: at once, but a target's
// first probe after a pseudo-random time below a second, which scatters the
// targets' phases over the second in no particular order of their records,
// as those of a long-running engine's targets are: the load is even, and the
// records each tick touches are spread over the table.
type echoLauncher struct{ e *Engine }

func (l *echoLauncher) Launch(lane int, batch []probe.Request) {
	for _, req := range batch {
		done := req.Sent
		if req.Gen == 1 {
			done += int64(mix64(uint64(req.ID))%uint64(time.Second/time.Millisecond-1)) * int64(time.Millisecond)
		}
		l.e.Deliver(probe.Result{ID: req.ID, Gen: req.Gen, Outcome: probe.Success, Latency: time.Microsecond, Done: done})
	}
}

// nopObserver stands in for the daemon's metrics observer.
type nopObserver struct{}

func (nopObserver) Result(uint32, probe.Result) {}
func (nopObserver) Transition(Event)            {}

// newEchoEngine builds an engine of n targets at interval 1 s on one shard,
// answered at once.
func newEchoEngine(tb testing.TB, n int) (*Engine, *SimClock) {
	tb.Helper()
	l := &echoLauncher{}
	e, clock := newBenchEngine(tb, n, 1, l)
	l.e = e
	return e, clock
}

// newBenchEngine builds an engine of n targets at interval 1 s on shards
// shards, whose probes go to l.
func newBenchEngine(tb testing.TB, n, shards int, l probe.Launcher) (*Engine, *SimClock) {
	tb.Helper()
	clock := NewSimClock(time.Unix(0, 0))
	checks := []Check{{Timing: Timing{Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 3}, Launcher: l}}
	targets := make([]TargetSpec, n)
	for i := range targets {
		targets[i].Leader = uint32(i)
	}
	e, err := New(checks, targets, Options{Shards: shards, Clock: clock, Observer: nopObserver{}})
	if err != nil {
		tb.Fatal(err)
	}
	return e, clock
}

// TestStepAllocatesNothing proves the hot path — dispatch, launch, result
// through the ring, evaluation, next timer — makes no heap allocation.
func TestStepAllocatesNothing(t *testing.T) {
	e, clock := newEchoEngine(t, 10000)
	e.Step(clock.Nanotime())
	before := e.Stats().Dispatched
	allocs := testing.AllocsPerRun(2000, func() {
		clock.Advance(time.Millisecond)
		e.Step(clock.Nanotime())
	})
	if e.Stats().Dispatched-before < 10000 {
		t.Fatalf("only %d probes dispatched; the measurement covers too little", e.Stats().Dispatched-before)
	}
	if allocs != 0 {
		t.Fatalf("%v allocations per step, want 0", allocs)
	}
}

// BenchmarkScheduledProbe measures the engine's CPU cost per probe: timer
// expiry, dispatch to a launcher, the result's trip through the lock-free
// ring, evaluation and re-arming. One op is one probe (b.N counts probes,
// which b.Loop cannot express).
func BenchmarkScheduledProbe(b *testing.B) {
	e, clock := newEchoEngine(b, 100_000)
	e.Step(clock.Nanotime())
	b.ReportAllocs()
	b.ResetTimer()
	start := e.Stats().Dispatched
	cpu0 := cpuTime()
	for e.Stats().Dispatched-start < uint64(b.N) {
		clock.Advance(time.Millisecond)
		e.Step(clock.Nanotime())
	}
	// CPU time per probe is steadier than wall time on a shared machine.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/probe")
}

// cpuTime returns the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMemoryPerTarget reports the engine's heap per target at
// 1,000,000 targets (bytes/target), after every target's first probe.
func BenchmarkMemoryPerTarget(b *testing.B) {
	const n = 1_000_000
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		e, clock := newEchoEngine(b, n)
		clock.Advance(1100 * time.Millisecond)
		e.Step(clock.Nanotime())
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/target")
		runtime.KeepAlive(e)
	}
}

func TestRecordIsOneCacheLine(t *testing.T) {
	t.Parallel()
	if got := unsafe.Sizeof(record{}); got != 64 {
		t.Fatalf("record is %d bytes, want 64 (one cache line)", got)
	}
}

// silentLauncher never answers.
type silentLauncher struct{}

func (silentLauncher) Launch(int, []probe.Request) {}

// BenchmarkEdit100k measures what a reload or a service-discovery update
// costs the engine: 100,000 targets added to an engine that runs 100,000
// (the edit built and committed, then applied by the shards, first probes
// sent), then removed again. It reports CPU time per edit of 100,000.
func BenchmarkEdit100k(b *testing.B) {
	const n = 100_000
	e, clock := newBenchEngine(b, n, 2, silentLauncher{})
	e.Step(clock.Nanotime())
	ids := make([]uint32, n)
	var err error
	var add, remove time.Duration
	b.ReportAllocs()
	for b.Loop() {
		cpu0 := cpuTime()
		ed := e.Edit()
		for i := range ids {
			if ids[i], err = ed.Add(TargetSpec{Leader: Alone}); err != nil {
				b.Fatal(err)
			}
		}
		ed.Commit()
		clock.Advance(time.Millisecond)
		e.Step(clock.Nanotime())
		cpu1 := cpuTime()
		ed = e.Edit()
		for _, id := range ids {
			if err := ed.Remove(id); err != nil {
				b.Fatal(err)
			}
		}
		ed.Commit()
		clock.Advance(time.Millisecond)
		e.Step(clock.Nanotime())
		add += cpu1 - cpu0
		remove += cpuTime() - cpu1
	}
	b.ReportMetric(float64(add.Milliseconds())/float64(b.N), "add-cpu-ms/100k")
	b.ReportMetric(float64(remove.Milliseconds())/float64(b.N), "remove-cpu-ms/100k")
}

// BenchmarkDeliver measures the delivery path of a probe's answer alone:
// Deliver on the prober's side (lookup, push into the shard's ring) and the
// shard's drain of it (pop, the record's check). The answers are of probes
// no longer in flight, so the shard's work ends at that check and the
// benchmark sees the ring's trip, not evaluation. One op is one answer.
func BenchmarkDeliver(b *testing.B) {
	const n = 1 << 14
	e, clock := newBenchEngine(b, n, 1, silentLauncher{})
	e.Step(clock.Nanotime())
	s := e.shards[0]
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		e.Deliver(probe.Result{ID: uint32(i % n), Gen: 1 << 31, Outcome: probe.Success, Done: clock.Nanotime()})
		if i++; i%1024 == 0 {
			s.drain()
		}
	}
	s.drain()
}
