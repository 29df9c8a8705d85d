package policy

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestRanksMatchRoutes checks over random pools that the ranks Ranks gives
// by position are exactly those Routes computes.
func TestRanksMatchRoutes(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 40 {
		n := 1 + rng.IntN(200)
		sickFrom := map[uint32]time.Duration{}
		for id := range n {
			switch rng.IntN(4) {
			case 0:
				sickFrom[uint32(id)] = time.Duration(rng.IntN(20)) * sec
			case 1:
				sickFrom[uint32(id)] = 0
			}
		}
		lat := make([]time.Duration, n)
		for i := range lat {
			lat[i] = time.Duration(rng.IntN(5)) * time.Millisecond // ties and zero latencies
		}
		s := poolSim(t, n, sickFrom, func(id uint32) time.Duration { return lat[id] })
		p := &Pool{Policy: PoolPolicy{
			MaxUnhealthyPercent: 1 + rng.IntN(100),
			FailOpen:            rng.IntN(2) == 0,
			LatencyMargin:       time.Duration(rng.IntN(3)) * time.Millisecond,
		}, Unprobed: rng.IntN(8) == 0}
		for id := range n {
			if rng.IntN(3) > 0 { // a subset of the targets, in id order
				p.Members = append(p.Members, uint32(id))
				if rng.IntN(8) == 0 {
					p.Disabled = append(p.Disabled, uint32(id))
				}
			}
		}
		r := NewRouter(s.eng, []*Pool{p}, RouterOptions{})
		var want []uint32
		for _, m := range r.Routes(0) {
			want = append(want, uint32(m.Rank))
		}
		if diff := cmp.Diff(want, r.Ranks(0), cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round %d: ranks (-Routes +Ranks):\n%s", round, diff)
		}
	}
}

// TestPoolPositionAndEachFrom checks resuming a listing after an id.
func TestPoolPositionAndEachFrom(t *testing.T) {
	t.Parallel()
	p := &Pool{Members: []uint32{2, 4, 6, 8, 10}, Disabled: []uint32{4, 10}}
	for _, tt := range []struct {
		after uint32
		want  []uint32
		dis   []bool
	}{
		{0, []uint32{2, 4, 6, 8, 10}, []bool{false, true, false, false, true}},
		{4, []uint32{6, 8, 10}, []bool{false, false, true}},
		{5, []uint32{6, 8, 10}, []bool{false, false, true}},
		{8, []uint32{10}, []bool{true}},
		{10, nil, nil},
	} {
		var ids []uint32
		var dis []bool
		p.EachFrom(p.Position(tt.after), func(_ int, id uint32, disabled bool) bool {
			ids, dis = append(ids, id), append(dis, disabled)
			return true
		})
		if diff := cmp.Diff(tt.want, ids); diff != "" {
			t.Errorf("after %d: ids (-want +got):\n%s", tt.after, diff)
		}
		if diff := cmp.Diff(tt.dis, dis); diff != "" {
			t.Errorf("after %d: disabled (-want +got):\n%s", tt.after, diff)
		}
	}
	n := 0
	p.EachFrom(1, func(int, uint32, bool) bool { n++; return n < 2 })
	if n != 2 {
		t.Errorf("EachFrom went on after fn returned false: %d calls", n)
	}
}
