package config

import (
	"cmp"
	"encoding/binary"
	"math"
	"net/netip"
	"slices"
)

// entry is one target as listed in one pool, before deduplication. Entries
// are kept in one flat slice, 32 bytes each and free of pointers, and
// deduplicated by sorting it: no map is keyed by every target.
type entry struct {
	hi, lo uint64 // address as 16 bytes (IPv4-mapped for IPv4), big-endian halves
	port   uint16 // effective port
	check  uint16 // index into Config.Checks
	class  uint16 // the check's probe class
	flags  uint8  // flagDisabled
	_      uint8
	hkey   uint32 // host-name index when the name changes the probe, else 0
	seq    uint32 // position in file order
}

const flagDisabled = 1 << 0

// hostRef records that the entry at seq was given as host name names[name-1].
type hostRef struct{ seq, name uint32 }

// poolRange is the span of a pool's entries in file order.
type poolRange struct{ start, end int }

func addrHalves(a netip.Addr) (hi, lo uint64) {
	b := a.As16()
	return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
}

func (e *entry) addr() netip.Addr {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], e.hi)
	binary.BigEndian.PutUint64(b[8:], e.lo)
	return netip.AddrFrom16(b).Unmap()
}

// cmpEndpoint orders entries by address and port.
func cmpEndpoint(a, b *entry) int {
	if c := cmp.Compare(a.hi, b.hi); c != 0 {
		return c
	}
	if c := cmp.Compare(a.lo, b.lo); c != 0 {
		return c
	}
	return cmp.Compare(a.port, b.port)
}

// sameStream reports whether two entries share a probe stream: same probe
// class, address, port and (when it matters) host name.
func sameStream(a, b *entry) bool {
	return a.class == b.class && a.hi == b.hi && a.lo == b.lo && a.port == b.port && a.hkey == b.hkey
}

// cmpEntry orders entries so that every probe stream and, inside it, every
// target is a contiguous run, its entries in file order.
func cmpEntry(a, b entry) int {
	if c := cmp.Compare(a.class, b.class); c != 0 {
		return c
	}
	if c := cmpEndpoint(&a, &b); c != 0 {
		return c
	}
	if c := cmp.Compare(a.hkey, b.hkey); c != 0 {
		return c
	}
	if c := cmp.Compare(a.check, b.check); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// bitset is a fixed-size set of small integers.
type bitset []uint64

func newBitset(n int) bitset       { return make(bitset, (n+63)/64) }
func (b bitset) set(i uint32)      { b[i>>6] |= 1 << (i & 63) }
func (b bitset) has(i uint32) bool { return b[i>>6]&(1<<(i&63)) != 0 }
func (b bitset) clear(i uint32)    { b[i>>6] &^= 1 << (i & 63) }

// dedup turns the expanded entries into unique targets (P4, P5).
//
// Target ids follow file order: a target's id is the rank of its first
// listing. Targets with the same address, port and check are one target;
// targets of one probe class on the same address and port (and host name,
// where it changes the probe) share one stream, led by its first target that
// some pool probes (or by its first target when no pool probes any).
func (x *expander) dedup(pools []*Pool) ([]Target, map[uint32]string) {
	entries := x.entries
	x.entries = nil
	n := len(entries)
	slices.SortFunc(entries, cmpEntry)

	targetOf := make([]uint32, n) // seq → group, later → target id
	disabledSeq := newBitset(n)
	var firstSeq, streamOf []uint32 // per group
	streams := 0
	for i := range entries {
		e := &entries[i]
		newStream := i == 0 || !sameStream(&entries[i-1], e)
		if newStream {
			streams++
		}
		if newStream || entries[i-1].check != e.check {
			firstSeq = append(firstSeq, e.seq)
			streamOf = append(streamOf, uint32(streams-1))
		}
		targetOf[e.seq] = uint32(len(firstSeq) - 1)
		if e.flags&flagDisabled != 0 {
			disabledSeq.set(e.seq)
		}
	}

	// Number the groups in the order of their first listing.
	groups := len(firstSeq)
	gid := make([]uint32, groups)
	next := uint32(0)
	for seq := range targetOf {
		if g := targetOf[seq]; firstSeq[g] == uint32(seq) {
			gid[g] = next
			next++
		}
	}
	firstSeq = nil
	streamOfID := make([]uint32, groups)
	for g, id := range gid {
		streamOfID[id] = streamOf[g]
	}
	streamOf = nil
	for seq, g := range targetOf {
		targetOf[seq] = gid[g]
	}
	gid = nil

	targets := make([]Target, groups)
	for i := range entries {
		e := &entries[i]
		targets[targetOf[e.seq]] = NewTarget(e.addr(), e.port, e.check)
	}
	entries = nil

	enabled := newBitset(groups)
	for i, p := range pools {
		r := x.pools[i]
		members := make([]uint32, 0, r.end-r.start)
		var disabled []uint32
		var pairs [][2]uint32 // (id, labels) in listing order, when some entry has labels
		if x.labelOf != nil {
			pairs = make([][2]uint32, 0, r.end-r.start)
		}
		for seq := r.start; seq < r.end; seq++ {
			id := targetOf[seq]
			members = append(members, id)
			if pairs != nil {
				pairs = append(pairs, [2]uint32{id, x.labelOf[seq]})
			}
			if disabledSeq.has(uint32(seq)) {
				disabled = append(disabled, id)
			} else if p.HealthChecks {
				enabled.set(id)
			}
		}
		p.Members = sortedUnique(members)
		p.Disabled = sortedUnique(disabled)
		x.setPoolLabels(p, pairs)
	}
	x.labelOf = nil

	lead := make([]uint32, streams)
	first := make([]uint32, streams)
	for i := range lead {
		lead[i], first[i] = math.MaxUint32, math.MaxUint32
	}
	for id := range targets {
		st := streamOfID[id]
		if first[st] == math.MaxUint32 {
			first[st] = uint32(id)
		}
		if enabled.has(uint32(id)) && lead[st] == math.MaxUint32 {
			lead[st] = uint32(id)
		}
	}
	for id := range targets {
		t := &targets[id]
		t.SetDisabled(!enabled.has(uint32(id)))
		st := streamOfID[id]
		if l := lead[st]; l != math.MaxUint32 {
			t.SetLeader(l)
		} else {
			t.SetLeader(first[st])
		}
	}

	var hostnames map[uint32]string
	for _, h := range x.hostRefs {
		if hostnames == nil {
			hostnames = make(map[uint32]string)
		}
		id := targetOf[h.seq]
		if _, ok := hostnames[id]; !ok {
			hostnames[id] = x.names[h.name-1]
		}
	}
	return targets, hostnames
}

// sortedUnique sorts s and removes repeats, in place.
func sortedUnique(s []uint32) []uint32 {
	if !slices.IsSorted(s) {
		slices.Sort(s)
	}
	return slices.Clip(slices.Compact(s))
}

// markDisabled flags the entries of pool range r whose endpoint is (a, port).
// idx holds the indices of the range's entries sorted by endpoint. It reports
// whether any entry matched.
func (x *expander) markDisabled(idx []uint32, a netip.Addr, port uint16) bool {
	hi, lo := addrHalves(a)
	key := entry{hi: hi, lo: lo, port: port}
	i, _ := slices.BinarySearchFunc(idx, &key, func(j uint32, k *entry) int { return cmpEndpoint(&x.entries[j], k) })
	found := false
	for ; i < len(idx) && cmpEndpoint(&x.entries[idx[i]], &key) == 0; i++ {
		x.entries[idx[i]].flags |= flagDisabled
		found = true
	}
	return found
}
