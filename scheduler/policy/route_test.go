package policy

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
)

// routeSim is a pool of n targets probed every second (rise 1, fall 2) with
// a router: a target refuses while its sick function says so.
func routeSim(t *testing.T, n int, policy PoolPolicy, sick func(id uint32, at time.Duration) bool, opt RouterOptions) (*sim, *Pool) {
	t.Helper()
	checks := []scheduler.Check{{Timing: scheduler.Timing{Interval: sec, Timeout: sec, Rise: 1, Fall: 2}}}
	targets := make([]scheduler.TargetSpec, n)
	p := &Pool{Name: "web", Policy: policy}
	for i := range targets {
		targets[i].Leader = uint32(i)
		p.Members = append(p.Members, uint32(i))
	}
	s := newSim(t, checks, targets, 2)
	s.behave = func(req probe.Request) answer {
		if sick(req.ID, time.Duration(req.Sent)) {
			return answer{outcome: probe.Refused, after: time.Millisecond}
		}
		return answer{outcome: probe.Success, after: time.Millisecond}
	}
	s.route([]*Pool{p}, opt)
	return s, p
}

// routeLog renders the route events of kind route and fail_open as
// "target:from>to(cause)" and "open"/"closed", in order, and counts the
// first decisions (pending to routed), which it leaves out: their order is
// the order of the first probes.
func routeLog(evs []RouteEvent) (log string, first int) {
	var b []string
	for _, ev := range evs {
		switch {
		case ev.Kind == RouteChanged && ev.From == Pending && ev.To == Routed:
			first++
		case ev.Kind == RouteChanged:
			b = append(b, fmt.Sprintf("%d:%v>%v(%v)", ev.Target, ev.From, ev.To, ev.Cause))
		case ev.Kind == FailOpenChanged:
			b = append(b, map[bool]string{true: "open", false: "closed"}[ev.On])
		}
	}
	return strings.Join(b, " "), first
}

// TestRouterEvents follows docs/semantics.md P1 and P2 through their route events:
// removals under the 50 % cap, the oldest unhealthy first, a slot that frees
// up when one recovers, fail-open entered and left.
func TestRouterEvents(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy PoolPolicy
		sick   map[uint32][2]time.Duration // sick from, until
		want   string
	}{
		{
			name:   "P1 App Service example, then a recovery frees a slot",
			policy: PoolPolicy{MaxUnhealthyPercent: 50, FailOpen: true},
			sick:   map[uint32][2]time.Duration{1: {3 * sec, 20 * sec}, 2: {5 * sec, time.Hour}, 3: {7 * sec, time.Hour}},
			// 1 and 2 removed, 3 kept; 1 back, 3 takes its slot.
			want: "1:routed>removed(state) 2:routed>removed(state) 1:removed>routed(state) 3:routed>removed(max_unhealthy_percent)",
		},
		{
			name:   "P2 fail open and back",
			policy: PoolPolicy{MaxUnhealthyPercent: 100, FailOpen: true},
			sick:   map[uint32][2]time.Duration{0: {3 * sec, time.Hour}, 1: {5 * sec, time.Hour}, 2: {7 * sec, 20 * sec}},
			// Entering fail-open puts back the youngest removal first.
			want: "0:routed>removed(state) 1:routed>removed(state) open 1:removed>routed(fail_open) 0:removed>routed(fail_open) " +
				"closed 0:routed>removed(fail_open) 1:routed>removed(fail_open)",
		},
		{
			name:   "P3 single instance under 50 % is never removed",
			policy: PoolPolicy{MaxUnhealthyPercent: 50},
			sick:   map[uint32][2]time.Duration{0: {3 * sec, time.Hour}},
			want:   "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 4
			if strings.HasPrefix(tt.name, "P2") {
				n = 3
			} else if strings.HasPrefix(tt.name, "P3") {
				n = 1
			}
			s, _ := routeSim(t, n, tt.policy, func(id uint32, at time.Duration) bool {
				w, ok := tt.sick[id]
				return ok && at >= w[0] && at < w[1]
			}, RouterOptions{})
			s.runFor(40 * sec)
			got, first := routeLog(s.routes)
			if got != tt.want || first != n {
				t.Fatalf("route events after %d first decisions (want %d):\n got %s\nwant %s", first, n, got, tt.want)
			}
			checkReplay(t, s, 0)
		})
	}
}

