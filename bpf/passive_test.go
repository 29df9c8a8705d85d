//go:build linux

package bpf_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/internal/netns"
	"github.com/sondeprobe/sonde/internal/testenv"
)

// passiveHelperEnv makes the test binary a client process (not the test's
// own, which the program ignores as "sonde itself"): the value is
// "NS ADDR TIMEOUT MODE COUNT". It connects COUNT times from namespace NS to
// ADDR with TIMEOUT; with MODE "close" it closes a connection at once, with
// "wait" it reads until the peer closes or resets it. It prints one line per
// attempt: "ok" or the error.
const passiveHelperEnv = "SONDE_TEST_PASSIVE_DIAL"

// runPassiveHelper runs the helper when the environment asks for it and
// reports whether it did.
func runPassiveHelper() bool {
	arg := os.Getenv(passiveHelperEnv)
	if arg == "" {
		return false
	}
	f := strings.Fields(arg)
	if len(f) != 5 {
		fmt.Fprintf(os.Stderr, "bad helper arguments %q\n", arg)
		os.Exit(2)
	}
	ns, addr, mode := f[0], f[1], f[3]
	timeout, err1 := time.ParseDuration(f[2])
	count, err2 := strconv.Atoi(f[4])
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, "bad helper arguments:", err)
		os.Exit(2)
	}
	err := netns.Do(ns, func() error {
		for range count {
			d := net.Dialer{Timeout: timeout}
			conn, err := d.Dial("tcp", addr)
			if err != nil {
				fmt.Println(err)
				continue
			}
			if mode == "wait" {
				_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, err = conn.Read(make([]byte, 1))
				fmt.Println("ok", err)
			} else {
				fmt.Println("ok")
			}
			conn.Close()
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return true
}

// dialFrom connects count times from another process in namespace ns to
// addr and returns what it printed.
func dialFrom(t *testing.T, ns string, addr netip.AddrPort, timeout time.Duration, mode string, count int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s %s %d", passiveHelperEnv, ns, addr, timeout, mode, count))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("dial helper %s: %v\n%s", addr, err, out)
	}
	return string(out)
}

// passiveNet is a client namespace and a target namespace joined by a veth
// pair, with an IPv4 and an IPv6 address on each side.
type passiveNet struct {
	client, target string
	addr4, addr6   netip.Addr // the target's
}

func newPassiveNet(t *testing.T) passiveNet {
	t.Helper()
	n := passiveNet{client: testenv.LoopbackNamespace(t), target: testenv.LoopbackNamespace(t)}
	// Addresses of the test's own, so that no other process on the host
	// connects to the same peers while the program watches them.
	id := os.Getpid()%250 + 1
	n.addr4 = netip.MustParseAddr(fmt.Sprintf("198.18.%d.2", id))
	n.addr6 = netip.MustParseAddr(fmt.Sprintf("fd00:5e:%x::2", id))
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("-n", n.client, "link", "add", "pc0", "type", "veth", "peer", "name", "pt0", "netns", n.target)
	run("-n", n.client, "addr", "add", fmt.Sprintf("198.18.%d.1/24", id), "dev", "pc0")
	run("-n", n.target, "addr", "add", n.addr4.String()+"/24", "dev", "pt0")
	run("-n", n.client, "addr", "add", fmt.Sprintf("fd00:5e:%x::1/64", id), "dev", "pc0", "nodad")
	run("-n", n.target, "addr", "add", n.addr6.String()+"/64", "dev", "pt0", "nodad")
	run("-n", n.client, "link", "set", "pc0", "up")
	run("-n", n.target, "link", "set", "pt0", "up")
	return n
}

// nft loads the ruleset script into namespace ns.
func nft(t *testing.T, ns, script string) {
	t.Helper()
	cmd := netns.Command(ns, testenv.Tool(t, "nft", "nftables"), "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s\n%s", err, out, script)
	}
}

