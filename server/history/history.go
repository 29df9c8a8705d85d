package history

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/server/web/api"
)

const (
	// defaultHistoryTargets and defaultHistoryResults are the budget:
	// 1,024 rings of 240 results, at most 6 MiB.
	defaultHistoryTargets = 1024
	defaultHistoryResults = 240
	// historyKeep is how long a ring stays with a target after its last
	// failure or view, against failing targets that want one.
	historyKeep = 10 * time.Minute
	// historyScan bounds the rings a failing target looks at for one it
	// may take; historyBackoff is how long failing targets stop looking
	// after a search found none.
	historyScan    = 64
	historyBackoff = time.Second
)

// History holds the rings. Claims and releases take mu; recording and
// reading take no lock (see histEntry). It is safe for concurrent use.
type History struct {
	slots   []histSlot
	results int // entries per ring

	mu      sync.Mutex
	free    []int32 // free slot indexes, guarded by mu
	hand    int     // next slot an eviction scan looks at, guarded by mu
	epoch   uint32  // owners so far, guarded by mu
	current *Index  // the running generation's index, guarded by mu

	nfree         atomic.Int32
	noVictimUntil atomic.Int64 // Nanotime before which failing targets do not search
}

// histSlot is one ring and the target it belongs to.
type histSlot struct {
	// owner is epoch<<32 | id+1 of the target the ring records, 0 while
	// free. Written under history.mu; ring is set before the first owner.
	owner atomic.Uint64
	head  atomic.Uint64 // results written into the ring, all owners together
	keep  atomic.Int64  // Nanotime until which a failing target may not take the ring
	ring  []histEntry
}

// histEntry is one result. Its words are written one by one, so tag works
// as a sequence lock: the writer clears it, writes the others, and sets it
// to the owner's epoch and the entry's position; a reader that sees the
// same expected tag before and after reading the others has a whole entry.
type histEntry struct {
	tag  atomic.Uint64 // epoch<<40 | position+1; 0 while being written
	at   atomic.Int64  // Nanotime the probe completed
	data atomic.Uint64 // see packHist
}

// Index maps the engine's target ids to their slot (index + 1, 0 for
// none). Ids outlive reloads, and so do the rings of the targets they keep;
// each generation still has its own copy of the index, so that a claim made
// through a generation a reload replaced is refused (see adopt), and a
// removed target, whose last results may come in after the reload, cannot
// take a ring that its id's next target would inherit.
//
// Only the targets with rings are in it: a table with open addressing of
// id+1 << 32 | slot+1, four times the rings in size, so the index costs
// nothing per target (a million targets or ten). Its entries are hints: a
// slot's owner says whose ring it is. Readers take no lock; writers hold
// history.mu. An entry of slot 0 is dead: its place is given to the next
// id that needs one.
type Index struct {
	t     atomic.Pointer[[]atomic.Uint64]
	cells int // entries in use (live or dead), guarded by history.mu
}

// MaxTargets is the most targets that keep recent results for the
// status page (the daemon's HistoryTargets): a ring's slot + 1 fits in 16 bits.
const MaxTargets = 1<<16 - 1

// NewIndex returns an empty index for a history of rings rings.
func NewIndex(rings int) *Index {
	ix := &Index{}
	ix.t.Store(newHistTable(rings))
	return ix
}

func newHistTable(rings int) *[]atomic.Uint64 {
	n := 64
	for n < 4*rings {
		n *= 2
	}
	t := make([]atomic.Uint64, n)
	return &t
}

// home is where id's search starts in a table of mask+1 entries.
func home(id uint32, mask uint32) uint32 { return (id * 0x9e3779b1) >> 8 & mask }

// load returns id's slot + 1, 0 for none.
func (ix *Index) load(id uint32) int32 {
	t := *ix.t.Load()
	mask := uint32(len(t) - 1)
	for i, n := home(id, mask), 0; n < len(t); i, n = (i+1)&mask, n+1 {
		e := t[i].Load()
		switch {
		case e == 0:
			return 0
		case uint32(e>>32) == id+1:
			return int32(e & 0xffff)
		}
	}
	return 0
}

// store sets id's slot + 1 (0: none). Called with history.mu held.
func (ix *Index) store(id uint32, v int32, rings int) {
	t := *ix.t.Load()
	mask := uint32(len(t) - 1)
	dead := -1
	for i, n := home(id, mask), 0; n < len(t); i, n = (i+1)&mask, n+1 {
		e := t[i].Load()
		switch {
		case e == 0:
			if v == 0 {
				return
			}
			if dead < 0 {
				dead = int(i)
				ix.cells++
			}
			t[dead].Store(uint64(id+1)<<32 | uint64(v))
			ix.compact(rings)
			return
		case uint32(e>>32) == id+1:
			t[i].Store(uint64(id+1)<<32 | uint64(v))
			return
		case e&0xffff == 0 && dead < 0:
			dead = int(i)
		}
	}
	if v != 0 && dead >= 0 {
		t[dead].Store(uint64(id+1)<<32 | uint64(v))
	}
}