// checkReplay checks that the route events of pool pi, applied in order,
// give the router's published routes, and that each event's From is the
// route the previous one left.
func checkReplay(t *testing.T, s *sim, pi int) {
	t.Helper()
	r := s.router
	p := r.Pool(pi)
	cur := map[uint32]Route{}
	pref := map[uint32]bool{}
	for _, id := range p.Members {
		cur[id] = Pending
	}
	open := false
	for _, ev := range s.routes {
		if ev.Pool != pi {
			continue
		}
		switch ev.Kind {
		case RouteChanged:
			if cur[ev.Target] != ev.From {
				t.Fatalf("event %+v: target was %v", ev, cur[ev.Target])
			}
			cur[ev.Target] = ev.To
		case PreferredChanged:
			if pref[ev.Target] == ev.On {
				t.Fatalf("event %+v repeats the preference", ev)
			}
			pref[ev.Target] = ev.On
		case FailOpenChanged:
			if open == ev.On {
				t.Fatalf("event %+v repeats fail-open", ev)
			}
			open = ev.On
		}
	}
	for m, id := range p.Members {
		route, preferred := r.Route(pi, m)
		if route == Excluded {
			continue
		}
		if cur[id] != route || pref[id] != preferred {
			t.Fatalf("member %d: events say %v preferred %v, router says %v preferred %v", id, cur[id], pref[id], route, preferred)
		}
	}
	if sum := r.Summary(pi); sum.FailingOpen != open {
		t.Fatalf("events say failing open %v, summary %+v", open, sum)
	}
}

// reference decides a pool from the engine's states the way the policy reads:
// the unhealthy members unhealthy longest (ties by id) are removed, up to the
// policy's number.
func reference(e *scheduler.Engine, p *Pool) (map[uint32]Route, PoolSummary) {
	routes := map[uint32]Route{}
	var s PoolSummary
	var sick []uint32
	p.Each(func(id uint32, disabled bool) {
		s.Members++
		st := e.Status(id)
		switch {
		case disabled:
			s.Disabled++
			routes[id] = Excluded
		case st.State == scheduler.Healthy:
			s.Healthy++
			routes[id] = Routed
		case st.State == scheduler.Unhealthy:
			s.Unhealthy++
			routes[id] = Routed
			sick = append(sick, id)
		default:
			s.Unknown++
			routes[id] = Pending
		}
	})
	slices.SortFunc(sick, func(a, b uint32) int {
		return cmp.Or(cmp.Compare(e.Status(a).Since, e.Status(b).Since), cmp.Compare(a, b))
	})
	s.Removed = p.Policy.Removed(s.Members-s.Disabled, s.Healthy, s.Unhealthy)
	for _, id := range sick[:s.Removed] {
		routes[id] = Removed
	}
	s.Routable = s.Healthy + s.Unhealthy - s.Removed
	s.FailingOpen = p.Policy.FailOpen && s.Healthy == 0 && s.Unhealthy > 0
	return routes, s
}

