package syn

import (
	"bytes"
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/probe"
)

var (
	src4 = netip.MustParseAddr("192.0.2.1")
	src6 = netip.MustParseAddr("2001:db8:ffff::1")
)

// decodeSYN decodes a packet built by a template with gopacket, checks that
// re-serializing it with gopacket's own checksums gives the same bytes (so our
// incremental checksums are right), and returns its layers.
func decodeSYN(t *testing.T, pkt []byte, v6 bool) (gopacket.NetworkLayer, *layers.TCP) {
	t.Helper()
	first := layers.LayerTypeIPv4
	if v6 {
		first = layers.LayerTypeIPv6
	}
	p := gopacket.NewPacket(pkt, first, gopacket.Default)
	if el := p.ErrorLayer(); el != nil {
		t.Fatalf("decode: %v", el.Error())
	}
	tcp, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if !ok {
		t.Fatal("no TCP layer")
	}
	net := p.NetworkLayer()
	if err := tcp.SetNetworkLayerForChecksum(net); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	tcp.Payload = nil
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true},
		net.(gopacket.SerializableLayer), tcp); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), pkt) {
		t.Fatalf("gopacket's checksums differ:\n got  %x\n want %x", pkt, buf.Bytes())
	}
	return net, tcp
}

func TestTemplateWrite(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  netip.Addr
		dst  netip.Addr
	}{
		{"ipv4", src4, netip.MustParseAddr("198.18.255.254")},
		{"ipv4 zero words", src4, netip.MustParseAddr("198.18.0.0")},
		{"ipv6", src6, netip.MustParseAddr("2001:db8:5eed::ffff")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := newTemplate(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			dst := tt.dst.As16()
			for _, c := range []struct {
				sport, dport uint16
				seq          uint32
			}{{61000, 80, 0}, {65535, 65535, 0xffffffff}, {62000, 1, 0x12345678}, {61234, 443, 0x8000ffff}} {
				b := make([]byte, maxPktLen)
				n := tmpl.write(b, &dst, c.sport, c.dport, c.seq)
				if n != tmpl.size() {
					t.Fatalf("write returned %d, want %d", n, tmpl.size())
				}
				nl, tcp := decodeSYN(t, b[:n], tt.src.Is6())
				if got := nl.NetworkFlow().Dst().String(); got != tt.dst.String() {
					t.Errorf("dst = %s, want %s", got, tt.dst)
				}
				if got := nl.NetworkFlow().Src().String(); got != tt.src.String() {
					t.Errorf("src = %s, want %s", got, tt.src)
				}
				if uint16(tcp.SrcPort) != c.sport || uint16(tcp.DstPort) != c.dport || tcp.Seq != c.seq {
					t.Errorf("ports/seq = %d %d %#x, want %d %d %#x", tcp.SrcPort, tcp.DstPort, tcp.Seq, c.sport, c.dport, c.seq)
				}
				if !tcp.SYN || tcp.ACK || tcp.RST || tcp.Window != synWindow || len(tcp.Options) != 6 {
					t.Errorf("flags/window/options wrong: %+v", tcp)
				}
				if ip4, ok := nl.(*layers.IPv4); ok && (ip4.TTL != probeTTL || ip4.Id == 0 || ip4.Flags != layers.IPv4DontFragment) {
					t.Errorf("IPv4 header fields wrong: %+v", ip4)
				}
			}
		})
	}
}

func TestCookie(t *testing.T) {
	t.Parallel()
	k := newCookieKey()
	a, b := src4.As16(), netip.MustParseAddr("198.18.1.2").As16()
	for _, id := range []uint32{0, 1, 65535, 1 << 31, 0xffffffff} {
		seq := k.seq(id, &a, &b, 61000, 80)
		if got := k.id(seq, &a, &b, 61000, 80); got != id {
			t.Errorf("round trip of id %d gave %d", id, got)
		}
		other := newCookieKey()
		c := netip.MustParseAddr("198.18.1.3").As16()
		for name, got := range map[string]uint32{
			"key":   other.id(seq, &a, &b, 61000, 80),
			"addr":  k.id(seq, &a, &c, 61000, 80),
			"sport": k.id(seq, &a, &b, 61001, 80),
			"dport": k.id(seq, &a, &b, 61000, 81),
		} {
			if got == id {
				t.Errorf("id %d recovered with a different %s", id, name)
			}
		}
	}
}

