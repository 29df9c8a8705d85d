package syn

import (
	"crypto/rand"
	"encoding/binary"

	"github.com/dchest/siphash"
)

// cookieKey is a prober's secret 128-bit SipHash key.
//
// A probe's TCP sequence number is
//
//	seq = id XOR uint32(SipHash-2-4(key, srcIP ‖ dstIP ‖ sport ‖ dport))
//
// with 16-byte addresses (IPv4 as IPv4-mapped IPv6) and big-endian ports, in
// the direction of the probe (src = sonde, dst = target). A SYN-ACK or RST
// acknowledges seq+1, an ICMP error quotes seq; XOR-ing the same hash of the
// reply's flow gives back the target id with no per-flow table. The reply is
// accepted only when that id names a target whose address and port are the
// reply's source: a forged or stray reply passes with probability about
// 2^-32 per packet, as the attacker does not know the key.
type cookieKey struct{ k0, k1 uint64 }

// newCookieKey returns a random key.
func newCookieKey() cookieKey {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return cookieKey{binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])}
}

// hash is the flow hash the cookie XORs with the id.
func (k cookieKey) hash(src, dst *[16]byte, sport, dport uint16) uint32 {
	var b [36]byte
	copy(b[0:16], src[:])
	copy(b[16:32], dst[:])
	binary.BigEndian.PutUint16(b[32:34], sport)
	binary.BigEndian.PutUint16(b[34:36], dport)
	return uint32(siphash.Hash(k.k0, k.k1, b[:]))
}

// seq returns the sequence number of the probe for id on the flow.
func (k cookieKey) seq(id uint32, src, dst *[16]byte, sport, dport uint16) uint32 {
	return id ^ k.hash(src, dst, sport, dport)
}

// id recovers the target id from a probe's sequence number seq, given the
// probe's flow. The caller must still check the id against its table.
func (k cookieKey) id(seq uint32, src, dst *[16]byte, sport, dport uint16) uint32 {
	return seq ^ k.hash(src, dst, sport, dport)
}
