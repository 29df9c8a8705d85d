package scheduler

import "sync/atomic"

// Records live in fixed-size blocks that are never moved, so the tables grow
// while shards and readers use them: the shard goroutine keeps writing the
// records it owns, readers keep loading their published fields, and nothing
// is copied or locked. Only the short directory of blocks is copied when it
// grows, and published with an atomic pointer.
const (
	recShift = 10 // 1024 records, 64 KiB, a block
	recMask  = 1<<recShift - 1
)

type recBlock [1 << recShift]record

// rec returns the shard's record at local index i. Only the shard's
// goroutine calls it: it reads the shard's own copy of the directory.
func (s *shard) rec(i uint32) *record { return &s.blocks[i>>recShift][i&recMask] }

// published returns the record at local index i for a reader on any
// goroutine, or nil when i lies beyond the blocks.
func (s *shard) published(i uint32) *record {
	d := *s.dir.Load()
	if int(i>>recShift) >= len(d) {
		return nil
	}
	return &d[i>>recShift][i&recMask]
}

// reserve makes sure the shard has a record at local index i. The editor
// calls it before it hands the shard a command that uses i; the shard takes
// the new directory when it applies its commands.
func (s *shard) reserve(i uint32) {
	d := *s.dir.Load()
	if int(i>>recShift) < len(d) {
		return
	}
	grown := make([]*recBlock, len(d), int(i>>recShift)+1)
	copy(grown, d)
	for len(grown) <= int(i>>recShift) {
		grown = append(grown, new(recBlock))
	}
	s.dir.Store(&grown)
}

// refresh takes the directory the editor published, before the shard applies
// commands that may use new records.
func (s *shard) refresh() { s.blocks = *s.dir.Load() }

// locTable maps ids to their shard and local index. An id keeps its place
// for the engine's life: when an id is reused its entry does not change, so
// entries are written once, before the id is published, and read without a
// lock by Deliver on any goroutine. The entries lie in one array that grows
// by copying; a reader holding an older copy reads the same entries for the
// ids it knows.
type locTable struct {
	n   atomic.Uint32            // ids assigned; entries below n are valid
	pub atomic.Pointer[[]uint32] // the array, to its capacity: written before n counts an entry
	all []uint32                 // the same array, to n; the editor's
}

func newLocTable() *locTable {
	t := &locTable{}
	t.pub.Store(new([]uint32))
	return t
}

// get returns id's entry, or false for an id never assigned.
func (t *locTable) get(id uint32) (uint32, bool) {
	if id >= t.n.Load() {
		return 0, false
	}
	return (*t.pub.Load())[id], true
}

// reserve makes room for n more ids without growing. Only the editor calls
// it.
func (t *locTable) reserve(n int) {
	if len(t.all)+n > cap(t.all) {
		t.all = append(make([]uint32, 0, len(t.all)+n), t.all...)
		full := t.all[:cap(t.all)]
		t.pub.Store(&full)
	}
}

// assign gives the next id the entry loc and returns the id. Only the editor
// calls it.
func (t *locTable) assign(loc uint32) uint32 {
	id := uint32(len(t.all))
	grown := len(t.all) == cap(t.all)
	t.all = append(t.all, loc)
	if grown {
		full := t.all[:cap(t.all)]
		t.pub.Store(&full)
	}
	t.n.Store(id + 1)
	return id
}
