package scheduler

import (
	"sync/atomic"

	"github.com/sondeprobe/sonde/probe"
)

// cacheLine pads hot atomics apart so producers and the consumer do not share
// a cache line.
type cacheLine [64]byte

// arrival is a probe result on its way to its shard, with the shard-local
// index of its target that Deliver looked up, so the shard does not look it
// up again.
type arrival struct {
	r   probe.Result
	idx uint32
}

// ring is a bounded lock-free queue of probe results with many producers
// (prober goroutines) and one consumer (the owning shard). Each slot carries a
// sequence number that tells producers and the consumer whose turn it is, so
// neither side takes a lock and nothing is allocated after construction.
type ring struct {
	_     cacheLine
	tail  atomic.Uint64 // next position producers claim
	_     cacheLine
	head  uint64 // next position the consumer reads; consumer-owned
	_     cacheLine
	mask  uint64
	slots []ringSlot
}

type ringSlot struct {
	seq atomic.Uint64 // == position when free for the producer of position, position+1 when full
	a   arrival
}

// newRing returns a ring with room for size results; size is rounded up to a
// power of two.
func newRing(size int) *ring {
	n := 1
	for n < size {
		n <<= 1
	}
	r := &ring{mask: uint64(n - 1), slots: make([]ringSlot, n)}
	for i := range r.slots {
		r.slots[i].seq.Store(uint64(i))
	}
	return r
}

// push appends res, for the target at local index idx, and reports whether
// there was room. Producers never wait
// on each other for long: a failed compare-and-swap means another producer
// made progress.
func (q *ring) push(res *probe.Result, idx uint32) bool {
	for {
		pos := q.tail.Load()
		s := &q.slots[pos&q.mask]
		seq := s.seq.Load()
		switch d := int64(seq - pos); {
		case d == 0:
			if q.tail.CompareAndSwap(pos, pos+1) {
				s.a = arrival{r: *res, idx: idx}
				s.seq.Store(pos + 1)
				return true
			}
		case d < 0: // full: the consumer has not freed this slot yet
			return false
		}
	}
}

// pop removes the oldest arrival into a. It reports false when the ring is
// empty. Only the consumer calls it.
func (q *ring) pop(a *arrival) bool {
	s := &q.slots[q.head&q.mask]
	if s.seq.Load() != q.head+1 {
		return false
	}
	*a = s.a
	s.seq.Store(q.head + q.mask + 1)
	q.head++
	return true
}

// empty reports whether the consumer would find nothing. Only the consumer
// calls it.
func (q *ring) empty() bool {
	return q.slots[q.head&q.mask].seq.Load() != q.head+1
}
