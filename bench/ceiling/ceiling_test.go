package ceiling

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/syn"
)

var (
	testProberMAC = [6]byte{0x02, 0, 0, 0, 0, 1}
	testFleetMAC  = [6]byte{0x02, 0, 0, 0, 0, 2}
)

func testCeiling(t *testing.T) *ceiling {
	t.Helper()
	cfg := Config{Interface: "veth0", Source: netip.MustParseAddr("192.0.2.1"),
		NextHopMAC: net.HardwareAddr(testFleetMAC[:]), Prefix: netip.MustParsePrefix("198.18.0.0/16"), Port: 80}
	if err := cfg.check(); err != nil {
		t.Fatal(err)
	}
	c := &ceiling{cfg: cfg, ports: syn.PortRange{First: 61000, Last: 65535}, key: [2]uint64{1, 2}, n: 1 << 16,
		res: &Result{outcome: make([]uint8, 1<<16), prefix: cfg.Prefix, port: 80}}
	c.src = cfg.Source.As16()
	c.base = binary.BigEndian.Uint32(cfg.Prefix.Addr().AsSlice())
	c.buildTemplate(net.HardwareAddr(testProberMAC[:]))
	return c
}

// TestCeilingFrame decodes the ceiling's SYNs: sonde's headers and options,
// right checksums, and a sequence number that gives back the target.
func TestCeilingFrame(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// csum returns the ones'-complement sum of b folded to 16 bits, complemented:
// zero over a header whose checksum is right.
func csum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// tcpCsum is csum over a TCP segment with its IPv4 pseudo-header.
func tcpCsum(src, dst [4]byte, seg []byte) uint16 {
	var ph [12]byte
	copy(ph[0:4], src[:])
	copy(ph[4:8], dst[:])
	ph[9] = 6
	binary.BigEndian.PutUint16(ph[10:], uint16(len(seg)))
	var s uint32
	for i := 0; i < 12; i += 2 {
		s += uint32(binary.BigEndian.Uint16(ph[i:]))
	}
	return csum(seg, s)
}
