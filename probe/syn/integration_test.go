package syn_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/bench/fleet"
	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/internal/netns"
	"github.com/sondeprobe/sonde/internal/probetest"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/syn"
)

// capturePaths are the ways replies can be caught: eBPF attached either
// way, and AF_PACKET.
var capturePaths = []struct {
	name string
	path probe.TCPPath
	att  bpf.Attach
}{
	{"syn-bpf/tcx", probe.PathSynBPF, bpf.AttachTCX},
	{"syn-bpf/tc", probe.PathSynBPF, bpf.AttachTC},
	{"syn-packet", probe.PathSynPacket, bpf.AttachAuto},
}

// TestLoopback is integration test (a): in a namespace with only lo, targets
// with a listener are success and the others refused, over IPv4 and IPv6, on
// every capture path.
func TestLoopback(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, BPF")
	for _, cp := range capturePaths {
		t.Run(cp.name, func(t *testing.T) {
			if cp.att == bpf.AttachTCX && !testenv.KernelAtLeast(t, 6, 6) {
				t.Skip("TCX needs kernel 6.6")
			}
			ns := testenv.LoopbackNamespace(t)
			open := []uint16{9001, 9002}
			tab := probe.NewTable(8)
			want := map[uint32]probe.Outcome{}
			for _, a := range []string{"127.0.0.1", "::1"} {
				for port := uint16(9001); port <= 9004; port++ {
					id := tab.Add(netip.AddrPortFrom(netip.MustParseAddr(a), port))
					want[id] = probe.Refused
					if port <= 9002 {
						want[id] = probe.Success
					}
				}
			}
			s := &probetest.Sink{}
			var p *syn.Prober
			err := netns.Do(ns, func() error {
				for _, port := range open {
					ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
					if err != nil {
						return err
					}
					t.Cleanup(func() { ln.Close() })
				}
				var err error
				p, err = syn.New(syn.Config{Table: tab, Sink: s, Path: cp.path, Attach: cp.att, Interface: "lo"})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := p.Close(); err != nil {
					t.Error(err)
				}
			}()
			if p.Path() != cp.path || p.Attachment() != cp.att {
				t.Fatalf("path %s (attach %s), want %s (attach %s)", p.Path(), p.Attachment(), cp.path, cp.att)
			}
			reqs := make([]probe.Request, tab.Len())
			for i := range reqs {
				reqs[i] = probe.Request{ID: uint32(i), Gen: 1}
			}
			p.Launch(0, reqs)
			testenv.Eventually(t, fmt.Sprintf("%d results", tab.Len()), func() (int, bool) { n := s.Count(); return n, n >= tab.Len() })
			got := map[uint32]probe.Outcome{}
			for id, r := range s.ByID() {
				got[id] = r.Outcome
				if r.Latency <= 0 || r.Latency > time.Second || r.Gen != 1 {
					t.Errorf("%v: latency %v gen %d", tab.Endpoint(id), r.Latency, r.Gen)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("outcomes by id (-want +got):\n%s", diff)
			}
			c := p.Counters()
			if c.Sent != uint64(tab.Len()) || c.SendErrors != 0 || c.InvalidCookie != 0 || c.RingDrops != 0 || c.SynAck != 4 || c.RST != 4 {
				t.Errorf("counters = %+v", c)
			}
		})
	}
}

// TestForgedReplies is integration test (c): SYN-ACKs, RSTs and ICMP errors
// crafted with gopacket on the fleet side, with cookies that are not ours, are
// counted as invalid and never delivered, while real probes still work.
func TestForgedReplies(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, BPF")
	f, err := fleet.New(fleet.Config{Listen: []uint16{80}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	tab := probe.NewTable(4)
	for i := range 4 {
		tab.Add(netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 7, byte(i + 1)}), 80))
	}
	s := &probetest.Sink{}
	var p *syn.Prober
	if err := netns.Do(f.ProberNS, func() error {
		var err error
		p, err = syn.New(syn.Config{Table: tab, Sink: s})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ports := p.Ports()

	// Forge replies from the fleet side towards the prober's port range.
	const forged = 300
	err = netns.Do(f.FleetNS, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for i := range forged {
			pkt := forge(t, i, f.ProberAddr, ports)
			sa := &unix.SockaddrInet4{Addr: f.ProberAddr.As4()}
			if err := unix.Sendto(fd, pkt, 0, sa); err != nil {
				return fmt.Errorf("send forged reply %d: %w", i, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, fmt.Sprintf("%d invalid cookies counted", forged), func() (uint64, bool) { n := p.Counters().InvalidCookie; return n, n >= forged })
	if n := s.Count(); n != 0 {
		t.Fatalf("%d forged replies were delivered", n)
	}
	// Real probes still get through.
	p.Launch(0, []probe.Request{{ID: 0, Gen: 1}, {ID: 1, Gen: 1}, {ID: 2, Gen: 1}, {ID: 3, Gen: 1}})
	testenv.Eventually(t, "the 4 real probes answered", func() (int, bool) { n := s.Count(); return n, n == 4 })
	c := p.Counters()
	if c.InvalidCookie != forged || c.SynAck != 4 || c.Stale != 0 || c.Duplicate != 0 {
		t.Errorf("counters = %+v", c)
	}
}

// forge builds forged reply i: a SYN-ACK, an RST-ACK or an ICMP unreachable
// quoting a SYN the prober never sent, from a fleet address to the prober.
func forge(t *testing.T, i int, prober netip.Addr, ports syn.PortRange) []byte {
	t.Helper()
	from := net.IP{198, 18, 7, byte(1 + i%4)}
	port := ports.First + uint16(i%ports.Len())
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}
	var err error
	switch i % 3 {
	case 0, 1:
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: from, DstIP: prober.AsSlice()}
		tcp := &layers.TCP{SrcPort: 80, DstPort: layers.TCPPort(port), Seq: 1, Ack: uint32(i)*2654435761 + 12345, ACK: true, SYN: i%3 == 0, RST: i%3 == 1, Window: 100}
		_ = tcp.SetNetworkLayerForChecksum(ip)
		err = gopacket.SerializeLayers(buf, opts, ip, tcp)
	case 2:
		quoted := gopacket.NewSerializeBuffer()
		qip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: prober.AsSlice(), DstIP: from}
		qtcp := &layers.TCP{SrcPort: layers.TCPPort(port), DstPort: 80, Seq: uint32(i) * 40503, SYN: true}
		_ = qtcp.SetNetworkLayerForChecksum(qip)
		if err := gopacket.SerializeLayers(quoted, opts, qip, qtcp); err != nil {
			t.Fatal(err)
		}
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: from, DstIP: prober.AsSlice()}
		icmp := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodePort)}
		err = gopacket.SerializeLayers(buf, opts, ip, icmp, gopacket.Payload(quoted.Bytes()[:28]))
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// noNetRawEnv tells a copy of the test binary that setpriv took CAP_NET_RAW
// from it (see TestNoRawSocket).
const noNetRawEnv = "SONDE_TEST_NO_NET_RAW"

// TestNoRawSocket checks the sentinel error without CAP_NET_RAW. Without
// root it runs as it is; as root it runs again in a copy of the test binary
// whose bounding set lacks CAP_NET_RAW (setpriv), so a root run checks it
// too.
func TestNoRawSocket(t *testing.T) {
	if os.Geteuid() == 0 && os.Getenv(noNetRawEnv) != "1" {
		setpriv := testenv.Tool(t, "setpriv", "util-linux")
		cmd := exec.Command(setpriv, "--bounding-set=-net_raw", "--inh-caps=-net_raw",
			os.Args[0], "-test.run=^TestNoRawSocket$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), noNetRawEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestNoRawSocket") {
			t.Fatalf("TestNoRawSocket without CAP_NET_RAW: %v\n%s", err, out)
		}
		return
	}
	tab := probe.NewTable(1)
	tab.Add(netip.MustParseAddrPort("127.0.0.1:1"))
	_, err := syn.New(syn.Config{Table: tab, Sink: &probetest.Sink{}})
	if !errors.Is(err, syn.ErrNoRawSocket) {
		t.Errorf("err = %v, want ErrNoRawSocket", err)
	}
}

// TestFleetPaths sweeps 1,024 fleet addresses with known outcomes through every
// combination of sender (raw IP socket, AF_PACKET frames) and capture path,
// over IPv4 and IPv6.
func TestFleetPaths(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, BPF")
	cfg := fleet.Config{Prefix6: fleet.DefaultPrefix6, Listen: []uint16{80}}
	tab := probe.NewTable(1100)
	want := map[uint32]probe.Outcome{}
	add := func(a netip.Addr, i int) {
		id := tab.Add(netip.AddrPortFrom(a, 80))
		p := netip.PrefixFrom(a, a.BitLen())
		switch i % 10 {
		case 3:
			cfg.Drop = append(cfg.Drop, p) // no result: the scheduler times it out
		case 4:
			cfg.Reject, want[id] = append(cfg.Reject, p), probe.Refused
		case 5:
			cfg.Unreachable, want[id] = append(cfg.Unreachable, p), probe.Unreachable
		default:
			want[id] = probe.Success
		}
	}
	for i := range 1024 {
		add(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), i)
	}
	for i := range 64 {
		b := fleet.DefaultPrefix6.Addr().As16()
		b[15] = byte(i)
		add(netip.AddrFrom16(b), i)
	}
	f, err := fleet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	gen := uint32(0)
	for _, sender := range []string{"ip-socket", "next-hop-mac"} {
		for _, cp := range capturePaths {
			t.Run(sender+"/"+cp.name, func(t *testing.T) {
				if cp.att == bpf.AttachTCX && !testenv.KernelAtLeast(t, 6, 6) {
					t.Skip("TCX needs kernel 6.6")
				}
				c := syn.Config{Table: tab, Lanes: 2, Path: cp.path, Attach: cp.att}
				if sender == "next-hop-mac" {
					c.NextHopMAC = f.GatewayMAC
				}
				s := &probetest.Sink{}
				c.Sink = s
				var p *syn.Prober
				if err := netns.Do(f.ProberNS, func() error {
					var err error
					p, err = syn.New(c)
					return err
				}); err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				gen++
				reqs := make([]probe.Request, tab.Len())
				for i := range reqs {
					reqs[i] = probe.Request{ID: uint32(i), Gen: gen}
				}
				var wg sync.WaitGroup
				for lane, part := range [][]probe.Request{reqs[:500], reqs[500:]} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						p.Launch(lane, part)
					}()
				}
				wg.Wait()
				testenv.Eventually(t, fmt.Sprintf("%d results", len(want)), func() (int, bool) { n := s.Count(); return n, n >= len(want) })
				// A pause, not a wait for a condition: results beyond these
				// would be a bug, and only time lets them show.
				time.Sleep(50 * time.Millisecond)
				got := map[uint32]probe.Outcome{}
				for id, r := range s.ByID() {
					got[id] = r.Outcome
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("outcomes (-want +got):\n%s", diff)
				}
				if c := p.Counters(); c.Sent != uint64(tab.Len()) || c.SendErrors+c.InvalidCookie+c.Stale+c.Duplicate+c.RingDrops != 0 {
					t.Errorf("counters = %+v", c)
				}
			})
		}
	}
}

