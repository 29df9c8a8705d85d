package scheduler

import (
	"fmt"
	"slices"
	"time"
)

// books are the editor's accounts of ids and shards: which ids are in use,
// with which check, and which are free on each shard. They are kept under
// Engine.editMu and never read by shards.
type books struct {
	ids    []idBook    // per id
	shards []shardBook // per shard
	uses   []checkUse  // per check
	seq    uint64      // sequence number of the last committed edit
}

// checkUse counts the targets of a check in the engine, and the enabled ones.
type checkUse struct{ all, enabled int }

// count adds d to the uses of check ci by a target, enabled or not.
func (b *books) count(ci uint16, enabled bool, d int) {
	for len(b.uses) <= int(ci) {
		b.uses = append(b.uses, checkUse{})
	}
	b.uses[ci].all += d
	if enabled {
		b.uses[ci].enabled += d
	}
}

type idBook struct {
	check    uint16
	live     bool
	disabled bool
}

type shardBook struct {
	live int    // targets in use on the shard
	next uint32 // local indices below next have been given out
	free []freeID
}

// freeID is an id a removal freed. The id is given out again only once its
// shard has applied the removal (edit seq), so nothing the shard still does
// for the old target can touch the new one's published state.
type freeID struct {
	id  uint32
	seq uint64
}

func (b *books) init(shards int) { b.shards = make([]shardBook, shards) }

// Edit is a set of changes to a running engine: checks changed, targets added,
// removed, enabled or disabled. It is built by one goroutine with
// [Engine.Edit] and takes effect, all of it, when committed: each shard
// applies its part between two of its steps, so a change never lands in the
// middle of a probe's handling. Targets not named by an edit keep their
// state, their counts toward rise and fall, their schedule and the probe they
// may have in flight. Only one Edit is open at a time: Engine.Edit waits for
// the previous one to be committed or aborted.
type Edit struct {
	e     *Engine
	tab   *checkTable // the edit's checks: the engine's, or new ones from SetChecks
	newTb bool        // tab is new
	cmds  [][]command // per shard
	freed [][]uint32  // per shard, ids this edit removed
	added []uint32    // ids this edit added, to undo on Abort
	flips []uint32    // ids whose Disabled this edit changed, to undo on Abort
	done  bool
}

// Edit opens an edit of the engine. Close it with [Edit.Commit] or
// [Edit.Abort].
func (e *Engine) Edit() *Edit {
	e.editMu.Lock()
	return &Edit{
		e:     e,
		tab:   e.tab.Load(),
		cmds:  make([][]command, len(e.shards)),
		freed: make([][]uint32, len(e.shards)),
	}
}

// SetChecks replaces the engine's checks. Check i of checks is check i of the
// engine with new settings; targets of a check whose settings change keep
// their state and probe by the new settings from their next probe on. The
// list may grow, never shrink, and a check that targets use must keep its
// timeout (a new timeout is a new probe: remove its targets and add them
// again) and, while any of them is enabled, a launcher. The new checks take
// effect in their place among the edit's changes: a target removed earlier
// in the edit leaves under the old ones, one added later joins under these.
func (ed *Edit) SetChecks(checks []Check) error {
	old := ed.tab
	if len(checks) < len(old.checks) {
		return fmt.Errorf("%w: %d checks replace %d; the list may only grow", ErrInvalidCheck, len(checks), len(old.checks))
	}
	tab, err := newCheckTable(checks, old)
	if err != nil {
		return err
	}
	for ci, u := range ed.e.books.uses {
		c := &tab.checks[ci]
		switch {
		case u.all > 0 && c.Timeout != old.checks[ci].Timeout:
			return fmt.Errorf("%w: check %d: timeout %v changes to %v while targets use it", ErrInvalidCheck, ci, old.checks[ci].Timeout, c.Timeout)
		case u.enabled > 0 && c.Launcher == nil:
			return fmt.Errorf("%w: check %d: no launcher while enabled targets use it", ErrInvalidCheck, ci)
		}
	}
	ed.tab, ed.newTb = tab, true
	for si := range ed.cmds {
		ed.cmds[si] = append(ed.cmds[si], command{kind: cmdChecks, tab: tab})
	}
	return nil
}

