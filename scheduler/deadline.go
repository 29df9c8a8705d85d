package scheduler

// deadlineQueue holds the in-flight probes of every check with one timeout
// and one retransmission timeout. Probes enter in send order and all wait
// the same time, so their deadlines leave in the same order: a FIFO does the
// work of a timer per probe. Their retransmissions come due in the same
// order too, so each retransmission stage is a cursor walking the same FIFO
// behind the time (see [shard.retransmit]). An answered probe's entry is
// struck out in place (its position is in the target's record), so neither
// expiring nor retransmitting touches the records of probes that were
// answered. It is owned by its shard.
type deadlineQueue struct {
	timeout int64 // ns
	head    uint64
	tail    uint64
	buf     []deadlineEntry // power-of-two ring; position p lives at buf[p&mask]

	// stages are the retransmissions of a probe, as offsets from its send
	// (ns): rto, 3·rto, 7·rto, … — each wait twice the one before, as a
	// kernel's SYN retransmissions — for every offset before the timeout.
	stages []int64
	// cursor[j] is the position of the first probe whose retransmission
	// j+1 has not been considered yet.
	cursor []uint64
}

// newDeadlineQueue returns the empty queue of probes that share k.
func newDeadlineQueue(k queueKey) deadlineQueue {
	q := deadlineQueue{timeout: k.timeout}
	if k.rto > 0 {
		for off, wait := k.rto, k.rto; off < k.timeout; wait, off = 2*wait, off+2*wait {
			q.stages = append(q.stages, off)
		}
		q.cursor = make([]uint64, len(q.stages))
	}
	return q
}

type deadlineEntry struct {
	idx uint32 // shard-local target index, noEntry when struck out
	gen uint32 // the probe's generation
}

// push enqueues target idx's probe gen and returns its position.
func (q *deadlineQueue) push(idx, gen uint32) uint64 {
	if q.tail-q.head == uint64(len(q.buf)) {
		q.grow()
	}
	p := q.tail
	q.buf[p&uint64(len(q.buf)-1)] = deadlineEntry{idx: idx, gen: gen}
	q.tail++
	return p
}

// grow doubles the ring, keeping every entry at its position.
func (q *deadlineQueue) grow() {
	n := max(2*len(q.buf), 1024)
	buf := make([]deadlineEntry, n)
	for p := q.head; p != q.tail; p++ {
		buf[p&uint64(n-1)] = q.buf[p&uint64(len(q.buf)-1)]
	}
	q.buf = buf
}

// strike removes the entry at position p if it still holds idx's probe gen.
// p carries only its low 32 bits; fewer than 2^32 probes are ever in flight.
func (q *deadlineQueue) strike(p32, idx, gen uint32) {
	p := q.tail - uint64(uint32(q.tail)-p32)
	if p < q.head || p >= q.tail {
		return
	}
	e := &q.buf[p&uint64(len(q.buf)-1)]
	if e.idx == idx && e.gen == gen {
		e.idx = noEntry
	}
}

// front returns the oldest entry that is not struck out, dropping struck-out
// ones on the way, and whether there is one.
func (q *deadlineQueue) front() (deadlineEntry, bool) {
	for q.head != q.tail {
		e := q.buf[q.head&uint64(len(q.buf)-1)]
		if e.idx != noEntry {
			return e, true
		}
		q.head++
	}
	return deadlineEntry{}, false
}

// pop drops the oldest entry.
func (q *deadlineQueue) pop() { q.head++ }
