package ring

import (
	"runtime"
	"sync"
	"testing"

	"github.com/sondeprobe/sonde/probe"
)

// TestRingManyProducers pushes from several goroutines into a small ring
// (so producers wait for room) and checks that the consumer gets every result
// exactly once and in each producer's order.
func TestRingManyProducers(t *testing.T) {
	const producers, each = 4, 20000
	q := New[probe.Result](64)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				r := probe.Result{ID: uint32(p), Gen: uint32(i)}
				for !q.Push(&r) {
					runtime.Gosched()
				}
			}
		})
	}
	next := make([]uint32, producers)
	var r probe.Result
	for got := 0; got < producers*each; {
		if !q.Pop(&r) {
			continue
		}
		if r.Gen != next[r.ID] {
			t.Fatalf("producer %d: got gen %d, want %d", r.ID, r.Gen, next[r.ID])
		}
		next[r.ID]++
		got++
	}
	wg.Wait()
	if !q.Empty() {
		t.Fatal("ring not empty after all results were taken")
	}
}

func TestRingSizeRoundsUp(t *testing.T) {
	t.Parallel()
	if q := New[probe.Result](1000); len(q.slots) != 1024 {
		t.Fatalf("ring of 1000 has %d slots, want 1024", len(q.slots))
	}
}
