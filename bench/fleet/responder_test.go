package fleet

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
)

// XDP verdicts (enum xdp_action).
const (
	xdpDrop = 1
	xdpPass = 2
	xdpTX   = 3
)

var (
	testProberMAC = [6]byte{0x02, 0, 0, 0, 0, 1}
	testFleetMAC  = [6]byte{0x02, 0, 0, 0, 0, 2}
	testProber    = netip.MustParseAddr("192.0.2.1")
)

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

// testFrame builds an Ethernet frame from the prober to dst:dport carrying a
// TCP segment with flags and sequence number seq, with sonde's SYN options.
func testFrame(dst netip.Addr, sport, dport uint16, flags uint8, seq uint32) []byte {
	b := make([]byte, 14+20+32)
	copy(b[0:6], testFleetMAC[:])
	copy(b[6:12], testProberMAC[:])
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], 52)
	binary.BigEndian.PutUint16(ip[4:], 0x1234)
	ip[6] = 0x40
	ip[8] = 64
	ip[9] = 6
	src, d := testProber.As4(), dst.As4()
	copy(ip[12:16], src[:])
	copy(ip[16:20], d[:])
	binary.BigEndian.PutUint16(ip[10:], csum(ip, 0))
	tcp := b[34:]
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], dport)
	binary.BigEndian.PutUint32(tcp[4:], seq)
	tcp[12] = 8 << 4
	tcp[13] = flags
	binary.BigEndian.PutUint16(tcp[14:], 64240)
	copy(tcp[20:], []byte{2, 4, 0x05, 0xb4, 1, 1, 4, 2, 1, 3, 3, 7})
	binary.BigEndian.PutUint16(tcp[16:], tcpCsum(src, d, tcp))
	return b
}

// answerOf checks the responder's answer to the SYN from sport with seq to
// dst:dport and returns the outcome it means for a prober.
func answerOf(verdict uint32, out []byte, dst netip.Addr, sport, dport uint16, seq uint32) (probe.Outcome, error) {
	switch verdict {
	case xdpDrop:
		return probe.Timeout, nil
	case xdpTX:
	default:
		return 0, fmt.Errorf("verdict %d", verdict)
	}
	if len(out) < 34 || [6]byte(out[0:6]) != testProberMAC || [6]byte(out[6:12]) != testFleetMAC || binary.BigEndian.Uint16(out[12:]) != 0x0800 {
		return 0, fmt.Errorf("frame not turned around: % x", out[:min(len(out), 14)])
	}
	ip := out[14:34]
	src, d := [4]byte(ip[12:16]), [4]byte(ip[16:20])
	switch {
	case ip[0] != 0x45 || int(binary.BigEndian.Uint16(ip[2:])) != len(out)-14:
		return 0, fmt.Errorf("IP header % x for a %d-byte frame", ip, len(out))
	case csum(ip, 0) != 0:
		return 0, fmt.Errorf("IP checksum wrong: % x", ip)
	case netip.AddrFrom4(src) != dst || netip.AddrFrom4(d) != testProber:
		return 0, fmt.Errorf("IP %v → %v, want %v → %v", netip.AddrFrom4(src), netip.AddrFrom4(d), dst, testProber)
	}
	switch ip[9] {
	case 6:
		tcp := out[34:]
		if len(tcp) != 20 || tcpCsum(src, d, tcp) != 0 {
			return 0, fmt.Errorf("TCP segment of %d bytes, checksum %#x", len(tcp), tcpCsum(src, d, tcp))
		}
		if binary.BigEndian.Uint16(tcp[0:]) != dport || binary.BigEndian.Uint16(tcp[2:]) != sport || binary.BigEndian.Uint32(tcp[8:]) != seq+1 {
			return 0, fmt.Errorf("TCP ports %d → %d, ack %d; want %d → %d, ack %d", binary.BigEndian.Uint16(tcp[0:]),
				binary.BigEndian.Uint16(tcp[2:]), binary.BigEndian.Uint32(tcp[8:]), dport, sport, seq+1)
		}
		switch tcp[13] {
		case 0x12:
			return probe.Success, nil
		case 0x14:
			return probe.Refused, nil
		}
		return 0, fmt.Errorf("TCP flags %#x", tcp[13])
	case 1:
		icmp := out[34:]
		if len(icmp) != 8+28 || icmp[0] != 3 || icmp[1] != 1 || csum(icmp, 0) != 0 {
			return 0, fmt.Errorf("ICMP % x", icmp)
		}
		quoted := icmp[8:]
		if netip.AddrFrom4([4]byte(quoted[16:20])) != dst || binary.BigEndian.Uint16(quoted[20:]) != sport ||
			binary.BigEndian.Uint16(quoted[22:]) != dport || binary.BigEndian.Uint32(quoted[24:]) != seq {
			return 0, fmt.Errorf("ICMP quotes % x", quoted)
		}
		return probe.Unreachable, nil
	}
	return 0, fmt.Errorf("IP protocol %d", ip[9])
}

// runResponder runs the responder's program on one frame.
func runResponder(t *testing.T, r *responder, frame []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, 256)
	opts := ebpf.RunOptions{Data: frame, DataOut: out}
	verdict, err := r.objs.AnswerSyns.Run(&opts)
	if err != nil {
		t.Fatalf("run responder: %v", err)
	}
	return verdict, opts.DataOut
}

