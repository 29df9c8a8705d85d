package policy

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
)

func TestPolicyRemoved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                        string
		policy                      PoolPolicy
		enabled, healthy, unhealthy int
		want                        int
	}{
		// docs/semantics.md P1: 4 instances, 3 unhealthy, 50 % → 2 removed.
		{"App Service example", PoolPolicy{MaxUnhealthyPercent: 50, FailOpen: true}, 4, 1, 3, 2},
		{"higher percent removes more", PoolPolicy{MaxUnhealthyPercent: 75, FailOpen: true}, 4, 1, 3, 3},
		{"100 percent removes every unhealthy one", PoolPolicy{MaxUnhealthyPercent: 100, FailOpen: true}, 4, 1, 3, 3},
		{"P2 all unhealthy fails open", PoolPolicy{MaxUnhealthyPercent: 100, FailOpen: true}, 4, 0, 4, 0},
		{"all unhealthy without fail open", PoolPolicy{MaxUnhealthyPercent: 100}, 4, 0, 4, 4},
		{"P3 single instance under 50 %", PoolPolicy{MaxUnhealthyPercent: 50}, 1, 0, 1, 0},
		{"P3 single instance fails open", PoolPolicy{MaxUnhealthyPercent: 100, FailOpen: true}, 1, 0, 1, 0},
		{"nothing unhealthy", PoolPolicy{MaxUnhealthyPercent: 50}, 10, 10, 0, 0},
		{"cap rounds down", PoolPolicy{MaxUnhealthyPercent: 50}, 5, 0, 4, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.policy.Removed(tt.enabled, tt.healthy, tt.unhealthy); got != tt.want {
				t.Fatalf("Removed(%d, %d, %d) = %d, want %d", tt.enabled, tt.healthy, tt.unhealthy, got, tt.want)
			}
		})
	}
}

// decide returns a router's decisions for p from e's current states.
func decide(e *scheduler.Engine, p *Pool) ([]MemberRoute, PoolSummary) {
	r := NewRouter(e, []*Pool{p}, RouterOptions{RingSize: 1})
	return r.Routes(0), r.Summary(0)
}

// poolSim builds a pool of n targets whose answers follow sick: a target id in
// sick refuses from the time given, and runs it long enough to decide all.
func poolSim(t *testing.T, n int, sickFrom map[uint32]time.Duration, latency func(id uint32) time.Duration) *sim {
	t.Helper()
	checks := []scheduler.Check{{Timing: scheduler.Timing{Interval: sec, Timeout: sec, Rise: 1, Fall: 2}}}
	targets := make([]scheduler.TargetSpec, n)
	for i := range targets {
		targets[i].Leader = uint32(i)
	}
	s := newSim(t, checks, targets, 2)
	s.behave = func(req probe.Request) answer {
		if from, ok := sickFrom[req.ID]; ok && req.Sent >= int64(from) {
			return answer{outcome: probe.Refused, after: time.Millisecond}
		}
		return answer{outcome: probe.Success, after: latency(req.ID)}
	}
	s.runFor(30 * sec)
	return s
}

// TestPoolAppServiceExample is docs/semantics.md P1's example end to end: four
// instances, three unhealthy, 50 % → two removed, and the two that keep
// traffic are the healthy one and the sick one that failed last.
func TestPoolAppServiceExample(t *testing.T) {
	t.Parallel()
	sickFrom := map[uint32]time.Duration{1: 3 * sec, 2: 5 * sec, 3: 7 * sec}
	s := poolSim(t, 4, sickFrom, func(uint32) time.Duration { return time.Millisecond })
	p := &Pool{Name: "web", Policy: PoolPolicy{MaxUnhealthyPercent: 50, FailOpen: true}, Members: []uint32{0, 1, 2, 3}}
	r := NewRouter(s.eng, []*Pool{p}, RouterOptions{})
	routes, sum := r.Routes(0), r.Summary(0)
	wantSum := PoolSummary{Members: 4, Healthy: 1, Unhealthy: 3, Removed: 2, Routable: 2, Preferred: 1}
	if diff := cmp.Diff(wantSum, sum); diff != "" {
		t.Fatalf("summary (-want +got):\n%s", diff)
	}
	got := map[uint32]Route{}
	for _, r := range routes {
		got[r.ID] = r.Route
	}
	want := map[uint32]Route{0: Routed, 1: Removed, 2: Removed, 3: Routed}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("routes (-want +got):\n%s", diff)
	}
}

