package fleet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// MaxShards is the largest number of shards: deciding a target's shard costs
// one hash per shard, paid by every shard for every listed target at each
// load.
const MaxShards = 1024

// Shard is one slice of the targets: shard Index of Count. Count processes
// given the same configuration and the shards 0..Count-1 probe every target
// exactly once between them. The zero Shard is all targets (0 of 1).
type Shard struct {
	Index int // 0..Count-1
	Count int // number of shards; 0 means 1
}

// ParseShard parses "i/N", the value of the -shard flag: shard i of N, with
// 0 <= i < N <= [MaxShards]. The error says what is wrong and what is
// allowed; the flag package adds the flag's name and value.
func ParseShard(s string) (Shard, error) {
	is, ns, ok := strings.Cut(s, "/")
	if !ok {
		return Shard{}, errors.New("want i/N, shard i of N shards (0 <= i < N)")
	}
	n, err := strconv.Atoi(ns)
	if err != nil {
		return Shard{}, fmt.Errorf("shard count %q is not a number; want i/N with N in 1..%d", ns, MaxShards)
	}
	if n < 1 || n > MaxShards {
		return Shard{}, fmt.Errorf("shard count %d is out of range 1..%d", n, MaxShards)
	}
	i, err := strconv.Atoi(is)
	if err != nil {
		return Shard{}, fmt.Errorf("shard index %q is not a number; want i/N with i in 0..%d", is, n-1)
	}
	if i < 0 || i >= n {
		return Shard{}, fmt.Errorf("shard index %d is out of range 0..%d for %d shards", i, n-1, n)
	}
	return Shard{Index: i, Count: n}, nil
}

// Shards returns the number of shards, at least 1.
func (s Shard) Shards() int { return max(s.Count, 1) }

// String returns "i/N".
func (s Shard) String() string { return strconv.Itoa(s.Index) + "/" + strconv.Itoa(s.Shards()) }

// Validate reports a shard outside 0 ≤ Index < Count ≤ [MaxShards].
func (s Shard) Validate() error {
	if n := s.Shards(); n > MaxShards || s.Index < 0 || s.Index >= n {
		return fmt.Errorf("shard %d of %d: want 0 <= i < N <= %d", s.Index, s.Count, MaxShards)
	}
	return nil
}

// Owns reports whether the endpoint belongs to this shard. It is a pure
// function of the endpoint and the shard count, the same in every process
// and every release, so every place targets enter (the config file, its
// targets files, discovery) decides alike:
//
//   - The key is the endpoint, address and port: every probe stream (P4, P5)
//     is one endpoint, so a stream is never split, and an endpoint's probe
//     rate (P6) is all in one shard. A host name counts by the address it
//     resolves to.
//   - The shard is chosen by rendezvous (highest random weight) hashing:
//     the shard with the highest score of (endpoint, shard) wins. Going from
//     N to N+1 shards moves only the endpoints the new shard wins, 1/(N+1)
//     of them, and each to the new shard.
func (s Shard) Owns(ep netip.AddrPort) bool {
	n := s.Shards()
	return n == 1 || ShardOf(ep, n) == s.Index
}

// ShardOf returns the shard 0..n-1 that owns the endpoint among n shards
// (see [Shard.Owns]).
func ShardOf(ep netip.AddrPort, n int) int {
	k := endpointKey(ep)
	best, bestScore := 0, uint64(0)
	for i := range n {
		if sc := shardScore(k, i); i == 0 || sc > bestScore {
			best, bestScore = i, sc
		}
	}
	return best
}

// endpointKey hashes an endpoint: the 16-byte form of the address (IPv4 as
// IPv4-mapped) and the port. Changing it moves targets between shards on
// upgrade; TestShardOfStable pins it.
func endpointKey(ep netip.AddrPort) uint64 {
	b := ep.Addr().Unmap().As16()
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	return mix64(hi ^ mix64(lo^mix64(uint64(ep.Port())+golden)))
}

// shardScore is the rendezvous weight of shard i for key k: the i+1-th value
// of a SplitMix64 sequence seeded with k.
func shardScore(k uint64, i int) uint64 { return mix64(k + uint64(i+1)*golden) }

// golden is 2^64 divided by the golden ratio, SplitMix64's increment.
const golden = 0x9e3779b97f4a7c15

// mix64 is SplitMix64's finalizer: a bijection whose every output bit
// depends on every input bit.
func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
