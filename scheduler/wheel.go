package scheduler

import "math/bits"

// Timing-wheel geometry: wheelLevels levels of wheelSlots slots each. With a
// 1 ms tick, level 0 spans 256 ms, level 1 65 s, level 2 4.6 h and level 3
// 49 days.
const (
	wheelBits   = 8
	wheelSlots  = 1 << wheelBits
	wheelMask   = wheelSlots - 1
	wheelLevels = 4
	noEntry     = ^uint32(0)
)

// maxSpan is the farthest ahead, in ticks, a timer can be set: timers keep
// only the low 32 bits of their due tick, and a cascade recovers the rest from
// the current tick. The engine's limits (no delay above a day, ticks of at
// least a millisecond) stay far below it.
const maxSpan = 1<<31 - 1

// timer is one entry in the wheel: target idx is due at tick due (low 32
// bits).
type timer struct {
	idx, due uint32
}

// Timers are stored in fixed-size chunks taken from a free list, so a slot
// costs nothing while empty and memory follows the number of pending timers,
// not the busiest moment of every slot.
const (
	chunkLen   = 63   // timers per chunk: 504 bytes + links, 8 cache lines
	blockLen   = 1024 // chunks allocated at once
	blockShift = 10
	noChunk    = -1
)

type chunk struct {
	t    [chunkLen]timer
	n    int32 // timers in t
	next int32 // next chunk of the slot, or of the free list; noChunk ends
}

// slotList is a slot's chain of chunks.
type slotList struct{ head, tail int32 }

// wheel is a hierarchical timing wheel. Each slot is a chain of chunks of
// timers, so expiring a slot walks memory in order and the records the timers
// point to can be fetched in parallel, which a linked list through the
// records cannot do. Setting a timer appends to a slot (O(1); chunks are
// recycled, so a warmed-up wheel allocates nothing), cascading moves timers
// down a level without touching the records. Timers cannot be cancelled: the
// shard sets one only for a target's next send, which always happens. A wheel
// is owned by one goroutine.
type wheel struct {
	// touch, if set, is called with each chunk of level-0 timers before
	// they fire, so the owner can start loading their records together
	// (memory-level parallelism) instead of one miss after another.
	touch  func(ts []timer)
	now    int64                                // current tick; every timer due at or before it has fired
	slots  [wheelLevels][wheelSlots]slotList    // pending timers per level and slot
	used   [wheelLevels][wheelSlots / 64]uint64 // bitmap of non-empty slots per level
	blocks [][]chunk                            // chunk arena; chunk c is blocks[c>>blockShift][c&(blockLen-1)]
	free   int32                                // first free chunk
	size   int                                  // timers pending
}

// newWheel returns an empty wheel whose current tick is now.
func newWheel(now int64) *wheel {
	w := &wheel{now: now, free: noChunk}
	for l := range w.slots {
		for s := range w.slots[l] {
			w.slots[l][s] = slotList{head: noChunk, tail: noChunk}
		}
	}
	return w
}

func (w *wheel) chunk(c int32) *chunk { return &w.blocks[c>>blockShift][c&(blockLen-1)] }

// newChunk takes a chunk from the free list, growing the arena when it is
// empty.
func (w *wheel) newChunk() int32 {
	if w.free == noChunk {
		base := int32(len(w.blocks)) << blockShift
		block := make([]chunk, blockLen)
		for i := range block {
			block[i].next = base + int32(i) + 1
		}
		block[blockLen-1].next = noChunk
		w.blocks = append(w.blocks, block)
		w.free = base
	}
	c := w.free
	ch := w.chunk(c)
	w.free = ch.next
	ch.n, ch.next = 0, noChunk
	return c
}

// add sets a timer for idx at tick due. A timer due at or before the current
// tick fires on the next advance; one beyond maxSpan is clamped to it.
func (w *wheel) add(idx uint32, due int64) {
	due = min(max(due, w.now+1), w.now+maxSpan)
	w.file(timer{idx: idx, due: uint32(due)}, due)
}

