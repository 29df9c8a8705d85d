package fleet

import (
	"cmp"
	"encoding/binary"
	"math"
	"net/netip"
	"slices"

	"github.com/prometheus/prometheus/model/labels"
)

// Membership is a pool's share of the table: its members and disabled
// members by id, and each member's labels.
type Membership struct {
	// Members are the ids of the pool's targets, ascending.
	Members []uint32
	// Disabled are the members the pool excludes from evaluation and from
	// its decisions (E6), ascending.
	Disabled []uint32

	// labelOf gives each member (by position) its labels in labelSets;
	// nil when every member has labelSets[0], the pool's own labels.
	// labelSets may be shared with other pools (then labelNames are the
	// names of the sets this pool's members use).
	labelOf    []uint32
	labelSets  []labels.Labels
	labelNames []string
}

// WithLabels returns a membership of members (ascending) that all have
// labels ls.
func WithLabels(members []uint32, ls labels.Labels) Membership {
	m := Membership{Members: members}
	if !ls.IsEmpty() {
		m.labelSets = []labels.Labels{ls}
	}
	return m
}

// HasMember reports whether target id is a member.
func (p *Membership) HasMember(id uint32) bool {
	_, ok := slices.BinarySearch(p.Members, id)
	return ok
}

// MemberLabels returns the labels of the member at position pos of
// Members.
func (p *Membership) MemberLabels(pos int) labels.Labels {
	if p.labelOf == nil {
		if len(p.labelSets) == 0 {
			return labels.EmptyLabels()
		}
		return p.labelSets[0]
	}
	return p.labelSets[p.labelOf[pos]]
}

// Renumbered returns a copy of p whose members and disabled members are
// those of p with their ids mapped by idOf (which must be one to one),
// each member keeping its labels.
func (p *Membership) Renumbered(idOf func(uint32) uint32) Membership {
	np := *p
	np.Members = make([]uint32, len(p.Members))
	for i, id := range p.Members {
		np.Members[i] = idOf(id)
	}
	if p.labelOf != nil {
		order := make([]int, len(p.Members))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return cmp.Compare(np.Members[a], np.Members[b]) })
		sorted := make([]uint32, len(order))
		np.labelOf = make([]uint32, len(order))
		for i, o := range order {
			sorted[i], np.labelOf[i] = np.Members[o], p.labelOf[o]
		}
		np.Members = sorted
	} else {
		slices.Sort(np.Members)
	}
	np.Disabled = make([]uint32, len(p.Disabled))
	for i, id := range p.Disabled {
		np.Disabled[i] = idOf(id)
	}
	slices.Sort(np.Disabled)
	return np
}

// LabelNames returns the names of the labels of the members and of more,
// sorted, each once.
func (p *Membership) LabelNames(more ...labels.Labels) []string {
	seen := map[string]bool{}
	add := func(ls labels.Labels) {
		ls.Range(func(l labels.Label) { seen[l.Name] = true })
	}
	if p.labelOf != nil {
		for _, n := range p.labelNames {
			seen[n] = true
		}
	} else {
		for _, ls := range p.labelSets {
			add(ls)
		}
	}
	for _, ls := range more {
		add(ls)
	}
	return sortedKeys(seen)
}

// sortedKeys returns the keys of m, sorted.
func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Builder collects the entries of a table, target by target as the pools
// list them, and builds it ([Builder.Build]). The zero Builder is ready to
// use; it is not safe for concurrent use.
type Builder struct {
	entries  []entry
	names    []string          // host names, hostRef.name-1 indexes it
	nameIdx  map[string]uint32 // host name → index+1
	hostRefs []hostRef
	pools    []poolRange
	// Labels: labels is the label set of the entries being added (an index
	// into labelSets, 0 for none), labelOf each entry's by seq once some
	// entry has labels.
	labels    uint32
	labelOf   []uint32
	labelSets []labels.Labels
	labelIdx  map[uint64]uint32 // by labels.Labels.Hash
	setsSeen  bitset            // scratch of setPoolLabels, cleared after each pool
}

// Len is the number of entries added.
func (x *Builder) Len() int { return len(x.entries) }

// Grow makes room for n more entries.
func (x *Builder) Grow(n int) { x.entries = slices.Grow(x.entries, n) }

// SetLabels makes ls the labels of the entries added next.
func (x *Builder) SetLabels(ls labels.Labels) { x.labels = x.intern(ls) }

// Add adds an entry: address a, port, given as host name name ("" for
// none), of check index check in probe class class. hostMatters says
// whether the host name changes the probe (an HTTP Host header), so that
// two names of one address are two targets.
func (x *Builder) Add(a netip.Addr, port uint16, name string, check, class uint16, hostMatters bool) {
	hi, lo := addrHalves(a)
	e := entry{hi: hi, lo: lo, port: port, check: check, class: class, seq: uint32(len(x.entries))}
	if x.labels != 0 && x.labelOf == nil {
		x.labelOf = make([]uint32, len(x.entries), cap(x.entries))
	}
	if x.labelOf != nil {
		x.labelOf = append(x.labelOf, x.labels)
	}
	if name != "" {
		idx, ok := x.nameIdx[name]
		if !ok {
			if x.nameIdx == nil {
				x.nameIdx = make(map[string]uint32)
			}
			x.names = append(x.names, name)
			idx = uint32(len(x.names))
			x.nameIdx[name] = idx
		}
		x.hostRefs = append(x.hostRefs, hostRef{seq: e.seq, name: idx})
		if hostMatters {
			e.hkey = idx
		}
	}
	x.entries = append(x.entries, e)
}

