package syn

import (
	"encoding/binary"
	"errors"

	"github.com/sondeprobe/sonde/bpf"
)

// reply is a decoded answer to a probe, in the orientation of the probe:
// remote is the target, local is sonde. Addresses are 16 bytes with IPv4 as
// IPv4-mapped IPv6.
type reply struct {
	kind       bpf.Kind // SYN-ACK, RST or unreachable
	remote     [16]byte
	local      [16]byte
	remotePort uint16
	localPort  uint16
	seq        uint32 // the probe's sequence number, as acknowledged (ack-1) or quoted (ICMP)
	ktime      int64  // CLOCK_MONOTONIC nanoseconds when the reply arrived
}

// Errors of the reply decoders. Every packet that is not an answer to a TCP
// probe is one of them.
var (
	errTruncated = errors.New("truncated packet")
	errNotReply  = errors.New("not a reply to a SYN probe")
	errNoAck     = errors.New("RST without ACK carries no cookie")
	errBadEvent  = errors.New("malformed capture event")
)

var v4InV6Prefix = [12]byte{10: 0xff, 11: 0xff}

// decodeEvent turns a ring-buffer event of the capture program into a reply.
func decodeEvent(ev *bpf.Event, r *reply) error {
	r.kind = bpf.Kind(ev.Kind)
	r.remote, r.local = ev.Remote, ev.Local
	r.remotePort, r.localPort = ev.RemotePort, ev.LocalPort
	r.ktime = int64(ev.Ktime)
	if ev.Family != 4 && ev.Family != 6 || (ev.Family == 4) != ([12]byte(r.remote[:12]) == v4InV6Prefix) {
		return errBadEvent
	}
	switch r.kind {
	case bpf.KindSynAck, bpf.KindRST:
		if ev.TcpFlags&tcpFlagACK == 0 {
			return errNoAck
		}
		r.seq = ev.Ack - 1
	case bpf.KindUnreachable:
		r.seq = ev.Seq
	default:
		return errBadEvent
	}
	return nil
}

// decodePacket decodes a raw IPv4 or IPv6 packet (starting at the IP header,
// possibly cut short by the capture's snap length) into a reply: a TCP SYN-ACK
// or RST-ACK, or an ICMP/ICMPv6 destination unreachable quoting a TCP packet.
// It only reads b and never allocates. ktime is left to the caller.
func decodePacket(b []byte, r *reply) error {
	if len(b) < 1 {
		return errTruncated
	}
	switch b[0] >> 4 {
	case 4:
		return decode4(b, r)
	case 6:
		return decode6(b, r)
	}
	return errNotReply
}

func decode4(b []byte, r *reply) error {
	if len(b) < ip4HdrLen {
		return errTruncated
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < ip4HdrLen || len(b) < ihl {
		return errTruncated
	}
	if binary.BigEndian.Uint16(b[6:8])&0x1fff != 0 {
		return errNotReply // a later fragment
	}
	switch b[9] {
	case 6: // TCP
		r.remote, r.local = mapped(b[12:16]), mapped(b[16:20])
		return decodeTCP(b[ihl:], r)
	case 1: // ICMP
		icmp := b[ihl:]
		if len(icmp) < 8 {
			return errTruncated
		}
		if icmp[0] != 3 { // destination unreachable
			return errNotReply
		}
		in := icmp[8:]
		if len(in) < ip4HdrLen || in[0]>>4 != 4 {
			return errTruncated
		}
		inIHL := int(in[0]&0x0f) * 4
		if inIHL < ip4HdrLen || in[9] != 6 {
			return errNotReply
		}
		if len(in) < inIHL+8 {
			return errTruncated
		}
		// The quoted probe went from local to remote.
		r.local, r.remote = mapped(in[12:16]), mapped(in[16:20])
		return decodeQuoted(in[inIHL:], r)
	}
	return errNotReply
}

func decode6(b []byte, r *reply) error {
	if len(b) < ip6HdrLen {
		return errTruncated
	}
	switch b[6] {
	case 6: // TCP
		r.remote, r.local = [16]byte(b[8:24]), [16]byte(b[24:40])
		return decodeTCP(b[ip6HdrLen:], r)
	case 58: // ICMPv6
		icmp := b[ip6HdrLen:]
		if len(icmp) < 8 {
			return errTruncated
		}
		if icmp[0] != 1 { // destination unreachable
			return errNotReply
		}
		in := icmp[8:]
		if len(in) < ip6HdrLen+8 {
			return errTruncated
		}
		if in[0]>>4 != 6 || in[6] != 6 {
			return errNotReply
		}
		r.local, r.remote = [16]byte(in[8:24]), [16]byte(in[24:40])
		return decodeQuoted(in[ip6HdrLen:], r)
	}
	return errNotReply
}

// decodeTCP reads a reply's TCP header.
func decodeTCP(tcp []byte, r *reply) error {
	if len(tcp) < 20 {
		return errTruncated
	}
	flags := tcp[13]
	switch {
	case flags&tcpFlagRST != 0:
		r.kind = bpf.KindRST
	case flags&(tcpFlagSYN|tcpFlagACK) == tcpFlagSYN|tcpFlagACK:
		r.kind = bpf.KindSynAck
	default:
		return errNotReply
	}
	if flags&tcpFlagACK == 0 {
		return errNoAck
	}
	r.remotePort = binary.BigEndian.Uint16(tcp[0:2])
	r.localPort = binary.BigEndian.Uint16(tcp[2:4])
	r.seq = binary.BigEndian.Uint32(tcp[8:12]) - 1
	return nil
}

// decodeQuoted reads the first 8 bytes of a probe quoted in an ICMP error.
func decodeQuoted(tcp []byte, r *reply) error {
	r.kind = bpf.KindUnreachable
	r.localPort = binary.BigEndian.Uint16(tcp[0:2])
	r.remotePort = binary.BigEndian.Uint16(tcp[2:4])
	r.seq = binary.BigEndian.Uint32(tcp[4:8])
	return nil
}

// mapped returns a 4-byte IPv4 address as IPv4-mapped IPv6.
func mapped(a []byte) [16]byte {
	var m [16]byte
	m[10], m[11] = 0xff, 0xff
	copy(m[12:], a)
	return m
}