// Add adds a target and returns its id. The target probes promptly: its
// first probe leaves at the step that applies the edit, paced only by its
// check's [Check.FirstProbes]. An id is reused once the target that had it
// is gone.
func (ed *Edit) Add(t TargetSpec) (uint32, error) {
	b := &ed.e.books
	if int(t.Check) >= len(ed.tab.checks) {
		return 0, fmt.Errorf("%w: check %d does not exist", ErrInvalidTarget, t.Check)
	}
	c := &ed.tab.checks[t.Check]
	if !t.Disabled && c.Launcher == nil {
		return 0, fmt.Errorf("%w: check %d has no launcher", ErrInvalidTarget, t.Check)
	}
	sh := -1
	if t.Leader != Alone {
		if int(t.Leader) >= len(b.ids) || !b.ids[t.Leader].live {
			return 0, fmt.Errorf("%w: leader %d is not in the engine", ErrInvalidTarget, t.Leader)
		}
		if lt := ed.tab.checks[b.ids[t.Leader].check].Timeout; lt != c.Timeout {
			return 0, fmt.Errorf("%w: its timeout %v differs from its leader %d's %v", ErrInvalidTarget, c.Timeout, t.Leader, lt)
		}
		s, _, _ := ed.e.locate(t.Leader)
		sh = s.idx
	}
	id, err := ed.take(sh)
	if err != nil {
		return 0, err
	}
	ed.assign(id, -1, t)
	ed.queueAdd(id, t.Leader, t)
	ed.added = append(ed.added, id)
	return id, nil
}

// take returns a free id on shard sh, or on the shard with the fewest
// targets when sh is -1: an id its shard has let go, or a new one.
func (ed *Edit) take(sh int) (uint32, error) {
	b := &ed.e.books
	if sh < 0 {
		sh = 0
		for i := range b.shards {
			if b.shards[i].live < b.shards[sh].live {
				sh = i
			}
		}
	}
	sb := &b.shards[sh]
	applied := ed.e.shards[sh].applied.Load()
	if len(sb.free) > 0 && sb.free[0].seq <= applied {
		id := sb.free[0].id
		sb.free = sb.free[1:]
		return id, nil
	}
	if sb.next == uint32(1<<(32-ed.e.shardBits)-1) || ed.e.locs.n.Load() == Alone {
		return 0, fmt.Errorf("%w: the engine is full", ErrInvalidTarget)
	}
	local := sb.next
	sb.next++
	ed.e.shards[sh].reserve(local)
	return ed.e.locs.assign(local<<ed.e.shardBits | uint32(sh)), nil
}

// assign records id as in use by t. For a new id (New's, placed on shard
// sh), it first gives the id its place.
func (ed *Edit) assign(id uint32, sh int, t TargetSpec) {
	e, b := ed.e, &ed.e.books
	if sh >= 0 {
		sb := &b.shards[sh]
		local := sb.next
		sb.next++
		e.shards[sh].reserve(local)
		e.locs.assign(local<<e.shardBits | uint32(sh))
	}
	for len(b.ids) <= int(id) {
		b.ids = append(b.ids, idBook{})
	}
	b.ids[id] = idBook{check: t.Check, live: true, disabled: t.Disabled}
	b.count(t.Check, !t.Disabled, 1)
	s, _, _ := e.locate(id)
	b.shards[s.idx].live++
	e.live.Add(1)
}

// queueAdd publishes the new target's starting state, so readers see it at
// once, and queues its addition for its shard. The state is marked off until
// the shard applies the addition: rechecks and passive evidence wait for that.
func (ed *Edit) queueAdd(id, leader uint32, t TargetSpec) {
	e := ed.e
	s, i, _ := e.locate(id)
	c := &ed.tab.checks[t.Check]
	ev := evalState{state: c.Initial}
	rec := s.published(i)
	if t.Resume != nil {
		ev = resumed(&c.Timing, t.Resume)
		rec.publishResumed(t.Resume, &ev, t.Disabled)
	} else {
		rec.word.Store(packWord(&ev, t.Disabled, false, 0, 0) | wordOff)
		rec.latency.Store(0)
		rec.last.Store(0)
		rec.since.Store(e.clock.Nanotime())
	}
	cmd := command{kind: cmdAdd, idx: i, id: id, check: t.Check, disabled: t.Disabled, leader: noEntry, ev: ev}
	if leader != Alone {
		_, cmd.leader, _ = e.locate(leader)
	}
	ed.cmds[s.idx] = append(ed.cmds[s.idx], cmd)
}

// Len returns the number of ids given out, this edit's included: every id
// in use is below it.
func (ed *Edit) Len() int { return int(ed.e.locs.n.Load()) }

// Remove takes target id out of the engine: it is probed no more, a probe it
// has in flight is forgotten, and its id may be given to a target added by a
// later edit. When it led a probe stream that other targets share, one of
// them takes over the stream, on the same schedule: the enabled one with the
// lowest id, or the one with the lowest id when none is enabled.
func (ed *Edit) Remove(id uint32) error {
	b := &ed.e.books
	if int(id) >= len(b.ids) || !b.ids[id].live {
		return fmt.Errorf("%w: remove %d: not in the engine", ErrInvalidTarget, id)
	}
	b.ids[id].live = false
	b.count(b.ids[id].check, !b.ids[id].disabled, -1)
	s, i, _ := ed.e.locate(id)
	b.shards[s.idx].live--
	ed.e.live.Add(-1)
	ed.cmds[s.idx] = append(ed.cmds[s.idx], command{kind: cmdRemove, idx: i})
	ed.freed[s.idx] = append(ed.freed[s.idx], id)
	return nil
}

