package syn

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// The SYN sonde sends looks like a Linux SYN without timestamps: window 64240
// and the options MSS 1460, NOP, NOP, SACK-permitted, NOP, window scale 7
// (12 bytes, a 32-byte TCP header). Timestamps are left out on purpose: a
// stateless prober has no clock to put in TSval, and a constant one would only
// fingerprint it. IPv4 packets carry DF and TTL 64, IPv6 packets hop limit 64.
const (
	synWindow  = 64240
	synMSS     = 1460
	tcpHdrLen  = 32
	ip4HdrLen  = 20
	ip6HdrLen  = 40
	maxPktLen  = ip6HdrLen + tcpHdrLen // 72 bytes, the largest probe
	probeTTL   = 64
	tcpFlagFIN = 0x01
	tcpFlagSYN = 0x02
	tcpFlagRST = 0x04
	tcpFlagACK = 0x10
)

// template is a SYN packet (IP header first) built once with gopacket for one
// source address, with the destination, ports, sequence number, IP id and
// checksums zero. write copies it and patches those fields; the checksums are
// the ones'-complement sums precomputed over the fixed bytes plus the patched
// words, so no per-packet pass over the whole header is needed.
type template struct {
	v6     bool
	pkt    []byte   // the zeroed packet
	src    [16]byte // source address, IPv4 as IPv4-mapped IPv6
	ipSum  uint32   // unfolded sum of the IPv4 header's fixed words
	tcpSum uint32   // unfolded sum of the pseudo-header's and TCP header's fixed words
}

// newTemplate builds the template for source address src.
func newTemplate(src netip.Addr) (*template, error) {
	tcp := &layers.TCP{
		SYN:    true,
		Window: synWindow,
		Options: []layers.TCPOption{
			{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{synMSS >> 8, synMSS & 0xff}},
			{OptionType: layers.TCPOptionKindNop},
			{OptionType: layers.TCPOptionKindNop},
			{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2},
			{OptionType: layers.TCPOptionKindNop},
			{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{7}},
		},
	}
	t := &template{src: src.As16()}
	var ip gopacket.SerializableLayer
	src = src.Unmap()
	switch {
	case src.Is4():
		ip = &layers.IPv4{
			Version: 4, IHL: 5, TTL: probeTTL, Flags: layers.IPv4DontFragment,
			Protocol: layers.IPProtocolTCP, SrcIP: net.IP(src.AsSlice()), DstIP: net.IPv4zero.To4(),
		}
	case src.Is6():
		t.v6 = true
		ip = &layers.IPv6{
			Version: 6, HopLimit: probeTTL, NextHeader: layers.IPProtocolTCP,
			SrcIP: net.IP(src.AsSlice()), DstIP: net.IPv6zero,
		}
	default:
		return nil, fmt.Errorf("bad source address %v", src)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, ip, tcp); err != nil {
		return nil, fmt.Errorf("build SYN template: %w", err)
	}
	t.pkt = append([]byte(nil), buf.Bytes()...)
	if len(t.pkt) != t.ipLen()+tcpHdrLen {
		return nil, fmt.Errorf("SYN template is %d bytes, want %d", len(t.pkt), t.ipLen()+tcpHdrLen)
	}
	hdr := t.pkt[t.ipLen():]
	if t.v6 {
		t.tcpSum = sum16(t.src[:]) + tcpHdrLen + 6
	} else {
		t.ipSum = sum16(t.pkt[:ip4HdrLen])
		t.tcpSum = sum16(t.src[12:]) + tcpHdrLen + 6
	}
	t.tcpSum += sum16(hdr)
	return t, nil
}

func (t *template) ipLen() int {
	if t.v6 {
		return ip6HdrLen
	}
	return ip4HdrLen
}

// size is the length of the packets write produces.
func (t *template) size() int { return len(t.pkt) }

// write writes the SYN to dst:dport from sport with sequence number seq into
// b, which must hold t.size() bytes, and returns that size.
func (t *template) write(b []byte, dst *[16]byte, sport, dport uint16, seq uint32) int {
	n := copy(b, t.pkt)
	var tcp []byte
	var s uint32
	if t.v6 {
		copy(b[24:40], dst[:])
		tcp = b[ip6HdrLen:n]
		s = t.tcpSum + sum16(dst[:])
	} else {
		copy(b[16:20], dst[12:16])
		ipid := uint16(seq>>16) | 1 // non-zero, so the kernel keeps it and our checksum
		binary.BigEndian.PutUint16(b[4:6], ipid)
		d := sum16(dst[12:16])
		binary.BigEndian.PutUint16(b[10:12], fold(t.ipSum+d+uint32(ipid)))
		tcp = b[ip4HdrLen:n]
		s = t.tcpSum + d
	}
	binary.BigEndian.PutUint16(tcp[0:2], sport)
	binary.BigEndian.PutUint16(tcp[2:4], dport)
	binary.BigEndian.PutUint32(tcp[4:8], seq)
	s += uint32(sport) + uint32(dport) + seq>>16 + seq&0xffff
	binary.BigEndian.PutUint16(tcp[16:18], fold(s))
	return n
}

// sum16 returns the unfolded sum of b's big-endian 16-bit words (b has an
// even length).
func sum16(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	return s
}

// fold folds an unfolded ones'-complement sum and complements it: the value
// that goes into a checksum field.
func fold(s uint32) uint16 {
	s = s&0xffff + s>>16
	s = s&0xffff + s>>16
	return ^uint16(s)
}