// TestRouterMatchesReference flaps random members of pools with random
// policies, some of them sharing members, steps the router only once a
// second so that notices pile up (and overflow a ring as small as 1, which
// makes the router re-read every target, in id order rather than in the
// order they failed), and checks every second that the router's decisions
// equal the reference's and that its events replay to them.
func TestRouterMatchesReference(t *testing.T) {
	t.Parallel()
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			n := 40
			if seed%4 == 3 {
				n = 300 // enough recoveries to compact the list of unhealthy members
			}
			flip := make([]time.Duration, n) // each target flips health every flip[id]
			for i := range flip {
				flip[i] = time.Duration(2+rng.IntN(9)) * sec
			}
			checks := []scheduler.Check{{Timing: scheduler.Timing{Interval: sec, Timeout: sec, Rise: 1, Fall: 1}}}
			targets := make([]scheduler.TargetSpec, n)
			for i := range targets {
				targets[i].Leader = uint32(i)
			}
			s := newSim(t, checks, targets, 3)
			s.behave = func(req probe.Request) answer {
				if (time.Duration(req.Sent)/flip[req.ID])%2 == 1 {
					return answer{outcome: probe.Timeout, silent: true}
				}
				return answer{outcome: probe.Success, after: time.Duration(1+req.ID%5) * time.Millisecond}
			}
			var pools []*Pool
			for pi := range 3 {
				p := &Pool{Name: fmt.Sprint(pi), Policy: PoolPolicy{MaxUnhealthyPercent: 1 + rng.IntN(100), FailOpen: rng.IntN(2) == 0}}
				for id := range uint32(n) {
					if rng.IntN(3) > 0 {
						p.Members = append(p.Members, id)
						if rng.IntN(8) == 0 {
							p.Disabled = append(p.Disabled, id)
						}
					}
				}
				pools = append(pools, p)
			}
			s.route(pools, RouterOptions{RingSize: 1 << rng.IntN(6)})
			s.routeByHand = true
			for range 60 {
				s.runFor(sec)
				s.router.Step(s.clock.Nanotime())
				for pi, p := range pools {
					want, wantSum := reference(s.eng, p)
					got := map[uint32]Route{}
					for m, id := range p.Members {
						got[id], _ = s.router.Route(pi, m)
					}
					if diff := gocmp.Diff(want, got); diff != "" {
						t.Fatalf("pool %d at %v: routes (-reference +router):\n%s", pi, time.Duration(s.clock.Nanotime()), diff)
					}
					sum := s.router.Summary(pi)
					sum.Preferred = 0
					if sum != wantSum {
						t.Fatalf("pool %d: summary %+v, reference %+v", pi, sum, wantSum)
					}
				}
			}
			for pi := range pools {
				checkReplay(t, s, pi)
			}
		})
	}
}

// TestRouterPreferred is E7 through events: the preferred set is ranked a
// RankDelay after the healthy set changes, and again as latency drifts.
func TestRouterPreferred(t *testing.T) {
	t.Parallel()
	lat := map[uint32]time.Duration{0: 30 * time.Millisecond, 1: 10 * time.Millisecond, 2: 14 * time.Millisecond, 3: 12 * time.Millisecond}
	checks := []scheduler.Check{{Timing: scheduler.Timing{Interval: sec, Timeout: sec, Rise: 1, Fall: 1}}}
	targets := []scheduler.TargetSpec{{Leader: 0}, {Leader: 1}, {Leader: 2}, {Leader: 3}}
	s := newSim(t, checks, targets, 1)
	s.behave = func(req probe.Request) answer {
		if req.ID == 3 && req.Sent > int64(20*sec) {
			return answer{outcome: probe.Success, after: 40 * time.Millisecond}
		}
		return answer{outcome: probe.Success, after: lat[req.ID]}
	}
	p := &Pool{Policy: PoolPolicy{MaxUnhealthyPercent: 100, LatencyMargin: 3 * time.Millisecond}, Members: []uint32{0, 1, 2, 3}}
	s.route([]*Pool{p}, RouterOptions{RankDelay: 2 * sec, RankEvery: 5 * sec})
	s.runFor(10 * sec)
	preferred := func() string {
		var b []string
		for _, ev := range s.routes {
			if ev.Kind == PreferredChanged {
				b = append(b, fmt.Sprintf("%d:%v(%v)", ev.Target, ev.On, ev.Cause))
			}
		}
		return strings.Join(b, " ")
	}
	if got, want := preferred(), "1:true(latency) 3:true(latency)"; got != want {
		t.Fatalf("preferred events after start: %s, want %s", got, want)
	}
	s.runFor(30 * sec) // 3 slows down after 20 s: it leaves the set at a periodic ranking
	if got, want := preferred(), "1:true(latency) 3:true(latency) 3:false(latency)"; got != want {
		t.Fatalf("preferred events after drift: %s, want %s", got, want)
	}
	if sum := s.router.Summary(0); sum.Preferred != 1 {
		t.Fatalf("summary %+v, want 1 preferred", sum)
	}
	checkReplay(t, s, 0)
}