// truthConfig is a fleet with every outcome, laid out as the bench fleet: a
// /15 whose first /16 holds blocks of dropped, rejected and unreachable
// addresses, and dropped and rejected addresses scattered over the rest of
// it; the second /16 is clean. Ports 80 and 9001 listen, 8080 serves HTTP.
func truthConfig() Config {
	cfg := Config{
		Prefix:      netip.MustParsePrefix("198.18.0.0/15"),
		Listen:      []uint16{80, 9001},
		HTTP:        []uint16{8080},
		Drop:        []netip.Prefix{netip.MustParsePrefix("198.18.100.0/24")},
		Reject:      []netip.Prefix{netip.MustParsePrefix("198.18.101.0/24")},
		Unreachable: []netip.Prefix{netip.MustParsePrefix("198.18.102.0/28")},
	}
	for i := range 1 << 16 {
		a := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		switch {
		case i%251 == 7:
			cfg.Drop = append(cfg.Drop, netip.PrefixFrom(a, 32))
		case i%241 == 9:
			cfg.Reject = append(cfg.Reject, netip.PrefixFrom(a, 32))
		}
	}
	return cfg
}

// TestResponderTruth runs the XDP responder on a SYN to every address of a
// fleet with every outcome and checks its answer against [Config.Outcome],
// address by address: the XDP fleet and the kernel fleet have one ground
// truth.
func TestResponderTruth(t *testing.T) {
	testenv.RequirePrivileged(t, "eBPF")
	cfg := truthConfig()
	r, err := loadResponderFor(cfg.Prefix, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.close() })
	counts := map[probe.Outcome]int{}
	for i := range 1 << 17 {
		a := netip.AddrFrom4([4]byte{198, 18 + byte(i>>16), byte(i >> 8), byte(i)})
		seq := uint32(i)*2654435761 + 7
		sport := uint16(61000 + i%4000)
		ports := []uint16{80}
		if i%97 == 0 || cfg.Outcome(a, 80) != probe.Success {
			ports = append(ports, 81, 9001, 8080) // closed, open, open
		}
		for _, port := range ports {
			v, out := runResponder(t, r, testFrame(a, sport, port, 0x02, seq))
			got, err := answerOf(v, out, a, sport, port, seq)
			if err != nil {
				t.Fatalf("SYN to %s:%d: %v", a, port, err)
			}
			if want := cfg.Outcome(a, port); got != want {
				t.Fatalf("SYN to %s:%d answered %s, want %s", a, port, got, want)
			}
			counts[got]++
		}
	}
	for _, o := range []probe.Outcome{probe.Success, probe.Refused, probe.Timeout, probe.Unreachable} {
		if counts[o] == 0 {
			t.Errorf("no address answered %s: %v", o, counts)
		}
	}
	c, err := r.counters()
	if err != nil {
		t.Fatal(err)
	}
	if sum := c.SynAck + c.RST + c.Unreachable + c.Dropped; sum != uint64(counts[probe.Success]+counts[probe.Refused]+counts[probe.Unreachable]+counts[probe.Timeout]) {
		t.Errorf("counters %+v do not add up to %v", c, counts)
	}
}

// TestResponderOthers checks what the responder leaves alone or drops, and
// its dynamic drop set.
func TestResponderOthers(t *testing.T) {
	testenv.RequirePrivileged(t, "eBPF")
	cfg := truthConfig()
	r, err := loadResponderFor(cfg.Prefix, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.close() })
	clean := netip.MustParseAddr("198.19.0.5")
	arp := testFrame(clean, 61000, 80, 0x02, 1)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	udp := testFrame(clean, 61000, 80, 0x02, 1)
	udp[14+9] = 17
	tests := []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"the prober's RST", testFrame(clean, 61000, 80, 0x04, 1), xdpDrop},
		{"an ACK", testFrame(clean, 61000, 80, 0x10, 1), xdpDrop},
		{"a SYN-ACK", testFrame(clean, 61000, 80, 0x12, 1), xdpDrop},
		{"a SYN outside the fleet", testFrame(netip.MustParseAddr("192.0.2.2"), 61000, 80, 0x02, 1), xdpPass},
		{"ARP", arp, xdpPass},
		{"UDP", udp, xdpPass},
		{"a SYN", testFrame(clean, 61000, 80, 0x02, 1), xdpTX},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if v, _ := runResponder(t, r, tt.frame); v != tt.want {
				t.Errorf("verdict %d, want %d", v, tt.want)
			}
		})
	}
	if err := r.setDynDrop([]netip.Prefix{netip.MustParsePrefix("198.19.0.0/24")}); err != nil {
		t.Fatal(err)
	}
	if v, _ := runResponder(t, r, testFrame(clean, 61000, 80, 0x02, 1)); v != xdpDrop {
		t.Errorf("SYN to a dynamically dropped address: verdict %d, want drop", v)
	}
	if v, _ := runResponder(t, r, testFrame(netip.MustParseAddr("198.19.1.5"), 61000, 80, 0x02, 1)); v != xdpTX {
		t.Errorf("SYN next to the dropped prefix: verdict %d, want an answer", v)
	}
	if err := r.setDynDrop(nil); err != nil {
		t.Fatal(err)
	}
	if v, _ := runResponder(t, r, testFrame(clean, 61000, 80, 0x02, 1)); v != xdpTX {
		t.Errorf("SYN after the drop ended: verdict %d, want an answer", v)
	}
}
