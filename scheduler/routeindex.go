package scheduler

import (
	"cmp"
	"slices"
	"time"
)

// RouteIndex is a snapshot of a pool's traffic decision from which any
// member's route is read in O(1), so that a page of a large pool costs
// O(page), not a decision over every member ([Pool.Routes]) per page. It
// is built by [Pool.Index] and immutable: safe for concurrent readers.
type RouteIndex struct {
	// Summary counts the members by state and decision at the snapshot.
	Summary PoolSummary

	removed  []uint64 // bit per member position: unhealthy and out of rotation
	rank     []uint32 // per member position: 1-based latency rank among healthy members, 0 otherwise
	fastest  time.Duration
	margin   time.Duration
	unprobed bool // Pool.Unprobed: every enabled member is routed
}

// noLatency sorts members without a latency sample after every other one:
// latencies are kept in µs in 32 bits, so no sample reaches it (71 minutes).
const noLatency = 1<<32 - 1

// Index decides every member's route now, as [Pool.Routes] does, and keeps
// what a reader needs to tell any member's route later: which unhealthy
// members are removed and each healthy member's latency rank. It takes one
// pass over the members and two sorts (of the unhealthy and of the healthy
// ones), and keeps about 4 bytes per member.
func (p *Pool) Index(e *Engine) *RouteIndex {
	n := len(p.Members)
	x := &RouteIndex{removed: make([]uint64, (n+63)/64), rank: make([]uint32, n), margin: p.Policy.LatencyMargin, unprobed: p.Unprobed}
	type sickKey struct {
		since int64
		pos   uint32
	}
	var sick []sickKey
	var well []uint64 // smoothed latency in µs << 32 | position
	s := &x.Summary
	p.eachPos(0, func(pos int, id uint32, disabled bool) bool {
		s.Members++
		switch {
		case disabled:
			s.Disabled++
			return true
		case p.Unprobed:
			s.Unprobed++
			return true
		}
		st := e.Status(id)
		switch st.State {
		case Healthy:
			s.Healthy++
			us := uint64(st.Smoothed / time.Microsecond)
			if us == 0 || us > noLatency {
				us = noLatency
			}
			well = append(well, us<<32|uint64(pos))
		case Unhealthy:
			s.Unhealthy++
			sick = append(sick, sickKey{st.Since, uint32(pos)})
		default:
			s.Unknown++
		}
		return true
	})
	s.finish(p.Policy)
	if s.Removed > 0 {
		// Members are in id order, so position order is id order: the same
		// tie-break as Routes.
		slices.SortFunc(sick, func(a, b sickKey) int { return cmp.Or(cmp.Compare(a.since, b.since), cmp.Compare(a.pos, b.pos)) })
		for _, k := range sick[:s.Removed] {
			x.removed[k.pos/64] |= 1 << (k.pos % 64)
		}
	}
	slices.Sort(well)
	for i, k := range well {
		x.rank[uint32(k)] = uint32(i + 1)
	}
	if len(well) > 0 && well[0]>>32 != noLatency {
		x.fastest = time.Duration(well[0]>>32) * time.Microsecond
	}
	return x
}

// Route returns the decision for the member at position pos of the pool's
// Members, id, with its current status st and whether it is disabled in the
// pool. The state is st's; whether an unhealthy member is out of rotation
// and a healthy member's rank are the snapshot's (an unhealthy member that
// was not so at the snapshot stays routed, a healthy one that was not has
// no rank), so a page never mixes decisions from different moments with
// states that contradict them.
func (x *RouteIndex) Route(pos int, id uint32, disabled bool, st TargetStatus) MemberRoute {
	m := MemberRoute{ID: id, Status: st}
	switch {
	case disabled:
		m.Route = Excluded
	case x.unprobed:
		// routed whatever the engine says
	case st.State == Unhealthy:
		if x.removed[pos/64]&(1<<(pos%64)) != 0 {
			m.Route = Removed
		}
	case st.State == Healthy:
		m.Rank = int(x.rank[pos])
		l := st.Smoothed
		m.Preferred = x.fastest == 0 || (l != 0 && l <= x.fastest+x.margin)
	default:
		m.Route = Pending
	}
	return m
}

// Position returns the position in Members of the first member whose id is
// greater than id: where a listing that ended with id goes on.
func (p *Pool) Position(id uint32) int {
	pos, found := slices.BinarySearch(p.Members, id)
	if found {
		pos++
	}
	return pos
}

// EachFrom calls fn for the members from position pos on, in id order, with
// their position and whether they are disabled in this pool, until fn
// returns false. Starting costs O(log n).
func (p *Pool) EachFrom(pos int, fn func(pos int, id uint32, disabled bool) bool) {
	p.eachPos(pos, fn)
}

func (p *Pool) eachPos(pos int, fn func(pos int, id uint32, disabled bool) bool) {
	pos = max(pos, 0)
	if pos >= len(p.Members) {
		return
	}
	d, _ := slices.BinarySearch(p.Disabled, p.Members[pos])
	for ; pos < len(p.Members); pos++ {
		id := p.Members[pos]
		for d < len(p.Disabled) && p.Disabled[d] < id {
			d++
		}
		if !fn(pos, id, d < len(p.Disabled) && p.Disabled[d] == id) {
			return
		}
	}
}