// DisableLast disables the entry added last.
func (x *Builder) DisableLast() { x.entries[len(x.entries)-1].flags |= flagDisabled }

// EndPool ends a pool: its entries are those added from start (a Len
// before them) on.
func (x *Builder) EndPool(start int) { x.pools = append(x.pools, poolRange{start, len(x.entries)}) }

// entry is one target as listed in one pool, before deduplication. Entries
// are kept in one flat slice, 32 bytes each and free of pointers, and
// deduplicated by sorting it: no map is keyed by every target.
type entry struct {
	hi, lo uint64 // address as 16 bytes (IPv4-mapped for IPv4), big-endian halves
	port   uint16 // effective port
	check  uint16 // index of the check
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

// Build turns the entries into unique targets (P4, P5) and gives each
// pool, in the order of its EndPool, its members: pools[i] gets them, and
// healthChecks(i) says whether pool i probes its enabled members. It
// returns the targets by id and the host names of the targets given as
// host names. The Builder is empty afterwards.
//
// Target ids follow file order: a target's id is the rank of its first
// listing. Targets with the same address, port and check are one target;
// targets of one probe class on the same address and port (and host name,
// where it changes the probe) share one stream, led by its first target that
// some pool probes (or by its first target when no pool probes any).
func (x *Builder) Build(pools []*Membership, healthChecks func(i int) bool) ([]Target, map[uint32]string) {
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
			} else if healthChecks(i) {
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

	x.pools, x.labelSets, x.labelIdx, x.setsSeen, x.labels = nil, nil, nil, nil, 0
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
	x.hostRefs, x.names, x.nameIdx = nil, nil, nil
	return targets, hostnames
}

// sortedUnique sorts s and removes repeats, in place.
func sortedUnique(s []uint32) []uint32 {
	if !slices.IsSorted(s) {
		slices.Sort(s)
	}
	return slices.Clip(slices.Compact(s))
}

// ByEndpoint returns the indices of the entries from start on, sorted by
// endpoint, for [Builder.MarkDisabled].
func (x *Builder) ByEndpoint(start int) []uint32 {
	idx := make([]uint32, len(x.entries)-start)
	for i := range idx {
		idx[i] = uint32(start + i)
	}
	slices.SortFunc(idx, func(a, b uint32) int { return cmpEndpoint(&x.entries[a], &x.entries[b]) })
	return idx
}

// MarkDisabled disables the entries among idx (from [Builder.ByEndpoint])
// whose endpoint is (a, port). It reports whether any entry matched.
func (x *Builder) MarkDisabled(idx []uint32, a netip.Addr, port uint16) bool {
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

// intern returns the index of label set ls among the expander's label sets,
// adding it when new; the empty set is 0. Sets are found by their hash: a
// collision of two different sets only keeps them apart.
func (x *Builder) intern(ls labels.Labels) uint32 {
	if ls.IsEmpty() {
		return 0
	}
	h := ls.Hash()
	if i, ok := x.labelIdx[h]; ok && labels.Equal(x.labelSets[i], ls) {
		return i
	}
	if x.labelIdx == nil {
		x.labelIdx = map[uint64]uint32{}
		x.labelSets = []labels.Labels{labels.EmptyLabels()}
	}
	i := uint32(len(x.labelSets))
	x.labelSets = append(x.labelSets, ls)
	if _, ok := x.labelIdx[h]; !ok {
		x.labelIdx[h] = i
	}
	return i
}

// setPoolLabels gives a deduplicated pool its members' labels: the labels of
// each member's first listing in the pool (pairs of target id and label set,
// in listing order).
func (x *Builder) setPoolLabels(p *Membership, pairs [][2]uint32) {
	p.labelOf, p.labelSets = nil, nil
	if len(x.labelSets) == 0 || len(pairs) == 0 {
		return
	}
	slices.SortStableFunc(pairs, func(a, b [2]uint32) int { return int(a[0]) - int(b[0]) })
	pairs = slices.CompactFunc(pairs, func(a, b [2]uint32) bool { return a[0] == b[0] })
	same := true
	for _, pr := range pairs {
		same = same && pr[1] == pairs[0][1]
	}
	if same {
		if pairs[0][1] != 0 {
			p.labelSets = []labels.Labels{x.labelSets[pairs[0][1]]}
		}
		return
	}
	p.labelSets = x.labelSets
	p.labelOf = make([]uint32, len(pairs))
	if x.setsSeen == nil {
		x.setsSeen = newBitset(len(x.labelSets))
	}
	names := map[string]bool{}
	for i, pr := range pairs {
		p.labelOf[i] = pr[1]
		if !x.setsSeen.has(pr[1]) {
			x.setsSeen.set(pr[1])
			x.labelSets[pr[1]].Range(func(l labels.Label) { names[l.Name] = true })
		}
	}
	for _, pr := range pairs {
		x.setsSeen.clear(pr[1])
	}
	p.labelNames = sortedKeys(names)
}
