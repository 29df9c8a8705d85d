package syn_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/netns"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/syn"
	"github.com/sondeprobe/sonde/scheduler"
)

// dropFirstSYN makes namespace ns drop the first SYN to port, and only
// that one, with a counter; it returns a function reading the counter's
// packets.
func dropFirstSYN(t *testing.T, ns string, port uint16) func() int {
	t.Helper()
	testenv.Tool(t, "nft", "nftables")
	rule := fmt.Sprintf("add table inet firstsyn; add chain inet firstsyn in { type filter hook input priority 0; }; "+
		"add rule inet firstsyn in tcp dport %d tcp flags & (syn|ack) == syn numgen inc mod 1000000000 == 0 counter drop", port)
	if out, err := netns.Command(ns, "nft", rule).CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	packets := regexp.MustCompile(`counter packets (\d+)`)
	return func() int {
		out, err := netns.Command(ns, "nft", "list", "chain", "inet", "firstsyn", "in").CombinedOutput()
		if err != nil {
			t.Fatalf("nft list: %v: %s", err, out)
		}
		m := packets.FindSubmatch(out)
		if m == nil {
			t.Fatalf("no counter in %s", out)
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
}

// listen starts a listener on port in namespace ns for the test's length.
func listen(t *testing.T, ns string, port uint16) {
	t.Helper()
	err := netns.Do(ns, func() error {
		ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			return err
		}
		t.Cleanup(func() { ln.Close() })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A one-shot SYN probe whose first SYN is dropped succeeds on the
// retransmission, with its latency from the first send; without
// retransmission it times out.
func TestOneShotRetransmitsLostSYN(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, BPF, nftables")
	for _, cp := range capturePaths {
		t.Run(cp.name, func(t *testing.T) {
			ns := testenv.LoopbackNamespace(t)
			const port = 9101
			listen(t, ns, port)
			dropped := dropFirstSYN(t, ns, port)
			ep := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
			var o *syn.OneShot
			err := netns.Do(ns, func() error {
				var err error
				o, err = syn.NewOneShot([]netip.AddrPort{ep}, syn.Config{Path: cp.path, Attach: cp.att, Interface: "lo"})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			const rto = 200 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			rep := o.Retransmitting(rto).Report(ctx, probe.Target{Addr: ep.Addr(), Port: ep.Port()})
			if rep.Outcome != probe.Success || rep.Retransmits != 1 {
				t.Fatalf("report %+v (%v): want success after 1 retransmission", rep.Result, rep.Err)
			}
			if rep.Latency < rto || rep.Latency > rto+500*time.Millisecond {
				t.Errorf("latency %v: want from the first send, just over %v", rep.Latency, rto)
			}
			if n := dropped(); n != 1 {
				t.Errorf("the rule dropped %d SYNs, want 1", n)
			}
			// The rule drops the first SYN only: a second probe needs none.
			rep = o.Retransmitting(rto).Report(ctx, probe.Target{Addr: ep.Addr(), Port: ep.Port()})
			if rep.Outcome != probe.Success || rep.Retransmits != 0 {
				t.Errorf("second probe %+v: want success without retransmission", rep.Result)
			}
		})
	}
}

// changes is what an engine's observer saw.
type changes struct {
	transitions []scheduler.Event
	results     map[probe.Outcome]int
	causes      map[probe.LocalCause]int
	retransmits int
}

func (c *changes) Result(_ uint32, r probe.Result) {
	c.results[r.Outcome]++
	if r.Outcome == probe.LocalError {
		c.causes[r.Cause]++
	}
	c.retransmits += int(r.Retransmits)
}
func (c *changes) Transition(e scheduler.Event) { c.transitions = append(c.transitions, e) }

// runEngine runs one check over every endpoint of tab on the SYN prober
// that newProber opens (with the engine as its sink), for d; it returns
// what it saw, read after the engine stopped.
func runEngine(t *testing.T, tab *probe.Table, c scheduler.Check, d time.Duration, newProber func(sink probe.Sink) (*syn.Prober, error)) (*changes, *syn.Prober) {
	t.Helper()
	seen := &changes{results: map[probe.Outcome]int{}, causes: map[probe.LocalCause]int{}}
	sink := &engineSink{}
	p, err := newProber(sink)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c.Launcher = p
	targets := make([]scheduler.TargetSpec, tab.Len())
	for i := range targets {
		targets[i] = scheduler.TargetSpec{Leader: uint32(i)}
	}
	eng, err := scheduler.New([]scheduler.Check{c}, targets, scheduler.Options{Shards: 1, Observer: seen})
	if err != nil {
		t.Fatal(err)
	}
	sink.eng.Store(eng)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	eng.Run(ctx)
	return seen, p
}

// The daemon's path: the scheduler retransmits a SYN the network dropped,
// and the probe succeeds; nothing times out.
func TestEngineRetransmitsLostSYN(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, BPF, nftables")
	ns := testenv.LoopbackNamespace(t)
	const port = 9102
	listen(t, ns, port)
	dropped := dropFirstSYN(t, ns, port)
	tab := probe.NewTable(1)
	tab.Add(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port))
	c := scheduler.Check{
		Timing:     scheduler.Timing{Interval: 2 * time.Second, Timeout: time.Second, Rise: 1, Fall: 1, Initial: scheduler.Healthy},
		Retransmit: 300 * time.Millisecond,
	}
	seen, p := runEngine(t, tab, c, 1500*time.Millisecond, func(sink probe.Sink) (*syn.Prober, error) {
		var p *syn.Prober
		err := netns.Do(ns, func() error {
			var err error
			p, err = syn.New(syn.Config{Table: tab, Sink: sink, Interface: "lo"})
			return err
		})
		return p, err
	})
	if seen.results[probe.Success] != 1 || seen.retransmits != 1 || len(seen.transitions) != 0 {
		t.Errorf("results %v, retransmits %d, transitions %+v: want one success after one retransmission, no state change",
			seen.results, seen.retransmits, seen.transitions)
	}
	if c := p.Counters(); c.Retransmits != 1 || c.Sent != 2 {
		t.Errorf("prober sent %d SYNs, %d of them again; want 2 and 1", c.Sent, c.Retransmits)
	}
	if n := dropped(); n != 1 {
		t.Errorf("the rule dropped %d SYNs, want 1", n)
	}
}

// A capture ring far too small for the replies that flood it loses some:
// the probes that lost them are local errors, and no healthy target is
// declared unhealthy, even with fall 1.
func TestTinyRingBlamesNoTarget(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, BPF")
	ns := testenv.LoopbackNamespace(t)
	const port = 9103
	listen(t, ns, port)
	const n = 4096
	tab := probe.NewTable(n)
	for i := range n {
		tab.Add(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)}), port))
	}
	c := scheduler.Check{
		Timing:     scheduler.Timing{Interval: 500 * time.Millisecond, Timeout: 500 * time.Millisecond, Rise: 1, Fall: 1, Initial: scheduler.Healthy},
		Retransmit: 0, // each probe's one answer is at stake
	}
	seen, p := runEngine(t, tab, c, 3*time.Second, func(sink probe.Sink) (*syn.Prober, error) {
		var p *syn.Prober
		err := netns.Do(ns, func() error {
			var err error
			// One page of ring (about 64 replies) drained every 100 ms: a
			// round of 4,096 answers overflows it.
			p, err = syn.New(syn.Config{Table: tab, Sink: sink, Interface: "lo", Path: probe.PathSynBPF, RingBytes: 4096, PollInterval: 100 * time.Millisecond})
			return err
		})
		return p, err
	})
	cnt := p.Counters()
	if cnt.RingDrops == 0 {
		t.Fatalf("the ring lost no reply (counters %+v): the test floods nothing", cnt)
	}
	if len(seen.transitions) != 0 {
		t.Errorf("%d state changes, first %+v: replies this host lost made healthy targets unhealthy", len(seen.transitions), seen.transitions[0])
	}
	if seen.results[probe.Timeout] != 0 {
		t.Errorf("%d timeouts: every unanswered probe lost its reply to the ring", seen.results[probe.Timeout])
	}
	if seen.causes[probe.CauseCapture] == 0 {
		t.Errorf("no local error (capture) among results %v", seen.results)
	}
	t.Logf("ring drops %d; results %v; local errors %v", cnt.RingDrops, seen.results, seen.causes)
}

// engineSink delivers to the engine once it exists.
type engineSink struct {
	eng atomic.Pointer[scheduler.Engine]
}

func (s *engineSink) Deliver(r probe.Result) {
	if e := s.eng.Load(); e != nil {
		e.Deliver(r)
	}
}
