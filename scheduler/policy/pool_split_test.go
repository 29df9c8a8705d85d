package policy

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestPoolPolicySplit is the rule for a pool split across processes (sonde
// run -shard): each applies the policy to its own slice, knowing nothing of
// the others. Over random pools, policies and splits of targets in random
// states, it checks the promises docs/operations.md makes for that:
//
//   - counts add up: the slices' members, disabled, healthy and unhealthy
//     targets are the pool's;
//   - P1 holds for the whole pool: together the slices never take more
//     targets out of rotation than the pool's own policy would (the cap is
//     applied per slice, rounded down, so they may take fewer);
//   - P2 and P3 hold: when the pool has no healthy target every slice fails
//     open, so all stay in rotation as with the whole pool;
//   - the preferred set (E7) of the slices contains the pool's: a slice's
//     fastest target is never faster than the pool's.
func TestPoolPolicySplit(t *testing.T) {
	t.Parallel()
	const n = 48
	rng := rand.New(rand.NewPCG(14, 3))
	for _, pSick := range []float64{0, 0.2, 0.6, 1} {
		sickFrom := map[uint32]time.Duration{}
		latency := map[uint32]time.Duration{}
		for id := range uint32(n) {
			if rng.Float64() < pSick {
				sickFrom[id] = 0
			}
			latency[id] = time.Duration(1+rng.IntN(40)) * time.Millisecond
		}
		s := poolSim(t, n, sickFrom, func(id uint32) time.Duration { return latency[id] })
		for iter := range 2000 {
			whole := &Pool{Policy: PoolPolicy{
				MaxUnhealthyPercent: 1 + rng.IntN(100),
				FailOpen:            rng.IntN(2) == 0,
				LatencyMargin:       time.Duration(rng.IntN(10)) * time.Millisecond,
			}}
			k := 1 + rng.IntN(5)
			slices := make([]*Pool, k)
			for i := range slices {
				slices[i] = &Pool{Policy: whole.Policy}
			}
			for id := range uint32(n) {
				if rng.IntN(3) == 0 {
					continue
				}
				sl := slices[rng.IntN(k)]
				whole.Members = append(whole.Members, id)
				sl.Members = append(sl.Members, id)
				if rng.IntN(20) == 0 {
					whole.Disabled = append(whole.Disabled, id)
					sl.Disabled = append(sl.Disabled, id)
				}
			}
			wr, w := decide(s.eng, whole)
			var sum PoolSummary
			preferred := map[uint32]bool{}
			for i, sl := range slices {
				routes, ss := decide(s.eng, sl)
				sum.Members += ss.Members
				sum.Disabled += ss.Disabled
				sum.Healthy += ss.Healthy
				sum.Unhealthy += ss.Unhealthy
				sum.Unknown += ss.Unknown
				sum.Removed += ss.Removed
				sum.Routable += ss.Routable
				if w.FailingOpen && ss.Unhealthy > 0 && !ss.FailingOpen {
					t.Fatalf("pSick %v iter %d: the pool %+v fails open, slice %d (%+v) does not", pSick, iter, w, i, ss)
				}
				for _, m := range routes {
					preferred[m.ID] = m.Preferred
				}
			}
			if sum.Members != w.Members || sum.Disabled != w.Disabled || sum.Healthy != w.Healthy ||
				sum.Unhealthy != w.Unhealthy || sum.Unknown != w.Unknown {
				t.Fatalf("pSick %v iter %d: slices add up to %+v, the pool has %+v", pSick, iter, sum, w)
			}
			if sum.Removed > w.Removed {
				t.Fatalf("pSick %v iter %d: %d slices of %+v remove %d targets, the pool's policy %+v at most %d",
					pSick, iter, k, w, sum.Removed, whole.Policy, w.Removed)
			}
			if sum.Routable != w.Routable+w.Removed-sum.Removed {
				t.Fatalf("pSick %v iter %d: slices route %d, want the pool's %d plus the %d they did not remove",
					pSick, iter, sum.Routable, w.Routable, w.Removed-sum.Removed)
			}
			for _, m := range wr {
				if m.Preferred && !preferred[m.ID] {
					t.Fatalf("pSick %v iter %d: target %d is preferred in the pool, in no slice", pSick, iter, m.ID)
				}
			}
		}
	}
}