// TestRouterNotifyAllocations proves a state change costs a shard no
// allocation: Notify only pushes an id.
func TestRouterNotifyAllocations(t *testing.T) {
	s, _ := routeSim(t, 4, PoolPolicy{MaxUnhealthyPercent: 100}, func(uint32, time.Duration) bool { return false }, RouterOptions{RingSize: 1 << 12})
	allocs := testing.AllocsPerRun(1000, func() { s.router.Notify(1) })
	if allocs != 0 {
		t.Fatalf("Notify: %v allocations, want 0", allocs)
	}
}

// TestRouterUnprobed: the members of a pool with health checks off stay
// routed whatever their states do, and no event is reported for them.
func TestRouterUnprobed(t *testing.T) {
	t.Parallel()
	checks := []scheduler.Check{{Timing: scheduler.Timing{Interval: sec, Timeout: sec, Rise: 1, Fall: 1}}}
	targets := []scheduler.TargetSpec{{Leader: 0}, {Leader: 1}}
	s := newSim(t, checks, targets, 1)
	s.behave = func(req probe.Request) answer {
		if req.ID == 0 && req.Sent > int64(3*sec) {
			return answer{outcome: probe.Refused, after: time.Millisecond}
		}
		return answer{outcome: probe.Success, after: time.Millisecond}
	}
	p := &Pool{Policy: PoolPolicy{MaxUnhealthyPercent: 100}, Members: []uint32{0, 1}, Unprobed: true}
	s.route([]*Pool{p}, RouterOptions{})
	s.runFor(10 * sec)
	if len(s.events) == 0 || len(s.routes) != 0 {
		t.Fatalf("%d state changes, %d route events; want some and none", len(s.events), len(s.routes))
	}
	if sum := s.router.Summary(0); sum != (PoolSummary{Members: 2, Unprobed: 2, Routable: 2}) {
		t.Fatalf("summary %+v", sum)
	}
}

// splitPool is a pool of n targets and its split into slices, as shards
// split it (docs/operations.md, "Pools split across shards"): each slice is a pool of
// its own with the same policy, as a shard's router sees its part. Every
// slice has a member; disabled members are disabled in their slice too.
func splitPool(rng *rand.Rand, n, parts int, policy PoolPolicy) []*Pool {
	whole := &Pool{Name: "whole", Policy: policy}
	pools := []*Pool{whole}
	for i := range parts {
		pools = append(pools, &Pool{Name: fmt.Sprint("slice", i), Policy: policy})
	}
	for id := range uint32(n) {
		sl := pools[1+int(id)%parts]
		if int(id) >= parts {
			sl = pools[1+rng.IntN(parts)]
		}
		whole.Members = append(whole.Members, id)
		sl.Members = append(sl.Members, id)
		if rng.IntN(8) == 0 {
			whole.Disabled = append(whole.Disabled, id)
			sl.Disabled = append(sl.Disabled, id)
		}
	}
	return pools
}