// compact copies the live entries into a new table when the entries in
// use (live or dead) fill half of it: live ones are at most a quarter, so
// searches, misses above all (most targets have no ring), stay short.
func (ix *Index) compact(rings int) {
	t := *ix.t.Load()
	if ix.cells*2 < len(t) {
		return
	}
	nt := newHistTable(rings)
	ix.cells = 0
	mask := uint32(len(*nt) - 1)
	for i := range t {
		e := t[i].Load()
		if e == 0 || e&0xffff == 0 {
			continue
		}
		j := home(uint32(e>>32)-1, mask)
		for (*nt)[j].Load() != 0 {
			j = (j + 1) & mask
		}
		(*nt)[j].Store(e)
		ix.cells++
	}
	ix.t.Store(nt)
}

// each calls fn with every id that has a slot, and the slot + 1.
func (ix *Index) each(fn func(id uint32, v int32)) {
	t := *ix.t.Load()
	for i := range t {
		if e := t[i].Load(); e != 0 && e&0xffff != 0 {
			fn(uint32(e>>32)-1, int32(e&0xffff))
		}
	}
}

// New returns a history of targets rings of results entries each (0: the
// defaults, 1,024 rings of 240).
func New(targets, results int) *History {
	if targets <= 0 {
		targets = defaultHistoryTargets
	}
	targets = min(targets, MaxTargets)
	if results <= 0 {
		results = defaultHistoryResults
	}
	h := &History{slots: make([]histSlot, targets), results: results, free: make([]int32, targets)}
	for i := range h.free {
		h.free[i] = int32(targets - 1 - i) // slot 0 is handed out first
	}
	h.nfree.Store(int32(targets))
	return h
}

// Bit layout of histEntry.data.
const (
	histLatencyBits = 32 // µs
	histStatusShift = 32 // 16 bits
	histOutcomeShft = 48 // 7 bits
	histPassiveBit  = 1 << 55
	histStateShift  = 56 // 8 bits
)

func packHist(r *probe.Result, state scheduler.State) uint64 {
	us := uint64(r.Latency / time.Microsecond)
	if us >= 1<<histLatencyBits {
		us = 1<<histLatencyBits - 1
	}
	data := us | uint64(r.Status)<<histStatusShift | uint64(r.Outcome)<<histOutcomeShft | uint64(state)<<histStateShift
	if r.Passive {
		data |= histPassiveBit
	}
	return data
}

func tagOf(owner, pos uint64) uint64 { return owner>>32<<40 | (pos+1)&(1<<40-1) }

// Record keeps result r of target id with its state after it (read from e),
// when the target has a ring or may take one. It runs on the shard that
// owns id, after the shard applied r, or, for a mark of passive evidence,
// on the passive observer's reader: writers take their positions from
// one atomic counter, so two never write one entry.
func (h *History) Record(ix *Index, id uint32, r *probe.Result, e *scheduler.Engine) {
	s := ix.load(id)
	failed := r.Outcome != probe.Success
	if s == 0 {
		if h.nfree.Load() == 0 && (!failed || r.Done < h.noVictimUntil.Load()) {
			return
		}
		if s = h.claim(ix, id, r.Done, false); s == 0 {
			return
		}
	}
	sl := &h.slots[s-1]
	own := sl.owner.Load()
	if uint32(own) != id+1 { // taken by another target: a stale hint, cleared by the next claim
		return
	}
	if failed {
		if keep := r.Done + int64(historyKeep); sl.keep.Load() < keep {
			sl.keep.Store(keep)
		}
	}
	pos := sl.head.Add(1) - 1
	data := packHist(r, e.Status(id).State)
	en := &sl.ring[pos%uint64(len(sl.ring))]
	en.tag.Store(0)
	en.at.Store(r.Done)
	en.data.Store(data)
	en.tag.Store(tagOf(own, pos))
}

// View marks target id as looked at, at Nanotime now: it gets a ring if it
// has none, and keeps it for historyKeep. It reports whether the target
// had one before.
func (h *History) View(ix *Index, id uint32, now int64) bool {
	if s := ix.load(id); s != 0 {
		sl := &h.slots[s-1]
		if uint32(sl.owner.Load()) == id+1 {
			if keep := now + int64(historyKeep); sl.keep.Load() < keep {
				sl.keep.Store(keep)
			}
			return true
		}
	}
	h.claim(ix, id, now, true)
	return false
}