// SetDisabled excludes target id from probing, evaluation and pool decisions
// (E6), or brings it back. A target brought back keeps the state it had; its
// stream, if it was idle, probes promptly.
func (ed *Edit) SetDisabled(id uint32, disabled bool) error {
	b := &ed.e.books
	if int(id) >= len(b.ids) || !b.ids[id].live {
		return fmt.Errorf("%w: set disabled %d: not in the engine", ErrInvalidTarget, id)
	}
	ib := &b.ids[id]
	if ib.disabled == disabled {
		return nil
	}
	if !disabled && ed.tab.checks[ib.check].Launcher == nil {
		return fmt.Errorf("%w: enable %d: check %d has no launcher", ErrInvalidTarget, id, ib.check)
	}
	b.flip(id)
	ed.flips = append(ed.flips, id)
	s, i, _ := ed.e.locate(id)
	ed.cmds[s.idx] = append(ed.cmds[s.idx], command{kind: cmdDisable, idx: i, disabled: disabled})
	return nil
}

// flip changes whether id is disabled in the books.
func (b *books) flip(id uint32) {
	ib := &b.ids[id]
	b.count(ib.check, true, 0)
	if ib.disabled {
		b.uses[ib.check].enabled++
	} else {
		b.uses[ib.check].enabled--
	}
	ib.disabled = !ib.disabled
}

// Commit hands the edit to the shards and closes it. It does not wait: each
// shard applies its part at its next step (at once if it sleeps; at the next
// Step in a simulation). Readers see added targets at once, in their
// starting state.
func (ed *Edit) Commit() {
	if ed.done {
		return
	}
	ed.done = true
	e, b := ed.e, &ed.e.books
	b.seq++
	for si, s := range e.shards {
		if len(ed.cmds[si]) == 0 {
			continue
		}
		s.post(&cmdBatch{seq: b.seq, cmds: ed.cmds[si]})
		for _, id := range ed.freed[si] {
			b.shards[si].free = append(b.shards[si].free, freeID{id: id, seq: b.seq})
		}
	}
	if ed.newTb {
		e.tab.Store(ed.tab)
	}
	e.editMu.Unlock()
}

// Abort closes the edit without applying it: the books go back to what they
// were. Ids it added return to the free lists (an added id is new or free,
// and its shard has not heard of it); targets it removed stay.
func (ed *Edit) Abort() {
	if ed.done {
		return
	}
	ed.done = true
	e, b := ed.e, &ed.e.books
	for _, id := range slices.Backward(ed.flips) {
		b.flip(id)
	}
	for _, id := range ed.added {
		b.ids[id].live = false
		b.count(b.ids[id].check, !b.ids[id].disabled, -1)
		s, _, _ := e.locate(id)
		b.shards[s.idx].live--
		e.live.Add(-1)
		b.shards[s.idx].free = append(b.shards[s.idx].free, freeID{id: id})
	}
	for si, ids := range ed.freed {
		for _, id := range ids {
			b.ids[id].live = true
			b.count(b.ids[id].check, !b.ids[id].disabled, 1)
			b.shards[si].live++
			e.live.Add(1)
		}
	}
	e.editMu.Unlock()
}

// resumed rebuilds an evaluator state from a published one: the state, and
// the run of equal results that led to it, of the kind StreakOK says (the
// last outcome may be a LocalError, which is no part of the run). A sliding
// window gets that run as its only results, so it decides again only on new
// results.
func resumed(c *Timing, st *TargetStatus) evalState {
	ev := evalState{state: st.State}
	if !st.Probed || st.Streak <= 0 {
		return ev
	}
	ev.streak = uint16(min(st.Streak, 1<<16-1))
	ok := st.StreakOK
	if ok {
		ev.info |= infoLastOK
	}
	n := min(st.Streak, MaxWindow)
	if c.Window.Size > 0 {
		n = min(n, c.Window.Size)
		ev.info |= uint8(n)
	}
	if ok {
		ev.hist = uint32(1<<n - 1)
	}
	return ev
}

// publishResumed stores a resumed target's published fields, marked off
// until its shard applies its addition.
func (r *record) publishResumed(st *TargetStatus, ev *evalState, disabled bool) {
	r.word.Store(packWord(ev, disabled, st.Probed, st.LastOutcome, st.LastStatus) | wordOff)
	lat := func(d time.Duration) uint64 { return uint64(min(max(d/time.Microsecond, 0), 1<<32-1)) }
	r.latency.Store(lat(st.Latency)<<32 | lat(st.Smoothed))
	r.last.Store(st.LastProbe)
	r.since.Store(st.Since)
}
