package scheduler

// cmdKind is what a command asks of a shard.
type cmdKind uint8

const (
	cmdAdd     cmdKind = iota // start a target in a record
	cmdRemove                 // stop a target and free its record
	cmdDisable                // set or clear a target's disabled flag
	cmdChecks                 // switch to new checks
)

// command is one change to one of a shard's records, built by an [Edit].
type command struct {
	kind     cmdKind
	disabled bool        // cmdAdd, cmdDisable
	check    uint16      // cmdAdd
	idx      uint32      // local index of the record
	id       uint32      // cmdAdd: the target's id
	leader   uint32      // cmdAdd: local index of a member of the stream to join, noEntry to lead one
	ev       evalState   // cmdAdd: starting evaluator state
	tab      *checkTable // cmdChecks
}

// cmdBatch is one edit's commands for one shard. Batches wait in the shard's
// inbox, a lock-free stack the editor pushes onto and the shard empties at
// the start of each step.
type cmdBatch struct {
	seq  uint64 // the edit's sequence number
	cmds []command
	next *cmdBatch
}

// post pushes b onto the shard's inbox and wakes the shard.
func (s *shard) post(b *cmdBatch) {
	for {
		old := s.inbox.Load()
		b.next = old
		if s.inbox.CompareAndSwap(old, b) {
			break
		}
	}
	s.wakeUp()
}

// applyEdits applies the batches waiting in the inbox, oldest first.
func (s *shard) applyEdits() {
	if s.inbox.Load() == nil {
		return
	}
	var list *cmdBatch
	for b := s.inbox.Swap(nil); b != nil; {
		next := b.next
		b.next, list = list, b
		b = next
	}
	s.refresh()
	for b := list; b != nil; b = b.next {
		for i := range b.cmds {
			s.command(&b.cmds[i])
		}
		s.applied.Store(b.seq)
	}
}

func (s *shard) command(c *command) {
	switch c.kind {
	case cmdAdd:
		s.add(c)
	case cmdRemove:
		s.remove(c.idx)
	case cmdDisable:
		s.setDisabled(c.idx, c.disabled)
	case cmdChecks:
		s.use(c.tab)
	}
}

// add starts a target in the free record c.idx: alone, its first probe
// filed at once, or in the stream of the record c.leader.
func (s *shard) add(c *command) {
	rec := s.rec(c.idx)
	rec.id, rec.check, rec.ev, rec.flags = c.id, c.check, c.ev, 0
	rec.word.Store(rec.word.Load() &^ wordOff)
	if c.disabled {
		rec.flags |= flagDisabled
	}
	if c.leader == noEntry {
		rec.flags |= flagLeader
		s.refreshStream(c.idx)
		return
	}
	s.link(c.idx, c.leader)
	s.refreshStream(s.leaderOf(c.idx))
}

// remove stops the target in record i and frees the record. A probe in
// flight is struck out of its deadline queue; its answer will find the
// record without one and count as stale. A leader of a shared stream hands
// the stream, with its schedule, to its heir: the enabled member with the
// lowest id, or the member with the lowest id when none is enabled.
func (s *shard) remove(i uint32) {
	rec := s.rec(i)
	if rec.flags&flagInFlight != 0 {
		s.deadlines[s.tab.queueOf[rec.check]].strike(rec.dq, i, rec.gen)
	}
	rec.word.Store(rec.word.Load() | wordOff)
	flags, at, dq, tries := rec.flags, rec.at, rec.dq, rec.tries
	if flags&flagShared == 0 {
		rec.flags = 0
		return
	}
	heir := s.next(i)
	for m := s.next(heir); m != i; m = s.next(m) {
		h, r := s.rec(heir), s.rec(m)
		if hOff, mOff := h.flags&flagDisabled != 0, r.flags&flagDisabled != 0; hOff != mOff {
			if hOff {
				heir = m
			}
		} else if r.id < h.id {
			heir = m
		}
	}
	s.unlink(i)
	rec.flags = 0
	if flags&flagLeader == 0 {
		s.refreshStream(s.leaderOf(heir))
		return
	}
	h := s.rec(heir)
	h.flags |= flagLeader
	if flags&(flagActive|flagInFlight) == flagActive {
		// Waiting for its next send: the heir sends it, on time, and
		// takes the mark of the stream's last send with it for rechecks.
		h.flags |= flagActive | flags&flagSent
		h.dq, h.tries = dq, tries
		s.schedule(heir, h, at)
	}
	s.refreshStream(heir)
}

// setDisabled sets or clears record i's disabled flag and starts or idles
// its stream as needed.
func (s *shard) setDisabled(i uint32, disabled bool) {
	rec := s.rec(i)
	w := rec.word.Load() &^ wordDisabled
	rec.flags &^= flagDisabled
	if disabled {
		rec.flags |= flagDisabled
		w |= wordDisabled
	}
	rec.word.Store(w)
	s.refreshStream(s.leaderOf(i))
}

// refreshStream makes leader l's stream active when a member is enabled and
// idle otherwise. A stream that becomes active gets its first probe
// ([shard.fileFirst]), unless a probe is out (its completion schedules the
// next); one that goes idle sends nothing more: its timer, when it fires,
// finds it idle.
func (s *shard) refreshStream(l uint32) {
	active := false
	for m := l; ; {
		if s.rec(m).flags&flagDisabled == 0 {
			active = true
			break
		}
		if m = s.next(m); m == l {
			break
		}
	}
	rec := s.rec(l)
	if active == (rec.flags&flagActive != 0) {
		return
	}
	if !active {
		rec.flags &^= flagActive
		return
	}
	rec.flags |= flagActive
	if rec.flags&flagInFlight == 0 {
		s.fileFirst(l, rec)
	}
}

// leaderOf returns the leader of record m's stream.
func (s *shard) leaderOf(m uint32) uint32 {
	for s.rec(m).flags&flagLeader == 0 {
		m = s.members[m]
	}
	return m
}

// link puts record j into the stream of record m.
func (s *shard) link(j, m uint32) {
	for n := max(j, m) + 1; len(s.members) < int(n); {
		s.members = append(s.members, noEntry)
	}
	rm := s.rec(m)
	if rm.flags&flagShared == 0 {
		s.members[m] = m
		rm.flags |= flagShared
	}
	s.members[j] = s.members[m]
	s.members[m] = j
	s.rec(j).flags |= flagShared
}

// unlink takes record j out of its shared stream.
func (s *shard) unlink(j uint32) {
	p := j
	for s.members[p] != j {
		p = s.members[p]
	}
	s.members[p] = s.members[j]
	s.rec(j).flags &^= flagShared
	if s.members[p] == p {
		s.rec(p).flags &^= flagShared
	}
}
