package tcp

import (
	"context"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/probetest"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
	httpprobe "github.com/sondeprobe/sonde/probe/http"
)

// connectPath runs one connect() probe from src to tg with a timeout and
// returns its report: through a Prober (the one-shot path), or on the HTTP
// event loops (the daemon's path).
type connectPath struct {
	name   string
	report func(t testing.TB, src netip.Addr, tg probe.Target, timeout time.Duration) probe.Report
}

// connectPaths are both paths of a connect() probe.
var connectPaths = []connectPath{
	{"oneshot", func(t testing.TB, src netip.Addr, tg probe.Target, timeout time.Duration) probe.Report {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		return New(Options{Source: src}).Report(ctx, tg)
	}},
	{"loops", func(t testing.TB, src netip.Addr, tg probe.Target, timeout time.Duration) probe.Report {
		return newLoopRunner(t, false).report(src, tg, timeout)
	}},
	{"epoll", func(t testing.TB, src netip.Addr, tg probe.Target, timeout time.Duration) probe.Report {
		return newLoopRunner(t, true).report(src, tg, timeout)
	}},
}

// discard is a sink that drops results: the tests read the reports.
type discard struct{}

func (discard) Deliver(probe.Result) {}

// loopRunner is an event loop running connect() probes for one test.
type loopRunner struct {
	ls   *httpprobe.Loops
	tg   probe.Target
	reps chan probe.Report
}

// newLoopRunner starts one event loop, on epoll when noRing and else on
// io_uring, until the test ends; it is created before the probe runs, so a
// test may take resources away in between.
func newLoopRunner(t testing.TB, noRing bool) *loopRunner {
	t.Helper()
	lr := &loopRunner{reps: make(chan probe.Report, 1)}
	lr.ls = startLoops(t, httpprobe.LoopOptions{
		Target:   func(uint32) probe.Target { return lr.tg },
		Sink:     discard{},
		Now:      probe.Nanotime,
		OnReport: func(_ uint32, r *probe.Report) { lr.reps <- *r },
		Loops:    1,
		NoRing:   noRing,
	})
	return lr
}

// startLoops runs loops of o until the test ends; loops asked for
// io_uring that the kernel gives none make the test unavailable.
func startLoops(tb testing.TB, o httpprobe.LoopOptions) *httpprobe.Loops {
	tb.Helper()
	ls, err := httpprobe.NewLoops(o)
	if err != nil {
		tb.Fatal(err)
	}
	if name, why := ls.Engine(); !o.NoRing && name != "io_uring" {
		testenv.Unavailable(tb, "io_uring loops", why)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ls.Run(ctx)
	}()
	tb.Cleanup(func() { cancel(); <-done })
	return ls
}

// report runs one probe of tg from src with timeout on the loop; tg must
// have an address (the loops drop a request for a target without one).
func (lr *loopRunner) report(src netip.Addr, tg probe.Target, timeout time.Duration) probe.Report {
	lr.tg = tg
	l := lr.ls.ConnectLauncher(src)
	now := probe.Nanotime()
	l.Launch(0, []probe.Request{{ID: 1, Gen: 1, Sent: now, Deadline: now + int64(timeout)}})
	return <-lr.reps // the loop ends every probe by its deadline
}

// BenchmarkConnectPaths compares the two paths of a connect() probe with 64
// probes in flight: 64 goroutines each running Prober.Probe (as a worker
// pool does), and the HTTP event loops (GOMAXPROCS of them). CPU per probe
// is the process's, the test listener's included.
func BenchmarkConnectPaths(b *testing.B) {
	tg := listen(b, func(*net.TCPConn) {})
	const inFlight = 64
	b.Run("oneshot", func(b *testing.B) {
		p := New(Options{})
		ctx := b.Context()
		b.SetParallelism(inFlight / runtime.GOMAXPROCS(0))
		b.ReportAllocs()
		cpu := probetest.StartCPU(b)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if r := p.Probe(ctx, tg); r.Outcome != probe.Success {
					b.Errorf("outcome %v", r.Outcome)
					return
				}
			}
		})
		cpu.Report(b)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "probes/s")
	})
	for _, noRing := range []bool{false, true} {
		name := "loops/io_uring"
		if noRing {
			name = "loops/epoll"
		}
		b.Run(name, func(b *testing.B) { benchLoops(b, tg, noRing, inFlight) })
	}
}

// benchLoops runs connect() probes of tg on the HTTP event loops.
func benchLoops(b *testing.B, tg probe.Target, noRing bool, inFlight int) {
	results := make(probetest.Chan, inFlight)
	ls := startLoops(b, httpprobe.LoopOptions{
		Target: func(uint32) probe.Target { return tg },
		Sink:   results,
		Now:    probe.Nanotime,
		NoRing: noRing,
	})
	probetest.BenchInFlight(b, ls.ConnectLauncher(netip.Addr{}), results, inFlight)
}