// listen listens on addr in namespace ns; accept handles each connection.
func listen(t *testing.T, ns string, addr netip.Addr, accept func(*net.TCPConn)) netip.AddrPort {
	t.Helper()
	var ln *net.TCPListener
	err := netns.Do(ns, func() (err error) {
		ln, err = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			accept(c)
		}
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// openPassive opens a Passive with opt and closes it when t ends.
func openPassive(t *testing.T, opt bpf.PassiveOptions) *bpf.Passive {
	t.Helper()
	p, err := bpf.OpenPassive(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// collector reads a Passive's events until t ends.
type collector struct {
	mu     sync.Mutex
	events []bpf.PassiveEvent
}

func collect(t *testing.T, p *bpf.Passive) *collector {
	c := &collector{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- p.Read(ctx, func(ev bpf.PassiveEvent) {
			c.mu.Lock()
			c.events = append(c.events, ev)
			c.mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Read after cancel: %v, want context.Canceled", err)
		}
	})
	return c
}

// of returns the events of slot, with At and Retransmits cleared when
// stable is set, for comparison.
func (c *collector) of(slot uint32, stable bool) []bpf.PassiveEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []bpf.PassiveEvent
	for _, ev := range c.events {
		if ev.Slot == slot {
			if stable {
				ev.At, ev.Retransmits = 0, 0
			}
			out = append(out, ev)
		}
	}
	return out
}

// stats waits until slot's counters satisfy done and returns them.
func stats(t *testing.T, p *bpf.Passive, slot uint32, what string, done func(bpf.PassiveStats) bool) bpf.PassiveStats {
	t.Helper()
	return testenv.Eventually(t, what, func() (bpf.PassiveStats, bool) {
		s, err := p.Stats(slot)
		if err != nil {
			t.Fatal(err)
		}
		return s, done(s)
	})
}

// TestPassiveOutcomes connects from another process to watched targets
// that accept, refuse, drop, reject and reset, over IPv4 and IPv6, and
// checks each target's counters and events: the kernel's classification
// through sk_err and retransmissions, as this kernel does it.
func TestPassiveOutcomes(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, CAP_BPF, CAP_PERFMON")
	n := newPassiveNet(t)
	// The kernel gives up on an unanswered SYN after 1 + 2 s.
	if out, err := netns.Command(n.client, "sysctl", "-qw", "net.ipv4.tcp_syn_retries=1").CombinedOutput(); err != nil {
		t.Fatalf("sysctl: %v: %s", err, out)
	}
	open4 := listen(t, n.target, n.addr4, func(c *net.TCPConn) { c.Close() })
	open6 := listen(t, n.target, n.addr6, func(c *net.TCPConn) { c.Close() })
	resets := listen(t, n.target, n.addr4, func(c *net.TCPConn) {
		_ = c.SetLinger(0) // close with an RST
		c.Close()
	})
	at4 := func(port uint16) netip.AddrPort { return netip.AddrPortFrom(n.addr4, port) }
	at6 := func(port uint16) netip.AddrPort { return netip.AddrPortFrom(n.addr6, port) }
	nft(t, n.target, `table inet sonde_test {
	chain in {
		type filter hook input priority 0; policy accept;
		tcp dport { 7002, 7003, 7008 } drop
		tcp dport 7007 numgen inc mod 2 0 drop
		tcp dport 7007 reject with icmpx type host-unreachable
	}
}`)

	type dial struct {
		addr    netip.AddrPort
		timeout time.Duration
		mode    string
	}
	cases := []struct {
		name   string
		dial   dial
		want   func(bpf.PassiveStats) bool
		events []bpf.PassiveEvent // At and Retransmits cleared
	}{
		{name: "connected", dial: dial{open4, 5 * time.Second, "close"},
			want: func(s bpf.PassiveStats) bool { return s.Connected == 1 && s.Handshakes == 1 && s.HandshakeSum > 0 }},
		{name: "refused", dial: dial{at4(7001), 5 * time.Second, "close"},
			want:   func(s bpf.PassiveStats) bool { return s.Refused == 1 && s.Run == 1 },
			events: []bpf.PassiveEvent{{Slot: 1, Outcome: bpf.PassiveRefused, Run: 1}}},
		{name: "client-timeout-after-retransmit", dial: dial{at4(7002), 1500 * time.Millisecond, "close"},
			want:   func(s bpf.PassiveStats) bool { return s.TimedOut == 1 && s.Retransmits >= 1 && s.Run == 1 },
			events: []bpf.PassiveEvent{{Slot: 2, Outcome: bpf.PassiveTimedOut, Run: 1}}},
		{name: "abandoned", dial: dial{at4(7003), 100 * time.Millisecond, "close"},
			want: func(s bpf.PassiveStats) bool { return s.Abandoned == 1 }},
		{name: "reset", dial: dial{resets, 5 * time.Second, "wait"},
			want: func(s bpf.PassiveStats) bool { return s.Connected == 1 && s.Reset == 1 }},
		{name: "connected6", dial: dial{open6, 5 * time.Second, "close"},
			want: func(s bpf.PassiveStats) bool { return s.Connected == 1 && s.Handshakes == 1 && s.HandshakeSum > 0 }},
		{name: "refused6", dial: dial{at6(7001), 5 * time.Second, "close"},
			want:   func(s bpf.PassiveStats) bool { return s.Refused == 1 },
			events: []bpf.PassiveEvent{{Slot: 6, Outcome: bpf.PassiveRefused, Run: 1}}},
		{name: "unreachable", dial: dial{at4(7007), 5 * time.Second, "close"},
			want:   func(s bpf.PassiveStats) bool { return s.Unreachable == 1 },
			events: []bpf.PassiveEvent{{Slot: 7, Outcome: bpf.PassiveUnreachable, Run: 1}}},
		{name: "kernel-timeout", dial: dial{at4(7008), 20 * time.Second, "close"},
			want:   func(s bpf.PassiveStats) bool { return s.TimedOut == 1 && s.Retransmits >= 1 },
			events: []bpf.PassiveEvent{{Slot: 8, Outcome: bpf.PassiveTimedOut, Run: 1}}},
	}
	p := openPassive(t, bpf.PassiveOptions{MaxTargets: 16})
	var watch []bpf.WatchEntry
	for i, c := range cases {
		watch = append(watch, bpf.WatchEntry{Addr: c.dial.addr, Slot: uint32(i), Threshold: 1})
	}
	if err := p.Watch(watch); err != nil {
		t.Fatal(err)
	}
	events := collect(t, p)

	var wg sync.WaitGroup
	for _, c := range cases {
		wg.Go(func() {
			start := time.Now()
			out := dialFrom(t, n.client, c.dial.addr, c.dial.timeout, c.dial.mode, 1)
			t.Logf("%s: %s after %v", c.name, strings.TrimSpace(out), time.Since(start))
		})
	}
	// Not watched: counted nowhere.
	wg.Go(func() { dialFrom(t, n.client, at4(7009), 5*time.Second, "close", 1) })
	wg.Go(func() { dialFrom(t, n.client, at6(7009), 5*time.Second, "close", 1) })
	wg.Wait()

	// A state change the kernel did not run the program for (another BPF
	// program was running on that CPU: a timer's SYN timeout interrupting
	// one, on a busy machine) leaves its outcome uncounted: such a case is
	// tried once more, and only then.
	retried := map[int]bool{}
	for i, c := range cases {
		deadline := time.Now().Add(15 * time.Second)
		for {
			s, err := p.Stats(uint32(i))
			if err != nil {
				t.Fatal(err)
			}
			if c.want(s) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if s, _ := p.Stats(uint32(i)); !c.want(s) && p.Missed() > 0 && !retried[i] {
			t.Logf("%s: %+v with %d program runs missed by the kernel; trying once more", c.name, s, p.Missed())
			retried[i] = true
			dialFrom(t, n.client, c.dial.addr, c.dial.timeout, c.dial.mode, 1)
		}
	}

	total := bpf.PassiveStats{}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := stats(t, p, uint32(i), "its counters", c.want)
			total = addStats(total, s)
			got := testenv.Eventually(t, "its events", func() ([]bpf.PassiveEvent, bool) {
				got := events.of(uint32(i), true)
				return got, len(got) >= len(c.events)
			})
			if diff := cmp.Diff(c.events, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
	// One attempt per target, each counted once: the unwatched ones added
	// nothing anywhere.
	if attempts := total.Connected + total.Refused + total.TimedOut + total.Unreachable + total.Abandoned; attempts > uint64(len(cases)+len(retried)) || attempts < uint64(len(cases)) {
		t.Errorf("%d attempts counted in all, want %d (%d tried again): %+v", attempts, len(cases), len(retried), total)
	}
	events.mu.Lock()
	defer events.mu.Unlock()
	if len(events.events) < 5 || len(events.events) > 5+len(retried) {
		t.Errorf("events = %+v, want the 5 above", events.events)
	}
	for _, ev := range events.events {
		if ev.At <= 0 || ev.At > monotonicNow() {
			t.Errorf("event %+v: At not a CLOCK_MONOTONIC time before now", ev)
		}
	}
}

// monotonicNow returns CLOCK_MONOTONIC in nanoseconds, the clock of
// PassiveEvent.At.
func monotonicNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

func addStats(a, b bpf.PassiveStats) bpf.PassiveStats {
	a.Connected += b.Connected
	a.Refused += b.Refused
	a.TimedOut += b.TimedOut
	a.Unreachable += b.Unreachable
	a.Abandoned += b.Abandoned
	a.Reset += b.Reset
	return a
}

// TestPassiveIgnoresOwnConnects connects from the test's own process to a
// watched refusing target: ignored by default, counted with IncludeSelf.
func TestPassiveIgnoresOwnConnects(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, CAP_BPF, CAP_PERFMON")
	n := newPassiveNet(t)
	target := netip.AddrPortFrom(n.addr4, 7001)
	own := func() {
		t.Helper()
		err := netns.Do(n.client, func() error {
			conn, err := net.DialTimeout("tcp", target.String(), 5*time.Second)
			if err == nil {
				conn.Close()
				return errors.New("closed port accepted")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, include := range []bool{false, true} {
		t.Run(fmt.Sprintf("IncludeSelf=%v", include), func(t *testing.T) {
			p := openPassive(t, bpf.PassiveOptions{MaxTargets: 4, IncludeSelf: include})
			if err := p.Watch([]bpf.WatchEntry{{Addr: target, Slot: 0, Threshold: 1}}); err != nil {
				t.Fatal(err)
			}
			own()
			// Another process's connect, counted either way, shows that the
			// program saw the traffic.
			dialFrom(t, n.client, target, 5*time.Second, "close", 1)
			want := uint64(1)
			if include {
				want = 2
			}
			s := stats(t, p, 0, "the other process's refusal", func(s bpf.PassiveStats) bool { return s.Refused >= 1 })
			if s.Refused != want {
				t.Errorf("refused = %d, want %d", s.Refused, want)
			}
		})
	}
}

// TestPassiveRateBound refuses many connects to a target with threshold 2:
// every failure is counted, the first two are sent, the rest at a bounded
// rate with the others counted as dropped, and the next success ends the run
// with an event.
func TestPassiveRateBound(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, CAP_BPF, CAP_PERFMON")
	n := newPassiveNet(t)
	closed := netip.AddrPortFrom(n.addr4, 7001)
	p := openPassive(t, bpf.PassiveOptions{MaxTargets: 4})
	if err := p.Watch([]bpf.WatchEntry{{Addr: closed, Slot: 3, Threshold: 2}}); err != nil {
		t.Fatal(err)
	}
	events := collect(t, p)
	const dials = 100
	start := time.Now()
	dialFrom(t, n.client, closed, 5*time.Second, "close", dials)
	elapsed := time.Since(start)
	stats(t, p, 3, "all refusals", func(s bpf.PassiveStats) bool { return s.Refused == dials && s.Run == dials })
	got := testenv.Eventually(t, "the events of the first two", func() ([]bpf.PassiveEvent, bool) {
		got := events.of(3, true)
		return got, len(got) >= 2
	})
	want := []bpf.PassiveEvent{{Slot: 3, Outcome: bpf.PassiveRefused, Run: 1}, {Slot: 3, Outcome: bpf.PassiveRefused, Run: 2}}
	if diff := cmp.Diff(want, got[:2]); diff != "" {
		t.Errorf("first events (-want +got):\n%s", diff)
	}
	// Past the threshold at most one per ~25 ms (with slack for two CPUs
	// passing at once), and the rest dropped.
	limit := 2 + 2*(int(elapsed/(25*time.Millisecond))+1)
	if len(got) > limit || len(got) >= dials {
		t.Errorf("%d events for %d refusals in %v, want at most %d", len(got), dials, elapsed, limit)
	}
	rate, ring := p.Drops()
	if ring != 0 || rate+uint64(len(got)) != dials || p.Dropped() != rate {
		t.Errorf("drops: rate %d, ring %d, Dropped %d; events %d; want rate + events = %d", rate, ring, p.Dropped(), len(got), dials)
	}

}

// TestPassiveRunEnds checks that the first success after failures ends the
// run with an event carrying its length, and that a later success sends
// nothing.
func TestPassiveRunEnds(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, CAP_BPF, CAP_PERFMON")
	n := newPassiveNet(t)
	var ln net.Listener
	port := uint16(7010)
	addr := netip.AddrPortFrom(n.addr4, port)
	p := openPassive(t, bpf.PassiveOptions{MaxTargets: 4})
	if err := p.Watch([]bpf.WatchEntry{{Addr: addr, Slot: 2, Threshold: 3}}); err != nil {
		t.Fatal(err)
	}
	events := collect(t, p)
	dialFrom(t, n.client, addr, 5*time.Second, "close", 2) // refused twice
	err := netns.Do(n.target, func() (err error) {
		ln, err = net.Listen("tcp", addr.String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	testenv.AcceptAndClose(ln)
	dialFrom(t, n.client, addr, 5*time.Second, "close", 2) // accepted twice
	stats(t, p, 2, "two refusals and two successes", func(s bpf.PassiveStats) bool {
		return s.Refused == 2 && s.Connected == 2 && s.Run == 0
	})
	want := []bpf.PassiveEvent{
		{Slot: 2, Outcome: bpf.PassiveRefused, Run: 1},
		{Slot: 2, Outcome: bpf.PassiveRefused, Run: 2},
		{Slot: 2, Outcome: bpf.PassiveConnected, Run: 2},
	}
	got := testenv.Eventually(t, "three events", func() ([]bpf.PassiveEvent, bool) {
		got := events.of(2, true)
		return got, len(got) >= len(want)
	})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestPassiveWatchReplaces checks Watch's replacement of the set: kept
// targets keep their counters, a slot given to another target starts from
// zero, and removed targets stop counting.
func TestPassiveWatchReplaces(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, CAP_BPF, CAP_PERFMON")
	n := newPassiveNet(t)
	a, b := netip.AddrPortFrom(n.addr4, 7001), netip.AddrPortFrom(n.addr6, 7001)
	c := netip.AddrPortFrom(n.addr4, 7002)
	p := openPassive(t, bpf.PassiveOptions{MaxTargets: 4})
	if err := p.Watch([]bpf.WatchEntry{{Addr: a, Slot: 0, Threshold: 1}, {Addr: b, Slot: 1, Threshold: 1}}); err != nil {
		t.Fatal(err)
	}
	dialFrom(t, n.client, a, 5*time.Second, "close", 1)
	dialFrom(t, n.client, b, 5*time.Second, "close", 1)
	stats(t, p, 0, "a refused", func(s bpf.PassiveStats) bool { return s.Refused == 1 })
	stats(t, p, 1, "b refused", func(s bpf.PassiveStats) bool { return s.Refused == 1 })

	ports := func(want ...uint16) {
		t.Helper()
		got, err := bpf.PassiveWatchedPorts(p)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("ports let through = %v, want %v", got, want)
		}
	}
	ports(7001)

	// a keeps slot 0 with a new threshold; b leaves; c takes slot 1.
	if err := p.Watch([]bpf.WatchEntry{{Addr: a, Slot: 0, Threshold: 5}, {Addr: c, Slot: 1, Threshold: 1}}); err != nil {
		t.Fatal(err)
	}
	ports(7001, 7002)
	for slot, want := range []uint64{1, 0} {
		if s, err := p.Stats(uint32(slot)); err != nil || s.Refused != want || s.Run != uint32(want) {
			t.Errorf("slot %d after Watch: %+v, %v; want refused and run %d", slot, s, err, want)
		}
	}
	dialFrom(t, n.client, b, 5*time.Second, "close", 1) // no longer watched
	dialFrom(t, n.client, a, 5*time.Second, "close", 1)
	stats(t, p, 0, "a refused again", func(s bpf.PassiveStats) bool { return s.Refused == 2 })
	if s, _ := p.Stats(1); s.Refused != 0 {
		t.Errorf("slot 1 counted the removed target b: %+v", s)
	}
	if err := p.Watch([]bpf.WatchEntry{{Addr: c, Slot: 1, Threshold: 1}}); err != nil {
		t.Fatal(err)
	}
	ports(7002) // a's port is no longer let through
	if err := p.Watch(nil); err != nil {
		t.Fatal(err)
	}
	ports()
	dialFrom(t, n.client, a, 5*time.Second, "close", 1)
	if s, _ := p.Stats(0); s.Refused != 2 {
		t.Errorf("slot 0 counted after the set was emptied: %+v", s)
	}
}

// TestPassiveWatchErrors checks that a bad set is refused whole, with the
// entry named, and that nothing changes.
func TestPassiveWatchErrors(t *testing.T) {
	testenv.RequirePrivileged(t, "CAP_BPF, CAP_PERFMON")
	p := openPassive(t, bpf.PassiveOptions{MaxTargets: 4})
	good := bpf.WatchEntry{Addr: netip.MustParseAddrPort("198.51.100.1:80"), Slot: 0, Threshold: 3}
	if err := p.Watch([]bpf.WatchEntry{good}); err != nil {
		t.Fatal(err)
	}
	e := func(addr string, slot uint32, threshold int) bpf.WatchEntry {
		var ap netip.AddrPort
		if addr != "" {
			ap = netip.MustParseAddrPort(addr)
		}
		return bpf.WatchEntry{Addr: ap, Slot: slot, Threshold: threshold}
	}
	for _, c := range []struct {
		name    string
		entries []bpf.WatchEntry
		want    string
	}{
		{"no address", []bpf.WatchEntry{good, e("", 1, 1)}, "watch entry 1 (invalid AddrPort): no address"},
		{"port 0", []bpf.WatchEntry{e("198.51.100.2:0", 1, 1)}, "watch entry 0 (198.51.100.2:0): port 0"},
		{"slot", []bpf.WatchEntry{e("198.51.100.2:80", 4, 1)}, "watch entry 0 (198.51.100.2:80): slot 4 outside 0 to 3"},
		{"threshold 0", []bpf.WatchEntry{e("198.51.100.2:80", 1, 0)}, "watch entry 0 (198.51.100.2:80): threshold 0 outside 1 to 255"},
		{"threshold 256", []bpf.WatchEntry{e("[2001:db8::1]:80", 1, 256)}, "watch entry 0 ([2001:db8::1]:80): threshold 256 outside 1 to 255"},
		{"slot twice", []bpf.WatchEntry{e("198.51.100.2:80", 1, 1), e("198.51.100.3:80", 2, 1), e("198.51.100.4:80", 1, 1)},
			"watch entry 2 (198.51.100.4:80): slot 1 already taken by entry 0"},
		{"mapped twice", []bpf.WatchEntry{e("198.51.100.2:80", 1, 1), e("[::ffff:198.51.100.2]:80", 2, 1)},
			"watch entry 1 ([::ffff:198.51.100.2]:80): 198.51.100.2:80 watched twice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := p.Watch(c.entries)
			if err == nil || err.Error() != c.want {
				t.Errorf("Watch: %v, want %q", err, c.want)
			}
		})
	}
	// The good set is still watched: re-watching it changes nothing.
	if err := p.Watch([]bpf.WatchEntry{good}); err != nil {
		t.Fatal(err)
	}
}

// TestPassiveReadStops checks that Read returns on cancel and on Close, and
// passiveNoTracefsEnv marks the copy of the test binary that
// TestPassiveWithoutTracefs runs under ip netns exec.
const passiveNoTracefsEnv = "SONDE_TEST_PASSIVE_NO_TRACEFS"

// TestPassiveWithoutTracefs runs the observer in a copy of the test binary
// under ip netns exec, which gives the copy a mount namespace with a fresh
// /sys where neither tracefs nor debugfs is mounted, and checks that it
// attaches there and sees a connect refused in that network namespace.
func TestPassiveWithoutTracefs(t *testing.T) {
	if os.Getenv(passiveNoTracefsEnv) == "1" {
		passiveWithoutTracefs(t)
		return
	}
	testenv.RequirePrivileged(t, "network and mount namespaces, CAP_BPF, CAP_PERFMON")
	ns := testenv.LoopbackNamespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Tool(t, "ip", "iproute2"), "netns", "exec", ns, os.Args[0],
		"-test.run=^TestPassiveWithoutTracefs$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), passiveNoTracefsEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("in network namespace %s: %v\n%s", ns, err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestPassiveWithoutTracefs") {
		t.Fatalf("the copy in network namespace %s did not pass:\n%s", ns, out)
	}
	t.Logf("in network namespace %s:\n%s", ns, out)
}

// passiveWithoutTracefs is TestPassiveWithoutTracefs in the copy: it checks
// that tracefs is out of reach, then watches a closed port of its network
// namespace and connects to it.
func passiveWithoutTracefs(t *testing.T) {
	// Where the tracepoint library looks for tracefs.
	for _, dir := range []string{"/sys/kernel/tracing", "/sys/kernel/debug", "/sys/kernel/debug/tracing"} {
		var fs unix.Statfs_t
		if err := unix.Statfs(dir, &fs); err == nil && (fs.Type == unix.TRACEFS_MAGIC || fs.Type == unix.DEBUGFS_MAGIC) {
			t.Fatalf("%s is mounted here (file system type %#x): the test needs a mount namespace without tracefs", dir, fs.Type)
		}
	}
	// A port nobody listens on: this network namespace is the test's own.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().(*net.TCPAddr).AddrPort()
	ln.Close()
	p := openPassive(t, bpf.PassiveOptions{MaxTargets: 4, IncludeSelf: true})
	c := collect(t, p)
	if err := p.Watch([]bpf.WatchEntry{{Addr: target, Slot: 0, Threshold: 1}}); err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", target.String(), 5*time.Second); err == nil {
		conn.Close()
		t.Fatalf("%s accepted a connection; want it refused", target)
	} else if !errors.Is(err, unix.ECONNREFUSED) {
		t.Fatalf("connect to %s: %v, want connection refused", target, err)
	}
	s := stats(t, p, 0, "the refusal", func(s bpf.PassiveStats) bool { return s.Refused >= 1 })
	if want := (bpf.PassiveStats{Refused: 1, Run: 1}); s != want {
		t.Errorf("stats = %+v, want %+v", s, want)
	}
	want := []bpf.PassiveEvent{{Slot: 0, Outcome: bpf.PassiveRefused, Run: 1}}
	got := testenv.Eventually(t, "the refusal's event", func() ([]bpf.PassiveEvent, bool) {
		evs := c.of(0, true)
		return evs, len(evs) >= 1
	})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestPassiveSetAttachments checks that a detached observer counts
// nothing and keeps its watched set, that one attached twice counts every
// connection twice, and that it counts once again when attached once.
func TestPassiveSetAttachments(t *testing.T) {
	testenv.RequirePrivileged(t, "CAP_BPF, CAP_PERFMON")
	// A port nobody listens on, on loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().(*net.TCPAddr).AddrPort()
	ln.Close()
	p, err := bpf.OpenPassive(bpf.PassiveOptions{MaxTargets: 4, IncludeSelf: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Watch([]bpf.WatchEntry{{Addr: target, Slot: 0, Threshold: 1}}); err != nil {
		t.Fatal(err)
	}
	refuse := func() {
		t.Helper()
		if conn, err := net.DialTimeout("tcp", target.String(), 5*time.Second); err == nil {
			conn.Close()
			t.Fatalf("%s accepted a connection; want it refused", target)
		} else if !errors.Is(err, unix.ECONNREFUSED) {
			t.Fatalf("connect to %s: %v, want connection refused", target, err)
		}
	}
	set := func(n int) {
		t.Helper()
		if err := p.SetAttachments(n); err != nil {
			t.Fatal(err)
		}
	}
	set(0)
	set(0) // detaching twice is no error
	refuse()
	refuse()
	set(2)
	refuse()
	stats(t, p, 0, "the refusal counted twice", func(s bpf.PassiveStats) bool { return s.Refused >= 2 })
	set(1)
	refuse()
	s := stats(t, p, 0, "the refusal counted once more", func(s bpf.PassiveStats) bool { return s.Refused >= 3 })
	if want := (bpf.PassiveStats{Refused: 3, Run: 3}); s != want {
		t.Errorf("stats = %+v, want %+v: the refusals while detached counted, or one too many", s, want)
	}
	for _, n := range []int{-1, 65} {
		if err := p.SetAttachments(n); err == nil {
			t.Errorf("SetAttachments(%d): no error", n)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.SetAttachments(1); err == nil {
		t.Error("SetAttachments after Close: no error")
	}
}

// refuses a second reader.
func TestPassiveReadStops(t *testing.T) {
	testenv.RequirePrivileged(t, "CAP_BPF, CAP_PERFMON")
	p, err := bpf.OpenPassive(bpf.PassiveOptions{MaxTargets: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Read(ctx, func(bpf.PassiveEvent) {}) }()
	// Until the first Read runs, the second one runs instead and returns
	// at once with its ctx done.
	done2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	testenv.Eventually(t, "a second Read refused", func() (error, bool) {
		err := p.Read(done2, func(bpf.PassiveEvent) {})
		return err, errors.Is(err, bpf.ErrPassiveReading)
	})
	cancel()
	testenv.ReturnsWithin(t, "Read after cancel", func() {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Read after cancel: %v", err)
		}
	})
	go func() { done <- p.Read(context.Background(), func(bpf.PassiveEvent) {}) }()
	time.Sleep(10 * time.Millisecond) // let it block; it must return either way
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.ReturnsWithin(t, "Read after Close", func() {
		if err := <-done; !errors.Is(err, os.ErrClosed) {
			t.Errorf("Read after Close: %v", err)
		}
	})
	if _, err := p.Stats(0); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Stats after Close: %v", err)
	}
	if err := p.Watch(nil); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Watch after Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestPassiveOutcomeNames(t *testing.T) {
	want := map[bpf.PassiveOutcome]struct {
		name    string
		failure bool
	}{
		bpf.PassiveConnected: {"connected", false}, bpf.PassiveRefused: {"refused", true},
		bpf.PassiveTimedOut: {"timed_out", true}, bpf.PassiveUnreachable: {"unreachable", true},
		bpf.PassiveAbandoned: {"abandoned", false}, bpf.PassiveReset: {"reset", false},
		0: {"outcome(0)", false}, 7: {"outcome(7)", false},
	}
	for o, w := range want {
		if o.String() != w.name || o.Failure() != w.failure {
			t.Errorf("outcome %d: %q, failure %v; want %q, %v", uint8(o), o.String(), o.Failure(), w.name, w.failure)
		}
	}
}

func encodePassiveEvent(ev bpf.PassiveEvent) []byte {
	ne := binary.NativeEndian
	b := ne.AppendUint64(nil, uint64(ev.At))
	b = ne.AppendUint32(b, ev.Slot)
	b = ne.AppendUint32(b, ev.Run)
	b = ne.AppendUint32(b, ev.Retransmits)
	return append(b, uint8(ev.Outcome), 0, 0, 0)
}

func TestDecodePassiveEvent(t *testing.T) {
	want := bpf.PassiveEvent{At: 123456789, Slot: 7, Outcome: bpf.PassiveTimedOut, Run: 3, Retransmits: 2}
	var got bpf.PassiveEvent
	if err := bpf.DecodePassiveEvent(encodePassiveEvent(want), &got); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("decoded %+v, want %+v", got, want)
	}
	if err := bpf.DecodePassiveEvent(make([]byte, bpf.PassiveEventSize-1), &got); !errors.Is(err, bpf.ErrBadPassiveEvent) {
		t.Errorf("short record: %v", err)
	}
	bad := encodePassiveEvent(want)
	bad[20] = 9
	if err := bpf.DecodePassiveEvent(bad, &got); !errors.Is(err, bpf.ErrBadPassiveEvent) {
		t.Errorf("outcome 9: %v", err)
	}
}

func FuzzDecodePassiveEvent(f *testing.F) {
	f.Add(encodePassiveEvent(bpf.PassiveEvent{At: 1, Outcome: bpf.PassiveRefused, Run: 1}))
	f.Add([]byte{})
	f.Add(make([]byte, 32))
	f.Fuzz(func(t *testing.T, b []byte) {
		var ev bpf.PassiveEvent
		if err := bpf.DecodePassiveEvent(b, &ev); err != nil {
			return
		}
		if len(b) < bpf.PassiveEventSize || !(ev.Outcome >= bpf.PassiveConnected && ev.Outcome <= bpf.PassiveReset) {
			t.Fatalf("accepted %x as %+v", b, ev)
		}
		if string(encodePassiveEvent(ev)[:20]) != string(b[:20]) || encodePassiveEvent(ev)[20] != b[20] {
			t.Fatalf("round trip differs")
		}
	})
}

// newLookup loads the test program on p's watch maps.
func newLookup(t *testing.T, p *bpf.Passive) *bpf.PassiveLookup {
	t.Helper()
	l, err := bpf.NewPassiveLookup(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// watchModel is what a Watch of entries should make the kernel find.
type watchModel map[netip.AddrPort]bpf.WatchEntry

// check looks every target of universe up through the program, as an
// IPv4 or IPv6 connection and, for IPv4, as an IPv4-mapped IPv6 one, and
// compares with the model.
func (m watchModel) check(t *testing.T, l *bpf.PassiveLookup, universe []netip.AddrPort) {
	t.Helper()
	for _, ap := range universe {
		want, wok := m[ap]
		type found struct {
			slot      uint32
			threshold int
			ok        bool
		}
		wf := found{want.Slot, want.Threshold, wok}
		ask := []struct {
			family uint16
			ap     netip.AddrPort
		}{{unix.AF_INET6, ap}}
		if ap.Addr().Is4() {
			mapped := netip.AddrPortFrom(netip.AddrFrom16(ap.Addr().As16()), ap.Port())
			ask = []struct {
				family uint16
				ap     netip.AddrPort
			}{{unix.AF_INET, ap}, {unix.AF_INET6, mapped}}
		}
		for _, a := range ask {
			slot, threshold, ok, err := l.Lookup(a.family, a.ap)
			if err != nil {
				t.Fatal(err)
			}
			if got := (found{slot, threshold, ok}); got != wf {
				t.Fatalf("lookup %s (family %d): %+v, want %+v", a.ap, a.family, got, wf)
			}
		}
	}
}

// TestPassiveLookupProperty watches random sets one after another — targets
// added, removed and added again, slots and thresholds changed, families
// emptied — and after each Watch looks every target up in the kernel,
// through the program's own lookup, comparing with the set.
func TestPassiveLookupProperty(t *testing.T) {
	testenv.RequirePrivileged(t, "CAP_BPF")
	const maxTargets = 512
	p := openPassive(t, bpf.PassiveOptions{MaxTargets: maxTargets})
	l := newLookup(t, p)
	rng := rand.New(rand.NewPCG(3, 4))
	var universe []netip.AddrPort
	for i := range 200 {
		port := uint16(80 + i%3)
		universe = append(universe,
			netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), port),
			netip.AddrPortFrom(netip.MustParseAddr(fmt.Sprintf("2001:db8::%x", i)), port))
	}
	for round := range 40 {
		model := watchModel{}
		var entries []bpf.WatchEntry
		slots := rng.Perm(maxTargets)
		keep := rng.Float64()
		for _, ap := range universe {
			// Some rounds leave a family empty.
			if rng.Float64() > keep || round%7 == 3 && ap.Addr().Is6() || round%11 == 5 && ap.Addr().Is4() {
				continue
			}
			e := bpf.WatchEntry{Addr: ap, Slot: uint32(slots[len(entries)]), Threshold: 1 + rng.IntN(255)}
			if ap.Addr().Is4() && rng.IntN(4) == 0 {
				e.Addr = netip.AddrPortFrom(netip.AddrFrom16(ap.Addr().As16()), ap.Port()) // mapped: the same target
			}
			entries = append(entries, e)
			model[ap] = e
		}
		if err := p.Watch(entries); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		model.check(t, l, universe)
		n4 := 0
		for ap := range model {
			if ap.Addr().Is4() {
				n4++
			}
		}
		c4, c6 := bpf.PassiveTableCells(p)
		if want4, want6 := cellsFor(n4), cellsFor(len(model)-n4); c4 != want4 || c6 != want6 {
			t.Errorf("round %d: %d and %d targets in tables of %d and %d cells, want %d and %d", round, n4, len(model)-n4, c4, c6, want4, want6)
		}
	}
}

// cellsFor returns the cells of the table for n targets: none for none,
// else a power of two of at least 2n and 16.
func cellsFor(n int) int {
	if n == 0 {
		return 0
	}
	c := 16
	for c < 2*n {
		c *= 2
	}
	return c
}

// TestPassiveTableGrows watches targets that all share one home cell in
// the table their number asks for, with every seed the same: no seed
// places them within the probe bound, so the table doubles, where they
// spread; all are found.
func TestPassiveTableGrows(t *testing.T) {
	testenv.RequirePrivileged(t, "CAP_BPF")
	const seed, n = 42, bpf.PassiveProbes + 1
	cells := cellsFor(n)
	var entries []bpf.WatchEntry
	model := watchModel{}
	var universe []netip.AddrPort
	for i := 0; len(entries) < n; i++ {
		ap := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 8080)
		if bpf.PassiveHome4(seed, ap)&uint64(cells-1) != 0 {
			continue
		}
		e := bpf.WatchEntry{Addr: ap, Slot: uint32(len(entries)), Threshold: 2}
		entries, model[ap] = append(entries, e), e
		universe = append(universe, ap, netip.AddrPortFrom(ap.Addr(), 8081))
	}
	p := openPassive(t, bpf.PassiveOptions{MaxTargets: 64})
	bpf.SetPassiveSeeds(p, func() uint64 { return seed })
	if err := p.Watch(entries); err != nil {
		t.Fatal(err)
	}
	if c4, _ := bpf.PassiveTableCells(p); c4 != 2*cells {
		t.Errorf("%d targets of one home in a table of %d cells, want %d", n, c4, 2*cells)
	}
	model.check(t, newLookup(t, p), universe)
}

// TestPassiveWatchMemory watches a million IPv4 targets and measures the
// memory the kernel charges to each map, and how long Watch takes. The
// IPv4 table has 2^21 cells of 16 B: 32 MiB, half the 64 MiB aimed at; the
// bound checked is that goal.
func TestPassiveWatchMemory(t *testing.T) {
	testenv.RequirePrivileged(t, "CAP_BPF, CAP_PERFMON")
	if testing.Short() {
		t.Skip("a million watch entries: not in -short")
	}
	const targets = 1_000_000
	p := openPassive(t, bpf.PassiveOptions{MaxTargets: targets})
	entries := make([]bpf.WatchEntry, targets)
	for i := range entries {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		entries[i] = bpf.WatchEntry{Addr: netip.AddrPortFrom(a, 443), Slot: uint32(i), Threshold: 3}
	}
	start := time.Now()
	if err := p.Watch(entries); err != nil {
		t.Fatal(err)
	}
	first := time.Since(start)
	start = time.Now()
	if err := p.Watch(entries); err != nil {
		t.Fatal(err)
	}
	again := time.Since(start)
	mem, err := bpf.PassiveMapMemory(p)
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, v := range mem {
		total += v
	}
	const mib = 1 << 20
	t.Logf("%d IPv4 targets: watch4 %.1f MiB (%.0f B/target), watch6 (empty) %.1f MiB, stats %.1f MiB, own %.1f MiB, events %.2f MiB, total %.1f MiB; Watch %v, unchanged again %v",
		targets, float64(mem["watch4"])/mib, float64(mem["watch4"])/targets, float64(mem["watch6"])/mib,
		float64(mem["stats"])/mib, float64(mem["own"])/mib, float64(mem["events"])/mib, float64(total)/mib, first, again)
	if mem["watch4"] > 64<<20 {
		t.Errorf("watch4 holds %d bytes for %d targets, want at most 64 MiB", mem["watch4"], targets)
	}
}

// BenchmarkPassiveConnect connects to a watched loopback listener while a
// million other IPv4 targets are watched, and reports the kernel's time in
// the state-change program per run (BPF run-time statistics).
func BenchmarkPassiveConnect(b *testing.B) {
	testenv.RequirePrivileged(b, "CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN for run-time statistics")
	p, err := bpf.OpenPassive(bpf.PassiveOptions{MaxTargets: 1 << 21, IncludeSelf: true})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	testenv.AcceptAndClose(ln)
	target := ln.Addr().(*net.TCPAddr).AddrPort()
	entries := []bpf.WatchEntry{{Addr: target, Slot: 0, Threshold: 3}}
	for i := 1; i <= 1_000_000; i++ {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		entries = append(entries, bpf.WatchEntry{Addr: netip.AddrPortFrom(a, 443), Slot: uint32(i), Threshold: 3})
	}
	if err := p.Watch(entries); err != nil {
		b.Fatal(err)
	}
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()
	runs0, t0, err := bpf.PassiveStateRuns(p)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		c, err := net.Dial("tcp", target.String())
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
	runs, t, err := bpf.PassiveStateRuns(p)
	if err != nil {
		b.Fatal(err)
	}
	if runs > runs0 {
		b.ReportMetric(float64(t-t0)/float64(runs-runs0), "ns/run")
		b.ReportMetric(float64(t-t0)/float64(b.N), "bpf-ns/connect")
	}
}
