package http

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/internal/probetest"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
)

// quietServer is a loopback HTTP server that allocates nothing: one
// goroutine on a locked thread in blocking system calls, accepting a
// connection, reading the request head and answering "ok". It lets
// testing.AllocsPerRun see the prober's allocations alone.
func quietServer(tb testing.TB) probe.Target {
	tb.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatal(err)
	}
	if err := unix.Listen(fd, 1024); err != nil {
		tb.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		answer := []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok")
		var buf [4096]byte
		for {
			c, _, errno := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(fd), 0, 0, unix.SOCK_CLOEXEC, 0, 0)
			if errno == unix.EINTR || errno == unix.ECONNABORTED {
				continue
			}
			if errno != 0 {
				return // the listener was shut down
			}
			n := 0
			for n < 4 || string(buf[n-4:n]) != "\r\n\r\n" {
				m, err := unix.Read(int(c), buf[n:])
				if err != nil || m == 0 || n+m == len(buf) {
					break
				}
				n += m
			}
			_, _ = unix.Write(int(c), answer)
			_ = unix.Close(int(c))
		}
	}()
	tb.Cleanup(func() {
		_ = unix.Shutdown(fd, unix.SHUT_RDWR) // wakes the blocked accept
		<-done
		_ = unix.Close(fd)
	})
	return probe.Target{Addr: netip.MustParseAddr("127.0.0.1"), Port: uint16(sa.(*unix.SockaddrInet4).Port)}
}

// engine is one way the loops drive their sockets.
type engine struct {
	name   string
	noRing bool
}

// engines are both: every test of the loops runs on each.
var engines = []engine{{"io_uring", false}, {"epoll", true}}

// eachEngine runs f as a subtest per engine.
func eachEngine(t *testing.T, f func(t *testing.T, e engine)) {
	t.Helper()
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) { f(t, e) })
	}
}

// newLoops returns loops of o on engine e; on io_uring it fails the test
// when the kernel gives no ring, or skips it (see requireRing).
func newLoops(tb testing.TB, e engine, o LoopOptions) *Loops {
	tb.Helper()
	o.NoRing = e.noRing
	ls, err := NewLoops(o)
	if err != nil {
		tb.Fatal(err)
	}
	if name, why := ls.Engine(); !e.noRing && name != "io_uring" {
		testenv.Unavailable(tb, "io_uring loops", why)
	}
	return ls
}

// startLoops runs loops on engine e for tests; target is every id's target.
func startLoops(tb testing.TB, e engine, n int, target probe.Target, sink probe.Sink, onReport func(uint32, *probe.Report)) *Loops {
	tb.Helper()
	ls := newLoops(tb, e, LoopOptions{
		Target:   func(uint32) probe.Target { return target },
		Sink:     sink,
		Now:      probe.Nanotime,
		OnReport: onReport,
		Loops:    n,
	})
	runTestLoops(tb, ls)
	return ls
}

// runTestLoops runs ls until the test ends.
func runTestLoops(tb testing.TB, ls *Loops) {
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- ls.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			tb.Error(err)
		}
	})
}

func mustLauncher(tb testing.TB, ls *Loops, p *Prober) *LoopLauncher {
	tb.Helper()
	lr, err := ls.Launcher(p)
	if err != nil {
		tb.Fatal(err)
	}
	return lr
}

// TestLoopZeroAllocs checks that a plain-HTTP probe on the loops allocates
// nothing once the loops are warm: with a fixed Host header, with one per
// target, and with a body match.
func TestLoopZeroAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("runs a few hundred probes; the race detector allocates")
	}
	tg := quietServer(t)
	for _, tc := range []struct {
		name    string
		o       Options
		connect bool // a connect() probe
	}{
		{"host per target", Options{}, false},
		{"fixed host", Options{Host: "app.sonde.test"}, false},
		{"body match", Options{Body: "ok"}, false},
		{"connect", Options{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachEngine(t, func(t *testing.T, e engine) { zeroAllocs(t, e, tg, tc.o, tc.connect) })
		})
	}
}

// zeroAllocs checks that the loops' probes of tg with o, or connect()
// probes, allocate nothing once warm.
func zeroAllocs(t *testing.T, e engine, tg probe.Target, o Options, connect bool) {
	results := make(probetest.Chan, 1)
	ls := startLoops(t, e, 1, tg, results, nil)
	lr := ls.ConnectLauncher(netip.Addr{})
	if !connect {
		lr = mustLauncher(t, ls, mustNew(t, o))
	}
	batch := make([]probe.Request, 1)
	one := func() {
		now := probe.Nanotime()
		batch[0] = probe.Request{ID: 7, Gen: batch[0].Gen + 1, Sent: now, Deadline: now + int64(5*time.Second)}
		lr.Launch(0, batch)
		if r := <-results; r.Outcome != probe.Success {
			t.Fatalf("outcome %v", r.Outcome)
		}
	}
	for range 200 { // warm-up: connection slots, heap, inbox
		one()
	}
	if n := testing.AllocsPerRun(500, one); n != 0 {
		t.Errorf("%v allocations per probe, want 0", n)
	}
}

