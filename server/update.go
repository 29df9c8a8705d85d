package server

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/config/fleet"
	"github.com/sondeprobe/sonde/scheduler"
)

// A configuration change reaches the running engine as an edit: the targets
// of the new configuration are matched with the running ones by address,
// port, check name and (where it changes the probe) host name. A match
// whose check still sends the same probe ([config.Check.ProbeKey]) keeps its
// engine id and with it its state, streak, schedule and probe in flight;
// every other running target is removed and every other new one added.

// noID marks a target of the new configuration without an engine id yet.
const noID = ^uint32(0)

// targetKey identifies a target across configurations.
type targetKey struct {
	hi, lo uint64
	port   uint16
	check  uint16 // index of the check's name among both configurations'
	host   uint32 // 1 + index of the host name when it changes the probe, else 0
	id     uint32 // the target's id in its configuration
}

func cmpKey(a, b targetKey) int {
	return cmp.Or(cmp.Compare(a.hi, b.hi), cmp.Compare(a.lo, b.lo), cmp.Compare(a.port, b.port),
		cmp.Compare(a.check, b.check), cmp.Compare(a.host, b.host))
}

// keyer numbers the check names and host names of two configurations.
type keyer struct {
	checks map[string]uint16
	hosts  map[string]uint32
}

// keys returns the sorted keys of cfg's targets, placeholders left out.
func (k *keyer) keys(cfg *config.Config) []targetKey {
	ci := make([]uint16, len(cfg.Checks))
	for i, c := range cfg.Checks {
		n, ok := k.checks[c.Name]
		if !ok {
			n = uint16(len(k.checks))
			k.checks[c.Name] = n
		}
		ci[i] = n
	}
	out := make([]targetKey, 0, len(cfg.Targets))
	for id := range cfg.Targets {
		t := &cfg.Targets[id]
		ip := t.IP16()
		if ip == nil {
			continue
		}
		a := *ip
		key := targetKey{hi: binary.BigEndian.Uint64(a[:8]), lo: binary.BigEndian.Uint64(a[8:]), port: t.Port, check: ci[t.Check], id: uint32(id)}
		if cfg.Checks[t.Check].HostNameMatters() {
			if name, ok := cfg.Hostnames[uint32(id)]; ok {
				h, ok := k.hosts[name]
				if !ok {
					h = uint32(len(k.hosts)) + 1
					k.hosts[name] = h
				}
				key.host = h
			}
		}
		out = append(out, key)
	}
	slices.SortFunc(out, cmpKey)
	return out
}

// match maps next's targets to old's engine ids: engineOf[id] is the engine
// id a target of next keeps, or noID; removed are old's engine ids that next
// has not kept.
func match(old *generation, next *config.Config) (engineOf, removed []uint32) {
	k := &keyer{checks: map[string]uint16{}, hosts: map[string]uint32{}}
	ok, nk := k.keys(old.cfg), k.keys(next)
	engineOf = make([]uint32, len(next.Targets))
	for i := range engineOf {
		engineOf[i] = noID
	}
	same := map[[2]uint16]bool{} // (old check, new check) → same probe
	sameProbe := func(oc, nc uint16) bool {
		key := [2]uint16{oc, nc}
		v, ok := same[key]
		if !ok {
			v = old.cfg.Checks[oc].ProbeKey() == next.Checks[nc].ProbeKey()
			same[key] = v
		}
		return v
	}
	i, j := 0, 0
	for i < len(ok) && j < len(nk) {
		switch c := cmpKey(ok[i], nk[j]); {
		case c < 0:
			removed = append(removed, ok[i].id)
			i++
		case c > 0:
			j++
		default:
			if sameProbe(old.cfg.Targets[ok[i].id].Check, next.Targets[nk[j].id].Check) {
				engineOf[nk[j].id] = ok[i].id
			} else {
				removed = append(removed, ok[i].id)
			}
			i++
			j++
		}
	}
	for ; i < len(ok); i++ {
		removed = append(removed, ok[i].id)
	}
	return engineOf, removed
}

// slotsFor gives each of next's checks its index in the engine's checks: the
// index of the check of the same name in old, or one no check of next uses,
// or a new one at the end. It returns the slots and their count.
func slotsFor(old *generation, next *config.Config) ([]uint16, int) {
	byName := map[string]uint16{}
	for ci, c := range old.cfg.Checks {
		byName[c.Name] = old.slots[ci]
	}
	n := old.engine.Checks()
	taken := make([]bool, n)
	slots := make([]uint16, len(next.Checks))
	fresh := make([]int, 0, len(next.Checks))
	for ci, c := range next.Checks {
		if s, ok := byName[c.Name]; ok {
			slots[ci], taken[s] = s, true
			continue
		}
		fresh = append(fresh, ci)
	}
	free := 0
	for _, ci := range fresh {
		for free < n && taken[free] {
			free++
		}
		if free == n {
			taken = append(taken, true)
			n++
		}
		slots[ci], taken[free] = uint16(free), true
	}
	return slots, n
}

// engineChecks returns the engine's checks for next with launchers ls:
// next's checks in their slots, and the engine's own where no check of next
// is (their targets are gone; a later check may take the slot).
func engineChecks(e *scheduler.Engine, next *config.Config, slots []uint16, n int, ls *launchers) []scheduler.Check {
	out := make([]scheduler.Check, n)
	for s := range min(n, e.Checks()) {
		out[s] = *e.Check(s)
	}
	for ci, c := range next.Checks {
		out[slots[ci]] = ls.engineCheck(ci, c)
	}
	return out
}