// BenchmarkFleetSend sends real SYNs through the raw socket into a fleet (one
// lane, batches of 256) with the eBPF capture running, and reports the send
// rate. allocs/op is per batch of 256 probes.
func BenchmarkFleetSend(b *testing.B) {
	testenv.RequirePrivileged(b, "network namespaces, raw sockets, BPF")
	f, err := fleet.New(fleet.Config{Listen: []uint16{80}})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	const n = 1 << 16
	tab := probe.NewTable(n)
	for i := range n {
		tab.Add(netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 80))
	}
	var replies probetest.Counter
	var p *syn.Prober
	if err := netns.Do(f.ProberNS, func() error {
		var err error
		p, err = syn.New(syn.Config{Table: tab, Sink: &replies})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	reqs := make([]probe.Request, 256)
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		for j := range reqs {
			reqs[j] = probe.Request{ID: uint32((i + j) % n), Gen: uint32((i + j) / n)}
		}
		p.Launch(0, reqs)
		i += len(reqs)
	}
	b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "probes/s")
	// Answers still on their way count for answered/sent for up to 2 s.
	// This is a grace period, not a condition awaited: answers that never
	// come are what the figure measures, not a failure.
	for end := time.Now().Add(2 * time.Second); replies.Count() < int64(i) && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
	c := p.Counters()
	b.ReportMetric(float64(c.SynAck)/float64(i), "answered/sent")
}

