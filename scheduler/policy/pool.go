package policy

import (
	"cmp"
	"slices"
	"time"

	"github.com/sondeprobe/sonde/scheduler"
)

// PoolPolicy is how a pool turns its targets' health into traffic decisions.
type PoolPolicy struct {
	// MaxUnhealthyPercent caps the share of a pool's enabled targets that are
	// taken out of rotation at once, 1..100 (P1). App Service uses 50.
	MaxUnhealthyPercent int
	// FailOpen keeps every unhealthy target in rotation while no target of
	// the pool is healthy (P2): health checks alone never empty a pool.
	FailOpen bool
	// LatencyMargin: healthy targets whose smoothed latency is within the
	// fastest one's plus this margin form the preferred set (E7).
	LatencyMargin time.Duration
}

// Removed returns how many of a pool's unhealthy targets leave rotation, given
// how many targets are enabled, healthy and unhealthy (P1–P3): none when the
// pool fails open, otherwise every unhealthy target up to
// floor(enabled × MaxUnhealthyPercent / 100). A single-instance pool is thus
// never emptied under App Service's 50 % (P3).
func (p PoolPolicy) Removed(enabled, healthy, unhealthy int) int {
	if unhealthy == 0 || (p.FailOpen && healthy == 0) {
		return 0
	}
	return min(unhealthy, enabled*p.MaxUnhealthyPercent/100)
}

// Route is one target's place in its pool's traffic decision.
type Route uint8

// The routes a pool member can have.
const (
	Routed   Route = iota // receives traffic
	Removed               // unhealthy and taken out of rotation
	Pending               // state unknown: no decision yet (E3)
	Excluded              // disabled in this pool (E6)
)

var routeNames = [...]string{Routed: "routed", Removed: "removed", Pending: "pending", Excluded: "excluded"}

// String returns the route's name.
func (r Route) String() string { return routeNames[r] }

// MarshalText encodes the route as its name.
func (r Route) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Pool is a named group of targets with one policy. Members and Disabled are
// ascending target ids; Disabled is a subset of Members.
type Pool struct {
	Name     string
	Policy   PoolPolicy
	Members  []uint32
	Disabled []uint32
	// Unprobed is set when the pool's health checks are off (Front Door's
	// disabled probes, Global Accelerator's health checks off): its enabled
	// members are routed whatever the engine says of them, never removed,
	// and never make the pool fail open.
	Unprobed bool
}

// PoolSummary counts a pool's members by state and decision.
type PoolSummary struct {
	Members     int  // targets in the pool
	Disabled    int  // excluded from decisions (E6)
	Healthy     int  // enabled and healthy
	Unhealthy   int  // enabled and unhealthy
	Unknown     int  // enabled and not yet decided
	Unprobed    int  // enabled members of a pool with health checks off: routed, never probed
	Removed     int  // unhealthy targets taken out of rotation (P1–P3)
	Routable    int  // targets receiving traffic: healthy ones, unhealthy ones not removed, unprobed ones
	Preferred   int  // healthy targets within the latency margin of the fastest (E7)
	FailingOpen bool // the pool has unhealthy targets, none healthy, and keeps them all (P2)
}

// Each calls fn for every member, in id order, with whether it is disabled in
// this pool.
func (p *Pool) Each(fn func(id uint32, disabled bool)) {
	d := 0
	for _, id := range p.Members {
		for d < len(p.Disabled) && p.Disabled[d] < id {
			d++
		}
		fn(id, d < len(p.Disabled) && p.Disabled[d] == id)
	}
}

// MemberRoute is one member's decision.
type MemberRoute struct {
	ID        uint32
	Status    scheduler.TargetStatus
	Route     Route
	Preferred bool // healthy and within the latency margin of the fastest at the latest ranking (E7)
	Rank      int  // 1-based latency rank among healthy routed members, 0 otherwise
}

// rankByLatency sets Rank on healthy members by smoothed latency (E7), ties
// by id. Members without a latency sample rank last.
func rankByLatency(well []*MemberRoute) {
	slices.SortFunc(well, func(a, b *MemberRoute) int {
		la, lb := a.Status.Smoothed, b.Status.Smoothed
		if (la == 0) != (lb == 0) {
			if la == 0 {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(la, lb), cmp.Compare(a.ID, b.ID))
	})
	for i, m := range well {
		m.Rank = i + 1
	}
}