// TestPoolFailOpen is P2: when every instance is unhealthy none is removed,
// and normal selection resumes when one recovers.
func TestPoolFailOpen(t *testing.T) {
	t.Parallel()
	sickFrom := map[uint32]time.Duration{0: 0, 1: 0, 2: 0}
	s := poolSim(t, 3, sickFrom, func(uint32) time.Duration { return time.Millisecond })
	p := &Pool{Policy: PoolPolicy{MaxUnhealthyPercent: 100, FailOpen: true}, Members: []uint32{0, 1, 2}}
	sum := NewRouter(s.eng, []*Pool{p}, RouterOptions{}).Summary(0)
	if !sum.FailingOpen || sum.Removed != 0 || sum.Routable != 3 {
		t.Fatalf("all unhealthy: %+v, want failing open with all 3 routable", sum)
	}
	p.Policy.FailOpen = false
	if sum := NewRouter(s.eng, []*Pool{p}, RouterOptions{}).Summary(0); sum.FailingOpen || sum.Removed != 3 || sum.Routable != 0 {
		t.Fatalf("all unhealthy without fail open: %+v, want all removed", sum)
	}
}

// TestPoolDisabledAndPending checks E6 and E3: disabled members take no part
// and undecided members are pending.
func TestPoolDisabledAndPending(t *testing.T) {
	t.Parallel()
	checks := []scheduler.Check{{Timing: scheduler.Timing{Interval: sec, Timeout: sec, Rise: 3, Fall: 3}}}
	targets := []scheduler.TargetSpec{{Leader: 0}, {Leader: 1}, {Leader: 2}}
	s := newSim(t, checks, targets, 1)
	s.runFor(1500 * time.Millisecond) // one result each: still unknown with rise 3
	p := &Pool{Policy: PoolPolicy{MaxUnhealthyPercent: 50}, Members: []uint32{0, 1, 2}, Disabled: []uint32{1}}
	r := NewRouter(s.eng, []*Pool{p}, RouterOptions{})
	routes, sum := r.Routes(0), r.Summary(0)
	want := PoolSummary{Members: 3, Disabled: 1, Unknown: 2}
	if diff := cmp.Diff(want, sum); diff != "" {
		t.Fatalf("summary (-want +got):\n%s", diff)
	}
	for _, r := range routes {
		wantRoute := Pending
		if r.ID == 1 {
			wantRoute = Excluded
		}
		if r.Route != wantRoute {
			t.Fatalf("member %d: route %v, want %v", r.ID, r.Route, wantRoute)
		}
	}
}

// TestPoolLatencyRanking is E7: healthy members ranked by smoothed latency,
// preferred within the fastest plus the margin.
func TestPoolLatencyRanking(t *testing.T) {
	t.Parallel()
	lat := map[uint32]time.Duration{0: 30 * time.Millisecond, 1: 10 * time.Millisecond, 2: 14 * time.Millisecond, 3: 12 * time.Millisecond}
	s := poolSim(t, 4, nil, func(id uint32) time.Duration { return lat[id] })
	p := &Pool{Policy: PoolPolicy{MaxUnhealthyPercent: 100, LatencyMargin: 3 * time.Millisecond}, Members: []uint32{0, 1, 2, 3}}
	routes := NewRouter(s.eng, []*Pool{p}, RouterOptions{}).Routes(0)
	type rank struct {
		Rank      int
		Preferred bool
	}
	got := map[uint32]rank{}
	for _, r := range routes {
		got[r.ID] = rank{r.Rank, r.Preferred}
	}
	want := map[uint32]rank{1: {1, true}, 3: {2, true}, 2: {3, false}, 0: {4, false}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("ranks (-want +got):\n%s", diff)
	}
	if st := s.eng.Status(1); st.Smoothed != 10*time.Millisecond || st.Latency != 10*time.Millisecond {
		t.Fatalf("target 1 latency %v smoothed %v, want 10ms both", st.Latency, st.Smoothed)
	}
}

// TestPoolUnprobed checks a pool with health checks off: every enabled
// member is routed, whatever the engine knows of it, none is removed, the
// pool never fails open, and disabled members stay excluded.
func TestPoolUnprobed(t *testing.T) {
	t.Parallel()
	s := poolSim(t, 3, map[uint32]time.Duration{0: 0}, func(uint32) time.Duration { return time.Millisecond })
	p := &Pool{Policy: PoolPolicy{MaxUnhealthyPercent: 100}, Members: []uint32{0, 1, 2}, Disabled: []uint32{2}, Unprobed: true}
	routes, sum := decide(s.eng, p)
	want := PoolSummary{Members: 3, Disabled: 1, Unprobed: 2, Routable: 2}
	if diff := cmp.Diff(want, sum); diff != "" {
		t.Fatalf("summary (-want +got):\n%s", diff)
	}
	for _, r := range routes {
		wantRoute := Routed
		if r.ID == 2 {
			wantRoute = Excluded
		}
		if r.Route != wantRoute || r.Rank != 0 || r.Preferred {
			t.Fatalf("member %d: %+v, want route %v without a latency rank", r.ID, r, wantRoute)
		}
	}
}
