// Package ring is the bounded lock-free queue of the scheduler's packages:
// many producers, one consumer, nothing allocated after construction.
package ring

import (
	"sync/atomic"
)

// cacheLine pads hot atomics apart so producers and the consumer do not share
// a cache line.
type cacheLine [64]byte

// Ring is a bounded lock-free queue with many producers and one consumer:
// probe results from prober goroutines to the owning shard, and state-change
// notices from shards to the pool policy's router. Each slot carries a
// sequence number that tells producers and the consumer whose turn it is, so
// neither side takes a lock and nothing is allocated after construction.
type Ring[T any] struct {
	_     cacheLine
	tail  atomic.Uint64 // next position producers claim
	_     cacheLine
	head  uint64 // next position the consumer reads; consumer-owned
	_     cacheLine
	mask  uint64
	slots []ringSlot[T]
}

type ringSlot[T any] struct {
	seq atomic.Uint64 // == position when free for the producer of position, position+1 when full
	r   T
}

// New returns a ring with room for size items; size is rounded up to a
// power of two.
func New[T any](size int) *Ring[T] {
	n := 1
	for n < size {
		n <<= 1
	}
	r := &Ring[T]{mask: uint64(n - 1), slots: make([]ringSlot[T], n)}
	for i := range r.slots {
		r.slots[i].seq.Store(uint64(i))
	}
	return r
}

// Push appends *res and reports whether there was room. Producers never wait
// on each other for long: a failed compare-and-swap means another producer
// made progress.
func (q *Ring[T]) Push(res *T) bool {
	for {
		pos := q.tail.Load()
		s := &q.slots[pos&q.mask]
		seq := s.seq.Load()
		switch d := int64(seq - pos); {
		case d == 0:
			if q.tail.CompareAndSwap(pos, pos+1) {
				s.r = *res
				s.seq.Store(pos + 1)
				return true
			}
		case d < 0: // full: the consumer has not freed this slot yet
			return false
		}
	}
}

// Pop removes the oldest item into res. It reports false when the ring is
// empty. Only the consumer calls it.
func (q *Ring[T]) Pop(res *T) bool {
	s := &q.slots[q.head&q.mask]
	if s.seq.Load() != q.head+1 {
		return false
	}
	*res = s.r
	s.seq.Store(q.head + q.mask + 1)
	q.head++
	return true
}

// Empty reports whether the consumer would find nothing. Only the consumer
// calls it.
func (q *Ring[T]) Empty() bool {
	return q.slots[q.head&q.mask].seq.Load() != q.head+1
}
