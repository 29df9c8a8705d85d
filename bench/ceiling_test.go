package bench

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/sondeprobe/sonde/bench/netns"
	"github.com/sondeprobe/sonde/bench/testenv"
	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/syn"
)

func testCeiling(t *testing.T) *ceiling {
	t.Helper()
	cfg := CeilingConfig{Interface: "veth0", Source: netip.MustParseAddr("192.0.2.1"),
		NextHopMAC: net.HardwareAddr(testFleetMAC[:]), Prefix: netip.MustParsePrefix("198.18.0.0/16"), Port: 80}
	if err := cfg.check(); err != nil {
		t.Fatal(err)
	}
	c := &ceiling{cfg: cfg, ports: syn.PortRange{First: 61000, Last: 65535}, key: [2]uint64{1, 2}, n: 1 << 16,
		res: &CeilingResult{outcome: make([]uint8, 1<<16), prefix: cfg.Prefix, port: 80}}
	c.src = cfg.Source.As16()
	c.base = binary.BigEndian.Uint32(cfg.Prefix.Addr().AsSlice())
	c.buildTemplate(net.HardwareAddr(testProberMAC[:]))
	return c
}

// TestCeilingFrame decodes the ceiling's SYNs: sonde's headers and options,
// right checksums, and a sequence number that gives back the target.
func TestCeilingFrame(t *testing.T) {
	c := testCeiling(t)
	for _, i := range []uint32{0, 1, 4660, 65535} {
		b := make([]byte, len(c.frame))
		c.write(b, i)
		pkt := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
		eth, _ := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		tcp, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if eth == nil || ip == nil || tcp == nil {
			t.Fatalf("target %d: frame does not decode: %v", i, pkt)
		}
		dst := c.res.Target(int(i)).Addr()
		switch {
		case [6]byte(eth.DstMAC) != testFleetMAC || [6]byte(eth.SrcMAC) != testProberMAC:
			t.Errorf("target %d: MACs %v → %v", i, eth.SrcMAC, eth.DstMAC)
		case ip.TTL != 64 || ip.Flags != layers.IPv4DontFragment || ip.Length != 52 || ip.Id == 0:
			t.Errorf("target %d: IPv4 header %+v", i, ip)
		case ip.SrcIP.String() != "192.0.2.1" || ip.DstIP.String() != dst.String():
			t.Errorf("target %d: %v → %v, want → %v", i, ip.SrcIP, ip.DstIP, dst)
		case csum(b[14:34], 0) != 0:
			t.Errorf("target %d: IPv4 checksum wrong", i)
		case tcpCsum([4]byte(b[26:30]), [4]byte(b[30:34]), b[34:]) != 0:
			t.Errorf("target %d: TCP checksum wrong", i)
		case !tcp.SYN || tcp.ACK || tcp.RST || tcp.Window != 64240 || tcp.DstPort != 80 || uint16(tcp.SrcPort) != c.ports.Port(i, 1):
			t.Errorf("target %d: TCP header %+v", i, tcp)
		case len(tcp.Options) != 6 || tcp.Options[0].OptionType != layers.TCPOptionKindMSS || binary.BigEndian.Uint16(tcp.Options[0].OptionData) != 1460 ||
			tcp.Options[3].OptionType != layers.TCPOptionKindSACKPermitted || tcp.Options[5].OptionType != layers.TCPOptionKindWindowScale || tcp.Options[5].OptionData[0] != 7:
			t.Errorf("target %d: TCP options %v, want sonde's", i, tcp.Options)
		}
		d16 := dst.As16()
		d16[10], d16[11] = 0xff, 0xff
		if got := tcp.Seq ^ c.hash(&d16, uint16(tcp.SrcPort), 80); got != i {
			t.Errorf("target %d: the cookie gives back %d", i, got)
		}
	}
}

// TestCeilingHandle checks that the ceiling keeps valid replies once and
// counts the rest.
func TestCeilingHandle(t *testing.T) {
	c := testCeiling(t)
	reply := func(i uint32, kind bpf.Kind) *bpf.Event {
		a := c.res.Target(int(i)).Addr().As16()
		a[10], a[11] = 0xff, 0xff
		sport := c.ports.Port(i, 1)
		seq := i ^ c.hash(&a, sport, 80)
		ev := &bpf.Event{Remote: a, Local: c.src, RemotePort: 80, LocalPort: sport, Kind: uint8(kind), Ack: seq + 1}
		if kind == bpf.KindUnreachable {
			ev.Ack, ev.Seq = 0, seq
		}
		return ev
	}
	c.handle(reply(7, bpf.KindSynAck))
	c.handle(reply(7, bpf.KindSynAck)) // duplicate
	c.handle(reply(8, bpf.KindRST))
	c.handle(reply(9, bpf.KindUnreachable))
	forged := reply(10, bpf.KindSynAck)
	forged.Ack++
	c.handle(forged)
	wrongPort := reply(11, bpf.KindSynAck)
	wrongPort.LocalPort++
	c.handle(wrongPort)
	want := map[int]probe.Outcome{7: probe.Success, 8: probe.Refused, 9: probe.Unreachable, 10: probe.Timeout, 11: probe.Timeout}
	for i, o := range want {
		if got := c.res.Outcome(i); got != o {
			t.Errorf("target %d: %s, want %s", i, got, o)
		}
	}
	if c.duplicate.Load() != 1 || c.invalid.Load() != 2 || c.replies.Load() != 3 {
		t.Errorf("duplicates %d, invalid %d, replies %d; want 1, 2, 3", c.duplicate.Load(), c.invalid.Load(), c.replies.Load())
	}
}

// TestCeilingSweep sweeps a slice of an XDP fleet that holds every outcome
// with the ceiling and checks each answer against Truth.
func TestCeilingSweep(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, eBPF")
	cfg := benchFleetConfig(1)
	cfg.XDP = XDPGeneric
	f := testFleet(t, cfg)
	p := netip.MustParsePrefix("198.18.100.0/22") // dropped, rejected and unreachable blocks, scattered ones
	var res *CeilingResult
	err := netns.Do(f.ProberNS, func() error {
		var err error
		res, err = Ceiling(context.Background(), CeilingConfig{Interface: f.ProberLink, Source: f.ProberAddr,
			NextHopMAC: f.GatewayMAC, Prefix: p, Port: ScanPort, Senders: 2, Timeout: 500 * time.Millisecond})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Probes != 1024 || res.Invalid != 0 || res.Duplicate != 0 || res.RingDrops != 0 {
		t.Errorf("result %+v", res)
	}
	for i := range res.Probes {
		a := res.Target(i).Addr()
		if got, want := res.Outcome(i), Truth(a); got != want {
			t.Errorf("%s: %s, Truth says %s", a, got, want)
		}
	}
}