// file puts t into the slot for tick due ≥ now. Only a cascade files a timer
// at the current tick, into the level-0 slot that fires next.
func (w *wheel) file(t timer, due int64) {
	delta := due - w.now
	l := 0
	for l < wheelLevels-1 && delta >= 1<<(wheelBits*(l+1)) {
		l++
	}
	s := int(due>>(wheelBits*l)) & wheelMask
	sl := &w.slots[l][s]
	if sl.tail == noChunk || w.chunk(sl.tail).n == chunkLen {
		c := w.newChunk()
		if sl.tail == noChunk {
			sl.head = c
			w.used[l][s/64] |= 1 << (s % 64)
		} else {
			w.chunk(sl.tail).next = c
		}
		sl.tail = c
	}
	ch := w.chunk(sl.tail)
	ch.t[ch.n] = t
	ch.n++
	w.size++
}

// takeSlot empties slot s of level l and calls fn for each of its timers in
// the order they were set. fn may set timers in any other slot; it never needs
// this one, because a level-0 slot being fired only takes timers a full
// rotation ahead (which go to level 1) and a cascading slot only feeds lower
// levels.
func (w *wheel) takeSlot(l, s int, fn func(t timer)) {
	sl := &w.slots[l][s]
	c := sl.head
	if c == noChunk {
		return
	}
	*sl = slotList{head: noChunk, tail: noChunk}
	w.used[l][s/64] &^= 1 << (s % 64)
	for c != noChunk {
		ch := w.chunk(c)
		w.size -= int(ch.n)
		if l == 0 && w.touch != nil {
			w.touch(ch.t[:ch.n])
		}
		for i := range ch.n {
			fn(ch.t[i])
		}
		next := ch.next
		ch.next = w.free
		w.free = c
		c = next
	}
}

// nextUsed returns the first non-empty slot at level l in [from, wheelSlots),
// or -1.
func (w *wheel) nextUsed(l, from int) int {
	for word := from / 64; word < wheelSlots/64; word++ {
		m := w.used[l][word]
		if word == from/64 {
			m &= ^uint64(0) << (from % 64)
		}
		if m != 0 {
			return word*64 + bits.TrailingZeros64(m)
		}
	}
	return -1
}

// advance moves the wheel to tick to, calling fire for every timer whose due
// tick is reached, in tick order. fire may set timers; one set at or before
// the current tick fires at the next tick.
func (w *wheel) advance(to int64, fire func(t timer)) {
	refile := func(t timer) { w.file(t, w.now+int64(int32(t.due-uint32(w.now)))) }
	for w.now < to {
		// Look for the next non-empty level-0 slot in the rest of this
		// block of wheelSlots ticks.
		cur := int(w.now & wheelMask)
		if cur < wheelMask {
			if s := w.nextUsed(0, cur+1); s >= 0 {
				t := w.now - int64(cur) + int64(s)
				if t > to {
					w.now = to
					return
				}
				w.now = t
				w.takeSlot(0, s, fire)
				continue
			}
		}
		// Nothing left in this block: step to the next block boundary,
		// cascade the higher levels into it, and fire its slot 0.
		t := w.now - int64(cur) + wheelSlots
		if t > to {
			w.now = to
			return
		}
		w.now = t
		for l := wheelLevels - 1; l >= 1; l-- {
			if t&(1<<(wheelBits*l)-1) == 0 {
				w.takeSlot(l, int(t>>(wheelBits*l))&wheelMask, refile)
			}
		}
		w.takeSlot(0, 0, fire)
	}
}

// nextDue returns the earliest tick at which advance may fire something, or
// -1 when the wheel is empty. The answer is exact for timers in level 0 and a
// lower bound (the next block boundary) for timers in higher levels.
func (w *wheel) nextDue() int64 {
	if w.size == 0 {
		return -1
	}
	cur := int(w.now & wheelMask)
	if cur < wheelMask {
		if s := w.nextUsed(0, cur+1); s >= 0 {
			return w.now - int64(cur) + int64(s)
		}
	}
	return w.now - int64(cur) + wheelSlots
}