// TestLoopsDropGoneTargets checks that a request whose target has no
// address (gone from the table) is dropped and counted, as by Workers.
func TestLoopsDropGoneTargets(t *testing.T) {
	t.Parallel()
	eachEngine(t, func(t *testing.T, e engine) {
		results := make(probetest.Chan, 1)
		ls := startLoops(t, e, 1, probe.Target{}, results, nil)
		lr := mustLauncher(t, ls, mustNew(t, Options{}))
		now := probe.Nanotime()
		lr.Launch(0, []probe.Request{{ID: 1, Gen: 1, Sent: now, Deadline: now + int64(time.Second)}})
		testenv.Eventually(t, "the request abandoned", func() (probe.WorkerStats, bool) {
			st := lr.Stats()
			return st, st.Abandoned == 1 && st.Pending == 0
		})
		select {
		case r := <-results:
			t.Errorf("result %+v for a target that is gone", r)
		default:
		}
	})
}

// TestLoopsLate checks that a request taken after its deadline is a
// LocalError (CauseLate), no verdict on the target.
func TestLoopsLate(t *testing.T) {
	t.Parallel()
	eachEngine(t, func(t *testing.T, e engine) {
		results := make(probetest.Chan, 1)
		ls := startLoops(t, e, 1, quietServer(t), results, nil)
		lr := mustLauncher(t, ls, mustNew(t, Options{}))
		now := probe.Nanotime()
		lr.Launch(0, []probe.Request{{ID: 3, Gen: 9, Sent: now - int64(2*time.Second), Deadline: now - int64(time.Second)}})
		r := <-results
		if r.ID != 3 || r.Gen != 9 || r.Outcome != probe.LocalError || r.Cause != probe.CauseLate {
			t.Errorf("result %+v, want id 3 gen 9 local_error late", r)
		}
		if st := lr.Stats(); st.SkippedLate != 1 || st.Delivered != 1 || st.Started != 0 {
			t.Errorf("stats %+v, want 1 skipped late and delivered, none started", st)
		}
	})
}

// TestLoopsStop checks that a stopped launcher delivers nothing more: its
// probe in flight is abandoned, and so are later requests.
func TestLoopsStop(t *testing.T) {
	t.Parallel()
	eachEngine(t, func(t *testing.T, e engine) {
		silent := rawServer(t, func(c *net.TCPConn) { readRequest(c); time.Sleep(300 * time.Millisecond) })
		results := make(probetest.Chan, 4)
		ls := startLoops(t, e, 1, silent, results, nil)
		lr := mustLauncher(t, ls, mustNew(t, Options{}))
		now := probe.Nanotime()
		lr.Launch(0, []probe.Request{{ID: 1, Gen: 1, Sent: now, Deadline: now + int64(100*time.Millisecond)}})
		testenv.Eventually(t, "the probe in flight", func() (probe.WorkerStats, bool) {
			st := lr.Stats()
			return st, st.InFlight == 1
		})
		lr.Stop()
		lr.Launch(0, []probe.Request{{ID: 2, Gen: 1, Sent: now, Deadline: now + int64(time.Second)}})
		st := testenv.Eventually(t, "both requests abandoned", func() (probe.WorkerStats, bool) {
			st := lr.Stats()
			return st, st.Abandoned == 2 && st.InFlight == 0
		})
		if len(results) != 0 || st.Delivered != 0 {
			t.Errorf("%d results delivered after the stop (stats %+v), want none", len(results), st)
		}
	})
}

