package policy

import (
	"slices"
	"time"

	"github.com/sondeprobe/sonde/scheduler"
)

// noLatency sorts members without a latency sample after every other one:
// latencies are kept in µs in 32 bits, so no sample reaches it (71 minutes).
const noLatency = 1<<32 - 1

// Ranks returns the latency rank (E7) of every member of pool pi, by
// position in its Members: 1-based among the healthy members the router
// routes in a probed pool, by smoothed latency then id, as [Router.Routes]
// ranks them; 0 for the others. It reads the members' current statuses,
// sorts the healthy ones once as 8-byte keys, and allocates 4 bytes per
// member for the answer, so a reader can rank a page of a large pool
// without deciding every member's route.
func (r *Router) Ranks(pi int) []uint32 {
	p := r.pools[pi].p
	ranks := make([]uint32, len(p.Members))
	if p.Unprobed {
		return ranks
	}
	var well []uint64 // smoothed latency in µs << 32 | position; position order is id order
	for m, id := range p.Members {
		if route, _ := r.Route(pi, m); route != Routed {
			continue
		}
		st := r.e.Status(id)
		if st.State != scheduler.Healthy {
			continue
		}
		us := uint64(st.Smoothed / time.Microsecond)
		if us == 0 || us > noLatency {
			us = noLatency
		}
		well = append(well, us<<32|uint64(m))
	}
	slices.Sort(well)
	for i, k := range well {
		ranks[uint32(k)] = uint32(i + 1)
	}
	return ranks
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