// claim gives target id a ring and returns its slot + 1, or 0 when it gets
// none. A claim for a probe result (viewed false) never waits for the
// mutex, takes a free ring or one not kept past now, and looks at no more
// than historyScan rings; a claim for a view takes a free ring or the one
// kept the shortest.
func (h *History) claim(ix *Index, id uint32, now int64, viewed bool) int32 {
	if viewed {
		h.mu.Lock()
	} else if !h.mu.TryLock() {
		return 0
	}
	defer h.mu.Unlock()
	if ix != h.current {
		return 0 // a reload replaced the index
	}
	if s := ix.load(id); s != 0 && uint32(h.slots[s-1].owner.Load()) == id+1 {
		return s
	}
	si := int32(-1)
	switch {
	case len(h.free) > 0:
		si = h.free[len(h.free)-1]
		h.free = h.free[:len(h.free)-1]
		h.nfree.Add(-1)
	case viewed:
		for i := range h.slots {
			if si < 0 || h.slots[i].keep.Load() < h.slots[si].keep.Load() {
				si = int32(i)
			}
		}
	default:
		for range min(historyScan, len(h.slots)) {
			i := h.hand
			h.hand = (h.hand + 1) % len(h.slots)
			if h.slots[i].keep.Load() < now {
				si = int32(i)
				break
			}
		}
		if si < 0 {
			h.noVictimUntil.Store(now + int64(historyBackoff))
			return 0
		}
	}
	sl := &h.slots[si]
	if old := sl.owner.Load(); old != 0 {
		ix.store(uint32(old)-1, 0, len(h.slots))
	}
	if sl.ring == nil {
		sl.ring = make([]histEntry, h.results)
	}
	keep := int64(0)
	if viewed {
		keep = now + int64(historyKeep)
	}
	sl.keep.Store(keep)
	h.epoch++
	sl.owner.Store(uint64(h.epoch)<<32 | uint64(id+1))
	ix.store(id, si+1, len(h.slots))
	return si + 1
}

// Read appends the results kept for target id to buf, oldest first.
func (h *History) Read(ix *Index, id uint32, buf []Sample) []Sample {
	s := ix.load(id)
	if s == 0 {
		return buf
	}
	sl := &h.slots[s-1]
	own := sl.owner.Load()
	if uint32(own) != id+1 {
		return buf
	}
	head := sl.head.Load()
	n := uint64(len(sl.ring))
	for pos := head - min(head, n); pos < head; pos++ {
		e := &sl.ring[pos%n]
		want := tagOf(own, pos)
		if e.tag.Load() != want {
			continue
		}
		at, data := e.at.Load(), e.data.Load()
		if e.tag.Load() != want {
			continue
		}
		buf = append(buf, Sample{at: at, data: data})
	}
	return buf
}

// Results returns the entries of a ring: the most results a target keeps.
func (h *History) Results() int { return h.results }

// Rings returns the number of rings: the most targets that keep results.
func (h *History) Rings() int { return len(h.slots) }

// Owns reports whether some ring belongs to target id.
func (h *History) Owns(id uint32) bool {
	for i := range h.slots {
		if own := h.slots[i].owner.Load(); own != 0 && uint32(own) == id+1 {
			return true
		}
	}
	return false
}

// Sample is an entry as [History.Read] reads it.
type Sample struct {
	at   int64
	data uint64
}

// Result decodes the entry, with times on clock.
func (r Sample) Result(clock scheduler.Clock) api.HistoryResult {
	o := probe.Outcome(r.data >> histOutcomeShft & 0x7f)
	return api.HistoryResult{
		Time:           scheduler.WallTime(clock, r.at),
		Outcome:        o.String(),
		Status:         int(uint16(r.data >> histStatusShift)),
		LatencySeconds: (time.Duration(r.data&(1<<histLatencyBits-1)) * time.Microsecond).Seconds(),
		State:          scheduler.State(r.data >> histStateShift & 0xff).String(),
		Passive:        r.data&histPassiveBit != 0,
	}
}

// Adopt makes ix, a new generation's index, the one rings are claimed for.
// old is the running generation's index (nil at the first load); removed
// are the engine ids the new generation no longer has. Every other target
// keeps its ring at its id; the rings of removed targets are freed, before
// the engine may give their ids to new targets. It runs before the new
// generation is published.
func (h *History) Adopt(old, ix *Index, removed []uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if old != nil {
		old.each(func(id uint32, v int32) { ix.store(id, v, len(h.slots)) })
		for _, id := range removed {
			ix.store(id, 0, len(h.slots)) // a short probe for the many without a ring
		}
	}
	// Free every ring the new index does not point to: those of removed
	// targets, and any whose owner lost it meanwhile.
	for i := range h.slots {
		sl := &h.slots[i]
		own := sl.owner.Load()
		if own == 0 {
			continue
		}
		if id := uint32(own) - 1; ix.load(id) == int32(i)+1 {
			continue
		}
		sl.owner.Store(0)
		sl.keep.Store(0)
		h.free = append(h.free, int32(i))
		h.nfree.Add(1)
	}
	h.noVictimUntil.Store(0)
	h.current = ix
}