func TestPortRange(t *testing.T) {
	t.Parallel()
	r := PortRange{61000, 65535}
	for id := uint32(0); id < 1000; id++ {
		for gen := uint32(0); gen < 10; gen++ {
			p := r.Port(id, gen)
			if p < r.First || p > r.Last {
				t.Fatalf("Port(%d,%d) = %d outside %s", id, gen, p, r)
			}
			if gen > 0 && p == r.Port(id, gen-1) {
				t.Fatalf("Port(%d,%d) repeats the previous generation's port", id, gen)
			}
		}
	}
	one := PortRange{62000, 62000}
	if one.Port(5, 7) != 62000 {
		t.Error("a one-port range must always give that port")
	}
}

// memWriter is a batchWriter that keeps copies of the packets it is given.
type memWriter struct {
	mu    sync.Mutex
	pkts  [][]byte
	calls int
	keep  bool
	fail  error // returned for the first packet, once, or failN times
	failN int
}

func (w *memWriter) writeBatch(pkts [][]byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail != nil {
		err := w.fail
		if w.failN--; w.failN <= 0 {
			w.fail, w.failN = nil, 0
		}
		return 0, err
	}
	w.calls++
	if w.keep {
		for _, p := range pkts {
			w.pkts = append(w.pkts, append([]byte(nil), p...))
		}
	}
	return len(pkts), nil
}

func (w *memWriter) close() error { return nil }

func (w *memWriter) frameHeader() []byte { return nil }

// testProber returns a prober with in-memory writers, no capture, and a clock
// that returns fixed times.
func testProber(t testing.TB, sink probe.Sink, lanes int, targets ...netip.AddrPort) (*Prober, [][2]*memWriter) {
	t.Helper()
	tab := probe.NewTable(len(targets))
	for _, ap := range targets {
		tab.Add(ap)
	}
	cfg := Config{Table: tab, Sink: sink, Lanes: lanes, Ports: PortRange{61000, 65535}, Source4: src4, Source6: src6}
	p, err := newProber(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.setSources(cfg); err != nil {
		t.Fatal(err)
	}
	var ws [][2]*memWriter
	for _, l := range p.lanes {
		w := [2]*memWriter{{keep: true}, {keep: true}}
		l.setWriter(0, w[0])
		l.setWriter(1, w[1])
		ws = append(ws, w)
	}
	p.now = func() int64 { return 1_000_000 }
	return p, ws
}

// answer crafts the reply a target would send to syn with gopacket: a SYN-ACK
// or RST-ACK from the target, or an ICMP(v6) destination unreachable from a
// router quoting the probe. ackDelta is added to the acknowledgment number
// (0 for a correct reply).
func answer(t testing.TB, syn []byte, kind bpf.Kind, ackDelta uint32) []byte {
	t.Helper()
	v6 := syn[0]>>4 == 6
	first := layers.LayerTypeIPv4
	if v6 {
		first = layers.LayerTypeIPv6
	}
	p := gopacket.NewPacket(syn, first, gopacket.Default)
	probeTCP := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	router4 := net.IP{198, 18, 250, 1}
	router6 := net.ParseIP("2001:db8:ffff::fe")
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}
	var err error
	switch kind {
	case bpf.KindSynAck, bpf.KindRST:
		tcp := &layers.TCP{SrcPort: probeTCP.DstPort, DstPort: probeTCP.SrcPort, Ack: probeTCP.Seq + 1 + ackDelta, Seq: 777, ACK: true, Window: 1000}
		if kind == bpf.KindSynAck {
			tcp.SYN = true
		} else {
			tcp.RST = true
		}
		if v6 {
			in := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
			ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP, SrcIP: in.DstIP, DstIP: in.SrcIP}
			_ = tcp.SetNetworkLayerForChecksum(ip)
			err = gopacket.SerializeLayers(buf, opts, ip, tcp)
		} else {
			in := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: in.DstIP, DstIP: in.SrcIP}
			_ = tcp.SetNetworkLayerForChecksum(ip)
			err = gopacket.SerializeLayers(buf, opts, ip, tcp)
		}
	case bpf.KindUnreachable:
		quoted := syn
		if ackDelta != 0 { // corrupt the quoted sequence number
			quoted = append([]byte(nil), syn...)
			quoted[len(quoted)-tcpHdrLen+7] ^= byte(ackDelta)
		}
		if v6 {
			in := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
			ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolICMPv6, SrcIP: router6, DstIP: in.SrcIP}
			icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeDestinationUnreachable, 3)}
			_ = icmp.SetNetworkLayerForChecksum(ip)
			err = gopacket.SerializeLayers(buf, opts, ip, icmp, gopacket.Payload(append(make([]byte, 4), quoted...)))
		} else {
			in := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: router4, DstIP: in.SrcIP}
			icmp := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodeHost)}
			// Quote the IP header and the first 8 bytes of TCP, as RFC 792 asks.
			err = gopacket.SerializeLayers(buf, opts, ip, icmp, gopacket.Payload(quoted[:ip4HdrLen+8]))
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}
