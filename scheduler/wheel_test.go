package scheduler

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestWheelFiresAtDueTick sets timers and advances at random and checks
// against a plain model that every timer fires exactly once, at its due tick,
// in tick order, across every level of the wheel and across a wrap of the
// 32-bit due ticks the timers keep.
func TestWheelFiresAtDueTick(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		start := int64(rng.IntN(1<<20)) + int64(seed%2)<<32 - 5000
		w := newWheel(start)
		want := map[uint32]int64{} // pending timer → due tick
		var fired []timer
		firedAt := map[uint32]int64{}
		fire := func(tm timer) {
			fired = append(fired, tm)
			firedAt[tm.idx] = w.now
		}
		var next uint32
		for step := 0; step < 3000; step++ {
			switch op := rng.IntN(10); {
			case op < 5: // set a timer at a random distance (all levels)
				idx := next
				next++
				var delta int64
				switch rng.IntN(4) {
				case 0:
					delta = 1 + rng.Int64N(255)
				case 1:
					delta = 1 + rng.Int64N(1<<16)
				case 2:
					delta = 1 + rng.Int64N(1<<26)
				default:
					delta = 1 + rng.Int64N(1<<12)
				}
				w.add(idx, w.now+delta)
				want[idx] = w.now + delta
			default: // advance
				by := rng.Int64N(300)
				if rng.IntN(3) == 0 {
					by = rng.Int64N(1 << 18)
				}
				to := w.now + by
				fired = fired[:0]
				w.advance(to, fire)
				prev := int64(-1)
				for _, tm := range fired {
					k := tm.idx
					due, ok := want[k]
					if !ok {
						t.Fatalf("seed %d: timer %+v fired but was not set, or fired twice", seed, tm)
					}
					if firedAt[k] != due {
						t.Fatalf("seed %d: timer %+v fired at tick %d, due %d", seed, tm, firedAt[k], due)
					}
					if due < prev {
						t.Fatalf("seed %d: fired out of order", seed)
					}
					prev = due
					delete(want, k)
				}
				for k, due := range want {
					if due <= to {
						t.Fatalf("seed %d: timer %+v due %d not fired by %d", seed, k, due, to)
					}
				}
				if w.size != len(want) {
					t.Fatalf("seed %d: wheel holds %d, model %d", seed, w.size, len(want))
				}
			}
		}
	}
}

// TestWheelNextDue checks that nextDue never skips past a timer and is exact
// for timers in level 0.
func TestWheelNextDue(t *testing.T) {
	t.Parallel()
	w := newWheel(1000)
	if got := w.nextDue(); got != -1 {
		t.Fatalf("empty wheel: nextDue = %d, want -1", got)
	}
	w.add(0, 1010)
	if got := w.nextDue(); got != 1010 {
		t.Fatalf("nextDue = %d, want 1010", got)
	}
	w.advance(1010, func(timer) {})
	w.add(1, 71000) // level 2
	got := w.nextDue()
	if got <= 1010 || got > 71000 {
		t.Fatalf("nextDue = %d, want a bound in (1010, 71000]", got)
	}
	// Following nextDue from tick to tick reaches the timer exactly.
	at := int64(-1)
	for w.size > 0 {
		w.advance(w.nextDue(), func(timer) { at = w.now })
	}
	if at != 71000 {
		t.Fatalf("fired at %d, want 71000", at)
	}
}

// TestWheelRefileDuringFire sets timers from inside fire, as the shard does
// when a timeout schedules the next send.
func TestWheelRefileDuringFire(t *testing.T) {
	t.Parallel()
	w := newWheel(0)
	w.add(0, 5)
	w.add(1, 5)
	var got []int64
	w.advance(1000, func(tm timer) {
		got = append(got, w.now)
		if w.now < 500 {
			w.add(tm.idx, w.now+100)
		}
	})
	want := []int64{5, 5, 105, 105, 205, 205, 305, 305, 405, 405, 505, 505}
	if !slices.Equal(got, want) {
		t.Fatalf("fired at %v, want %v", got, want)
	}
}