// streamSet is the probe streams of the new configuration: the members of
// stream i, as ids in next, are members[start[i]:start[i+1]], and leader[i]
// is the engine id of its leader once known.
type streamSet struct {
	start   []uint32
	members []uint32
	leader  []uint32
}

func (ss *streamSet) of(i int) []uint32 { return ss.members[ss.start[i]:ss.start[i+1]] }

// streamsOf groups next's targets by stream (their Leader in next) and finds
// the engine leader each stream keeps: the old leader when the edit keeps it,
// else the heir the engine gives the stream when the old leader goes (the
// enabled kept member with the lowest engine id, or the lowest when none is
// enabled), else noID for a stream of added targets only.
func streamsOf(old *generation, next *config.Config, engineOf []uint32) *streamSet {
	index := make([]uint32, len(next.Targets)) // per leader id in next: its stream
	for i := range index {
		index[i] = noID
	}
	var count []uint32
	for _, t := range next.Targets {
		if index[t.Leader()] == noID {
			index[t.Leader()] = uint32(len(count))
			count = append(count, 0)
		}
		count[index[t.Leader()]]++
	}
	ss := &streamSet{start: make([]uint32, len(count)+1), members: make([]uint32, len(next.Targets)), leader: make([]uint32, len(count))}
	for i, c := range count {
		ss.start[i+1] = ss.start[i] + c
	}
	fill := count[:0:0]
	fill = append(fill, ss.start[:len(count)]...)
	for id, t := range next.Targets {
		si := index[t.Leader()]
		ss.members[fill[si]] = uint32(id)
		fill[si]++
	}
	for si := range ss.leader {
		leader, heir, heirOn := noID, noID, false
		for _, n := range ss.of(si) {
			e := engineOf[n]
			if e == noID {
				continue
			}
			if old.cfg.Targets[e].Leader() == e {
				leader = e
				break
			}
			on := !next.Targets[n].Disabled()
			if heir == noID || on && !heirOn || on == heirOn && e < heir {
				heir, heirOn = e, on
			}
		}
		if leader == noID {
			leader = heir
		}
		ss.leader[si] = leader
	}
	return ss
}

// reindex returns next as the engine runs it: targets at their engine ids
// (placeholders at free ids up to size), leaders and pool members as engine
// ids.
func reindex(next *config.Config, engineOf []uint32, ss *streamSet, size int) *config.Config {
	cp := *next
	out := &cp
	out.Pools = make([]*config.Pool, len(next.Pools))
	out.Targets = make([]config.Target, size)
	for id := range out.Targets {
		out.Targets[id] = fleet.Placeholder(uint32(id))
	}
	for si, leader := range ss.leader {
		for _, n := range ss.of(si) {
			t := next.Targets[n]
			t.SetLeader(leader)
			out.Targets[engineOf[n]] = t
		}
	}
	out.Hostnames = nil
	if len(next.Hostnames) > 0 {
		out.Hostnames = make(map[uint32]string, len(next.Hostnames))
		for id, name := range next.Hostnames {
			out.Hostnames[engineOf[id]] = name
		}
	}
	for pi, p := range next.Pools {
		out.Pools[pi] = p.Renumbered(func(id uint32) uint32 { return engineOf[id] })
	}
	return out
}

// change is an edit of the running engine into a new configuration: the
// configuration as the engine will run it, and the ids its targets kept, got
// and lost.
type change struct {
	cfg                  *config.Config
	kept, added, removed []uint32
}

// edit computes the edit that turns the engine from old's configuration into
// next's and stages it in ed; the probers must already run next's checks (ls).
// resume, when not nil, gives a target of next the edit adds a saved state
// to resume (see statefile.Pending).
func edit(ed *scheduler.Edit, old *generation, next *config.Config, ls *launchers, slots []uint16, nslots int,
	resume func(n uint32) *scheduler.TargetStatus) (*change, error) {
	engineOf, removed := match(old, next)
	ss := streamsOf(old, next, engineOf)
	ch := &change{removed: removed}
	for _, e := range engineOf {
		if e != noID {
			ch.kept = append(ch.kept, e)
		}
	}
	for n, e := range engineOf {
		if e != noID && old.cfg.Targets[e].Disabled() != next.Targets[n].Disabled() {
			if err := ed.SetDisabled(e, next.Targets[n].Disabled()); err != nil {
				return nil, err
			}
		}
	}
	for _, e := range removed {
		if err := ed.Remove(e); err != nil {
			return nil, err
		}
	}
	if err := ed.SetChecks(engineChecks(old.engine, next, slots, nslots, ls)); err != nil {
		return nil, fmt.Errorf("engine checks: %w", err)
	}
	add := func(n uint32, leader uint32) error {
		t := next.Targets[n]
		spec := scheduler.TargetSpec{Check: slots[t.Check], Leader: leader, Disabled: t.Disabled()}
		if resume != nil {
			spec.Resume = resume(n)
		}
		id, err := ed.Add(spec)
		if err != nil {
			return err
		}
		engineOf[n] = id
		ch.added = append(ch.added, id)
		return nil
	}
	for si := range ss.leader {
		members := ss.of(si)
		if ss.leader[si] == noID {
			// Added targets only: the first enabled one leads, as in a file.
			lead := members[0]
			for _, n := range members {
				if !next.Targets[n].Disabled() {
					lead = n
					break
				}
			}
			if err := add(lead, scheduler.Alone); err != nil {
				return nil, err
			}
			ss.leader[si] = engineOf[lead]
		}
		for _, n := range members {
			if engineOf[n] == noID {
				if err := add(n, ss.leader[si]); err != nil {
					return nil, err
				}
			}
		}
	}
	ch.cfg = reindex(next, engineOf, ss, ed.Len())
	return ch, nil
}
