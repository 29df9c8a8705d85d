package tcp

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/internal/probetest"
	"github.com/sondeprobe/sonde/probe"
)

var loopback = netip.MustParseAddr("127.0.0.1")

// listen returns a loopback listener whose accepted connections go to
// serve, each on its own goroutine.
func listen(t testing.TB, serve func(c *net.TCPConn)) probe.Target {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serve(c)
			})
		}
	})
	return probe.Target{Addr: loopback, Port: uint16(ln.Addr().(*net.TCPAddr).Port)}
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) probe.Target {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	return probe.Target{Addr: loopback, Port: port}
}

// silentPort returns a loopback port that drops SYNs: a listener with a
// backlog of 0 that never accepts, its accept queue filled by connections
// made here. Linux drops a SYN when the accept queue is full, so the next
// connect() sees no answer at all.
func silentPort(t *testing.T) probe.Target {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	tg := probe.Target{Addr: loopback, Port: uint16(sa.(*unix.SockaddrInet4).Port)}
	d := net.Dialer{Timeout: 100 * time.Millisecond}
	for range 16 {
		c, err := d.Dial("tcp", tg.String())
		if err != nil {
			if probe.IsTimeout(err) {
				return tg // the queue is full
			}
			t.Fatalf("filling the accept queue: %v", err)
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Fatal("accept queue never filled")
	return tg
}

func TestConnect(t *testing.T) {
	t.Parallel()
	resets := make(chan error, 1)
	open := listen(t, func(c *net.TCPConn) {
		n, err := c.Read(make([]byte, 1))
		if n > 0 {
			err = errors.New("the probe sent data")
		}
		resets <- err
	})
	tests := []struct {
		name    string
		target  func(t *testing.T) probe.Target
		timeout time.Duration
		want    probe.Outcome
		wantErr error
	}{
		{"success", func(*testing.T) probe.Target { return open }, time.Second, probe.Success, nil},
		{"refused", closedPort, time.Second, probe.Refused, syscall.ECONNREFUSED},
		{"timeout", silentPort, 200 * time.Millisecond, probe.Timeout, nil},
		{"no address", func(*testing.T) probe.Target { return probe.Target{Port: 1} }, time.Second, probe.Error, nil},
	}
	for _, path := range connectPaths {
		for _, tt := range tests {
			t.Run(path.name+"/"+tt.name, func(t *testing.T) {
				tg := tt.target(t)
				if !tg.Addr.IsValid() && path.name != "oneshot" {
					t.Skip("the loops drop the request of a target without an address")
				}
				rep := path.report(t, netip.Addr{}, tg, tt.timeout)
				if rep.Outcome != tt.want {
					t.Errorf("outcome %v (%v), want %v", rep.Outcome, rep.Err, tt.want)
				}
				if (rep.Err == nil) != (tt.want == probe.Success) {
					t.Errorf("err = %v for outcome %v", rep.Err, rep.Outcome)
				}
				if tt.wantErr != nil && !errors.Is(rep.Err, tt.wantErr) {
					t.Errorf("err = %v, want one wrapping %v", rep.Err, tt.wantErr)
				}
				if tg.Addr.IsValid() && (rep.Latency <= 0 || rep.Phases.Connect != rep.Latency) {
					t.Errorf("latency %v, connect phase %v: want equal and > 0", rep.Latency, rep.Phases.Connect)
				}
				if tt.want == probe.Timeout && rep.Latency < tt.timeout/2 {
					t.Errorf("timed out after %v, before the deadline", rep.Latency)
				}
			})
			if tt.want != probe.Success {
				continue
			}
			// The server's read after the successful probe: an RST, no data (T3).
			select {
			case err := <-resets:
				if !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("%s: server read after the probe: %v, want ECONNRESET", path.name, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: server read did not end", path.name)
			}
		}
	}
}

// TestLocalErrors checks that a probe this host cannot run is a LocalError
// with its cause, not a failure of the target.
// Not parallel: it lowers the whole process's descriptor limit.
func TestLocalErrors(t *testing.T) {
	open := listen(t, func(*net.TCPConn) {})
	for _, path := range []string{"oneshot", "loops", "epoll"} {
		t.Run(path, func(t *testing.T) { testLocalErrors(t, path, open) })
	}
}

func testLocalErrors(t *testing.T, path string, open probe.Target) {
	probeIt := func(o Options) probe.Report {
		if path != "oneshot" {
			return newLoopRunner(t, path == "epoll").report(o.Source, open, 5*time.Second)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		return New(o).Report(ctx, open)
	}
	check := func(t *testing.T, rep probe.Report, cause probe.LocalCause) {
		t.Helper()
		if rep.Outcome != probe.LocalError || rep.Cause != cause {
			t.Errorf("outcome %v cause %v (%v), want local_error %v", rep.Outcome, rep.Cause, rep.Err, cause)
		}
	}
	t.Run("out of descriptors", func(t *testing.T) {
		var rep probe.Report
		switch path {
		case "loops":
			t.Skip("io_uring loops open direct sockets, outside the descriptor table; a full table of them is tested by probe/http's TestRingSlotsFull")
		case "epoll":
			lr := newLoopRunner(t, true) // its own descriptors first
			probetest.WithoutDescriptors(t, func() { rep = lr.report(netip.Addr{}, open, 5*time.Second) })
		default:
			probetest.WithoutDescriptors(t, func() { rep = probeIt(Options{}) })
		}
		check(t, rep, probe.CauseDescriptors)
		if !errors.Is(rep.Err, syscall.EMFILE) {
			t.Errorf("err %v, want EMFILE", rep.Err)
		}
	})
	t.Run("source address not local", func(t *testing.T) {
		if b, _ := os.ReadFile("/proc/sys/net/ipv4/ip_nonlocal_bind"); strings.TrimSpace(string(b)) == "1" {
			t.Skip("net.ipv4.ip_nonlocal_bind is 1: any source address binds")
		}
		check(t, probeIt(Options{Source: netip.MustParseAddr("192.0.2.1")}), probe.CausePorts)
	})
}

func TestCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	tg := silentPort(t)
	time.AfterFunc(50*time.Millisecond, cancel)
	if rep := New(Options{}).Probe(ctx, tg); rep.Outcome != probe.Error {
		t.Errorf("outcome %v, want error", rep.Outcome)
	}
}

func TestSource(t *testing.T) {
	t.Parallel()
	from := make(chan netip.Addr, 1)
	tg := listen(t, func(c *net.TCPConn) {
		from <- c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	})
	src := netip.MustParseAddr("127.0.0.2")
	for _, path := range connectPaths {
		t.Run(path.name, func(t *testing.T) {
			if rep := path.report(t, src, tg, 5*time.Second); rep.Outcome != probe.Success {
				t.Fatalf("outcome %v (%v)", rep.Outcome, rep.Err)
			}
			if got := <-from; got != src {
				t.Errorf("server saw %v, want %v", got, src)
			}
		})
	}
}

func BenchmarkConnectProbe(b *testing.B) {
	tg := listen(b, func(*net.TCPConn) {})
	p := New(Options{})
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		if r := p.Probe(ctx, tg); r.Outcome != probe.Success {
			b.Fatalf("outcome %v", r.Outcome)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "probes/s")
}

func BenchmarkConnectProbeParallel(b *testing.B) {
	tg := listen(b, func(*net.TCPConn) {})
	p := New(Options{})
	ctx := b.Context()
	b.ReportAllocs()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r := p.Probe(ctx, tg); r.Outcome != probe.Success {
				b.Errorf("outcome %v", r.Outcome)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "probes/s")
}

// BenchmarkNetDialParallel is the reference for BenchmarkConnectProbeParallel:
// a plain loop of net.Dialer.DialContext with the same context and a close
// with an RST (SO_LINGER 0, as the prober closes), with no classification,
// timing or result.
func BenchmarkNetDialParallel(b *testing.B) {
	tg := listen(b, func(*net.TCPConn) {})
	addr := netip.AddrPortFrom(tg.Addr, tg.Port).String()
	ctx := b.Context()
	b.ReportAllocs()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var d net.Dialer
		for pb.Next() {
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				b.Errorf("dial: %v", err)
				return
			}
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "probes/s")
}