// TestOneShot probes single endpoints on demand, as `sonde probe syn://`
// does: a listener answers success, a closed port refused, and a port whose
// SYNs are dropped times out at the caller's deadline.
func TestOneShot(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, BPF")
	ns := testenv.LoopbackNamespace(t)
	if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "add table inet sondetest; add chain inet sondetest in { type filter hook input priority 0; }; add rule inet sondetest in tcp dport 9007 drop").CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	eps := []netip.AddrPort{netip.AddrPortFrom(lo, 9005), netip.AddrPortFrom(lo, 9006), netip.AddrPortFrom(lo, 9007)}
	var o *syn.OneShot
	err := netns.Do(ns, func() error {
		ln, err := net.Listen("tcp", "127.0.0.1:9005")
		if err != nil {
			return err
		}
		t.Cleanup(func() { ln.Close() })
		o, err = syn.NewOneShot(eps, syn.Config{Interface: "lo"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	want := []probe.Outcome{probe.Success, probe.Refused, probe.Timeout}
	for i, ep := range eps {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		rep := o.Report(ctx, probe.Target{Addr: ep.Addr(), Port: ep.Port()})
		cancel()
		if rep.Outcome != want[i] {
			t.Errorf("%s: %v (%v), want %v", ep, rep.Outcome, rep.Err, want[i])
		}
		if want[i] != probe.Success && rep.Err == nil {
			t.Errorf("%s: %v without a reason", ep, rep.Outcome)
		}
	}
	rep := o.Report(context.Background(), probe.Target{Addr: lo, Port: 1})
	if rep.Outcome != probe.Error {
		t.Errorf("an endpoint not given to NewOneShot: %v, want error", rep.Outcome)
	}
}