// TestRouterSplitPool checks the promises of docs/operations.md for a pool split
// across shards, each applying the pool's policy to its slice: together
// the slices never remove more than the pool's cap (nor more than the
// whole pool removes), and the union of their preferred sets contains the
// pool's. A shard's router decides its slice as a router over a pool of
// the slice's members does, so here the slices are pools of one router,
// beside the whole pool, over the same states: targets flap for a minute,
// then keep their health and a latency of their own while the rankings
// catch up.
func TestRouterSplitPool(t *testing.T) {
	t.Parallel()
	removals := 0 // over every seed: the cap check must have had work
	for seed := range uint64(16) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 14))
			n := 3 + rng.IntN(60)
			parts := 2 + rng.IntN(min(4, n-1))
			policy := PoolPolicy{MaxUnhealthyPercent: 1 + rng.IntN(100), FailOpen: rng.IntN(2) == 0,
				LatencyMargin: time.Duration(rng.IntN(15)) * time.Millisecond}
			const settle = 60 * sec
			flip := make([]time.Duration, n) // before settle, each target flips health every flip[id]
			sick := make([]bool, n)          // after settle, these stay unhealthy
			lat := make([]time.Duration, n)
			for i := range n {
				flip[i] = time.Duration(2+rng.IntN(9)) * sec
				sick[i] = rng.IntN(3) == 0
				lat[i] = time.Duration(1+rng.IntN(30)) * time.Millisecond
			}
			checks := []scheduler.Check{{Timing: scheduler.Timing{Interval: sec, Timeout: sec, Rise: 1, Fall: 1}}}
			targets := make([]scheduler.TargetSpec, n)
			for i := range targets {
				targets[i].Leader = uint32(i)
			}
			s := newSim(t, checks, targets, 2)
			s.behave = func(req probe.Request) answer {
				at := time.Duration(req.Sent)
				if at < settle && (at/flip[req.ID])%2 == 1 || at >= settle && sick[req.ID] {
					return answer{outcome: probe.Refused, after: time.Millisecond}
				}
				return answer{outcome: probe.Success, after: lat[req.ID]}
			}
			pools := splitPool(rng, n, parts, policy)
			whole := pools[0]
			s.route(pools, RouterOptions{RankDelay: sec, RankEvery: 5 * sec})
			s.routeByHand = true
			poolCap := (len(whole.Members) - len(whole.Disabled)) * policy.MaxUnhealthyPercent / 100
			for range 90 {
				s.runFor(sec)
				s.router.Step(s.clock.Nanotime())
				w := s.router.Summary(0)
				removed := 0
				for pi := 1; pi < len(pools); pi++ {
					removed += s.router.Summary(pi).Removed
				}
				if removed > poolCap || removed > w.Removed {
					t.Fatalf("at %v the %d slices remove %d targets; the pool's cap is %d (%d %%), the whole pool removes %d",
						time.Duration(s.clock.Nanotime()), parts, removed, poolCap, policy.MaxUnhealthyPercent, w.Removed)
				}
				removals += removed
			}
			preferred := func(pi int) map[uint32]bool {
				set := map[uint32]bool{}
				for m, id := range pools[pi].Members {
					if _, pref := s.router.Route(pi, m); pref {
						set[id] = true
					}
				}
				return set
			}
			union := map[uint32]bool{}
			for pi := 1; pi < len(pools); pi++ {
				maps.Copy(union, preferred(pi))
			}
			want := preferred(0)
			if len(want) == 0 && s.router.Summary(0).Healthy > 0 {
				t.Fatalf("the whole pool has healthy targets and prefers none: %+v", s.router.Summary(0))
			}
			for id := range want {
				if !union[id] {
					t.Errorf("target %d (latency %v) is preferred in the whole pool (margin %v) but in no slice", id, lat[id], policy.LatencyMargin)
				}
			}
		})
	}
	if removals == 0 {
		t.Fatal("no slice removed a target in any run: the cap was never tested")
	}
}

// TestRouterSmallSlice: a slice too small for the cap removes nothing. Of a
// pool of 4 at 50 %, the 2 unhealthy targets are removed; split 3 + 1,
// the slice of 3 removes 1 (floor 1.5) and the slice of 1, whose cap
// rounds down to 0, keeps its unhealthy target in rotation.
func TestRouterSmallSlice(t *testing.T) {
	t.Parallel()
	checks := []scheduler.Check{{Timing: scheduler.Timing{Interval: sec, Timeout: sec, Rise: 1, Fall: 1}}}
	targets := []scheduler.TargetSpec{{Leader: 0}, {Leader: 1}, {Leader: 2}, {Leader: 3}}
	s := newSim(t, checks, targets, 1)
	s.behave = func(req probe.Request) answer {
		if req.ID >= 2 {
			return answer{outcome: probe.Refused, after: time.Millisecond}
		}
		return answer{outcome: probe.Success, after: time.Millisecond}
	}
	policy := PoolPolicy{MaxUnhealthyPercent: 50}
	s.route([]*Pool{
		{Name: "whole", Policy: policy, Members: []uint32{0, 1, 2, 3}},
		{Name: "slice0", Policy: policy, Members: []uint32{0, 1, 2}},
		{Name: "slice1", Policy: policy, Members: []uint32{3}},
	}, RouterOptions{})
	s.runFor(10 * sec)
	var got []int
	for pi := range 3 {
		got = append(got, s.router.Summary(pi).Removed)
	}
	if want := []int{2, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("removed by the whole pool and its slices: %v, want %v", got, want)
	}
	if sum := s.router.Summary(2); sum.Unhealthy != 1 || sum.Routable != 1 || sum.FailingOpen {
		t.Fatalf("slice of one: %+v, want its unhealthy target routable, not failing open", sum)
	}
}