// TestLoopsSettled checks Settled: before a queued request's Sent while
// the loops have not taken it, and up to now once they are idle.
func TestLoopsSettled(t *testing.T) {
	t.Parallel()
	ls, err := NewLoops(LoopOptions{Target: func(uint32) probe.Target { return probe.Target{} },
		Sink: probetest.Chan(make(chan probe.Result, 1)), Now: probe.Nanotime, Loops: 2})
	if err != nil {
		t.Fatal(err)
	}
	lr := mustLauncher(t, ls, mustNew(t, Options{}))
	now := probe.Nanotime()
	lr.Launch(0, []probe.Request{{ID: 1, Gen: 1, Sent: now - 10, Deadline: now + int64(time.Second)}})
	if got := lr.Settled(); got >= now-10 {
		t.Errorf("Settled %d with a request queued since %d, want before it", got, now-10)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = ls.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	testenv.Eventually(t, "settled past the request", func() (int64, bool) {
		s := lr.Settled()
		return s, s >= now
	})
}

// TestLoopsMany runs many probes at once through two loops (for -race and
// the timer heap's bookkeeping).
func TestLoopsMany(t *testing.T) {
	t.Parallel()
	eachEngine(t, func(t *testing.T, e engine) {
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("fine")) }, nil)
		const n = 300
		results := make(probetest.Chan, n)
		var mu sync.Mutex
		reports := 0
		ls := startLoops(t, e, 2, srv.target(), results, func(uint32, *probe.Report) { mu.Lock(); reports++; mu.Unlock() })
		lr := mustLauncher(t, ls, mustNew(t, Options{Body: "fine"}))
		now := probe.Nanotime()
		for lane := range 3 {
			batch := make([]probe.Request, n/3)
			for i := range batch {
				batch[i] = probe.Request{ID: uint32(lane*n/3 + i), Gen: 1, Sent: now, Deadline: now + int64(10*time.Second)}
			}
			go lr.Launch(lane, batch)
		}
		seen := map[uint32]bool{}
		for range n {
			r := <-results
			if r.Outcome != probe.Success || seen[r.ID] {
				t.Errorf("result %+v (seen before: %v)", r, seen[r.ID])
			}
			seen[r.ID] = true
		}
		// A loop counts a result as delivered just after the sink has it.
		st := testenv.Eventually(t, "every result counted", func() (probe.WorkerStats, bool) {
			st := lr.Stats()
			return st, st.Delivered == n
		})
		mu.Lock()
		defer mu.Unlock()
		if reports != n || st.InFlight != 0 || st.Pending != 0 {
			t.Errorf("%d reports, stats %+v; want %d, none left", reports, st, n)
		}
	})
}

// TestLoopClosesAfterServer checks that the loops close plainly a
// connection whose server closed its side first: the server reads EOF (an
// orderly close, not a reset) and the prober keeps no TIME_WAIT. A server
// that keeps the connection open gets a reset (TestRSTClose).
func TestLoopClosesAfterServer(t *testing.T) {
	t.Parallel()
	eachEngine(t, func(t *testing.T, e engine) {
		seen := make(chan error, 1)
		tg := rawServer(t, func(c *net.TCPConn) {
			if _, err := readRequest(c); err != nil {
				seen <- err
				return
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\n\r\nclose-delimited body"); err != nil {
				seen <- err
				return
			}
			_ = c.CloseWrite()
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			var b [16]byte
			n, err := c.Read(b[:])
			switch {
			case err == io.EOF:
				seen <- nil
			case err != nil:
				seen <- err
			default:
				seen <- fmt.Errorf("the prober sent %q after its request", b[:n])
			}
		})
		rep := loopRunner(e)(t, mustNew(t, Options{}))(t.Context(), tg)
		if rep.Outcome != probe.Success {
			t.Fatalf("outcome %v (%v), want success", rep.Outcome, rep.Err)
		}
		if err := <-seen; err != nil {
			t.Errorf("the server read %v after its answer, want EOF", err)
		}
		if n := timeWaits(t, tg.Port); n != 0 {
			t.Errorf("%d prober sockets to port %d in TIME_WAIT, want none", n, tg.Port)
		}
	})
}

// timeWaits counts the IPv4 sockets of this network namespace in TIME_WAIT
// whose remote port is port: the prober's side of connections to a
// loopback server on port.
func timeWaits(t *testing.T, port uint16) int {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	want := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		// sl local_address rem_address st ...; TIME_WAIT is 06.
		if len(f) > 3 && strings.HasSuffix(f[2], want) && f[3] == "06" {
			n++
		}
	}
	return n
}

// TestLoopsIPv6 checks HTTP and connect() probes of an IPv6 target, with
// the kernel's source address and a source of their own.
func TestLoopsIPv6(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		testenv.Unavailable(t, "IPv6 loopback", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "six") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	tg := probe.Target{Addr: netip.MustParseAddr("::1"), Port: uint16(ln.Addr().(*net.TCPAddr).Port)}
	eachEngine(t, func(t *testing.T, e engine) {
		for _, src := range []netip.Addr{{}, netip.MustParseAddr("::1")} {
			results := make(probetest.Chan, 1)
			ls := startLoops(t, e, 1, tg, results, nil)
			now := probe.Nanotime()
			batch := []probe.Request{{ID: 1, Gen: 1, Sent: now, Deadline: now + int64(5*time.Second)}}
			mustLauncher(t, ls, mustNew(t, Options{Body: "six", Source: src})).Launch(0, batch)
			if r := <-results; r.Outcome != probe.Success {
				t.Errorf("http from %v: outcome %v", src, r.Outcome)
			}
			lr := ls.ConnectLauncher(src)
			lr.Launch(0, batch)
			if r := <-results; r.Outcome != probe.Success {
				t.Errorf("connect from %v: outcome %v", src, r.Outcome)
			}
		}
	})
}
