// Package passive turns what the kernel saw of this host's own traffic to
// the targets — the connections other processes opened, refused, timed out
// or completed, counted by the eBPF observer of package bpf — into evidence
// for the engine, between two active probes.
//
// A check that asks for it (config's `passive:` block) has a [Rule]: Failures
// failed connections in a row to one target's endpoint, the first and the
// last at most Window apart, make a trigger. A successful connection ends
// the run; so does a gap: failures older than Window do not count. What a
// trigger does is the rule's [Action]: probe the target at once
// ([Recheck], the default: the verdict stays an active one), count as one
// failed probe toward fall ([Eject], as HAProxy's observe layer4 with
// on-error fail-check), or nothing but metrics and events ([Observe]).
// Passive success never makes a target healthy: it only ends a run of
// failures. Connections sonde makes itself are not evidence (the observer
// leaves them out), nor are connects the client gave up on before an answer
// could be missed (abandoned).
//
// A [Tracker] keeps the runs. Its table of watched endpoints is replaced as
// a whole ([Tracker.SetTable]) when the daemon's targets change; events are
// handed to it one at a time ([Tracker.Handle]) by the goroutine that reads
// the observer's ring buffer.
package passive

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// Action is what a trigger does.
type Action uint8

// The actions of a trigger.
const (
	Recheck Action = iota // probe the target at once (fast re-check)
	Eject                 // count the trigger as one failed probe toward fall
	Observe               // metrics and events only

	// NumActions is the number of actions; arrays indexed by Action use it.
	NumActions
)

var actionNames = [NumActions]string{Recheck: "recheck", Eject: "eject", Observe: "observe"}

// String returns the action's name as written in the configuration.
func (a Action) String() string {
	if a < NumActions {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// ParseAction returns the action named s.
func ParseAction(s string) (Action, error) {
	for a, n := range actionNames {
		if n == s {
			return Action(a), nil
		}
	}
	return 0, fmt.Errorf("unknown passive action %q (want recheck, eject or observe)", s)
}

// Limits of a [Rule].
const (
	MaxFailures = 255 // most failures a rule may ask for
)

// Rule says when passive evidence about a target makes a trigger and what
// the trigger does.
type Rule struct {
	Failures int           // failed connections in a row that make a trigger, 1..MaxFailures
	Window   time.Duration // the first and the last of them at most this far apart
	Action   Action        // what a trigger does
	Gap      time.Duration // Recheck: least time between two probes pulled forward
}

// Validate reports a rule that cannot work, naming the field.
func (r Rule) Validate() error {
	switch {
	case r.Failures < 1 || r.Failures > MaxFailures:
		return fmt.Errorf("passive.failures %d: must be 1..%d", r.Failures, MaxFailures)
	case r.Window <= 0:
		return fmt.Errorf("passive.window %v: must be positive", r.Window)
	case r.Action >= NumActions:
		return fmt.Errorf("passive.action %v: want recheck, eject or observe", r.Action)
	case r.Gap < 0:
		return fmt.Errorf("passive.recheck_gap %v: must not be negative", r.Gap)
	}
	return nil
}

// Engine is what a trigger acts on: the scheduler's engine.
type Engine interface {
	// Recheck pulls the target's next probe forward, no sooner than gap
	// after its previous one.
	Recheck(id uint32, gap time.Duration) bool
	// Evidence counts one failed probe with outcome o at time at.
	Evidence(id uint32, o probe.Outcome, at int64) bool
}

// Member is one target a watched endpoint stands for: several checks may
// probe one endpoint, each with its own rule.
type Member struct {
	Target uint32 // the engine's id of the target
	Rule   Rule
	Group  int // the caller's grouping (a pool, say), handed back in triggers
}

// Table is the watched endpoints: slot s stands for Members[Slots[s]:Slots[s+1]].
// Build it with [NewTable]; it is not changed once handed to a Tracker.
type Table struct {
	members []Member
	start   []uint32 // start[s] is slot s's first member; len(slots)+1 entries
}

// NewTable returns a table of slots, each the members an endpoint stands
// for, in slot order.
func NewTable(slots [][]Member) (*Table, error) {
	t := &Table{start: make([]uint32, 0, len(slots)+1)}
	for s, ms := range slots {
		for _, m := range ms {
			if err := m.Rule.Validate(); err != nil {
				return nil, fmt.Errorf("slot %d, target %d: %w", s, m.Target, err)
			}
		}
		t.start = append(t.start, uint32(len(t.members)))
		t.members = append(t.members, ms...)
	}
	t.start = append(t.start, uint32(len(t.members)))
	return t, nil
}

// Slots returns the number of slots.
func (t *Table) Slots() int { return len(t.start) - 1 }

// Members returns the members of slot s.
func (t *Table) Members(s uint32) []Member {
	if int(s) >= t.Slots() {
		return nil
	}
	return t.members[t.start[s]:t.start[s+1]]
}

// Threshold returns the failures in a row the observer must report of slot
// s one by one: the most any of its members asks for.
func (t *Table) Threshold(s uint32) int {
	n := 1
	for _, m := range t.Members(s) {
		n = max(n, m.Rule.Failures)
	}
	return n
}

// Event is one thing the observer saw: a failed connection to a slot's
// endpoint, or the first successful one after failures.
type Event struct {
	At      int64         // CLOCK_MONOTONIC nanoseconds, the engine's clock
	Slot    uint32        // the endpoint
	Failure bool          // a failed connection; false: one that succeeded
	Outcome probe.Outcome // Refused, Timeout or Unreachable for a failure; Success otherwise
	Run     uint32        // the failures in a row the observer has counted, this one included
}

// Trigger is a decision taken on passive evidence.
type Trigger struct {
	Member
	At       int64         // the last failure's time
	Outcome  probe.Outcome // the last failure's outcome
	Span     time.Duration // from the first of the failures to the last
	Accepted bool          // the engine took the action (false: the target is gone)
}

// run is one member's current run of failures: the times of the last
// Rule.Failures of them, a ring.
type run struct {
	at   []int64
	next int // where the next time goes
	n    int // times in the ring
}

// Tracker keeps the runs of failures of the watched endpoints and acts on
// triggers. Handle is called from one goroutine at a time; SetTable from any.
type Tracker struct {
	eng       Engine
	onTrigger func(Trigger)

	table atomic.Pointer[Table]

	// Owned by the goroutine that calls Handle.
	seen *Table          // the table the runs belong to
	runs map[uint32]*run // by member index in seen
}

// NewTracker returns a tracker acting on eng; onTrigger, when not nil, is
// told of every trigger on Handle's goroutine and must not block.
func NewTracker(eng Engine, onTrigger func(Trigger)) *Tracker {
	t := &Tracker{eng: eng, onTrigger: onTrigger, runs: make(map[uint32]*run)}
	t.table.Store(&Table{start: []uint32{0}})
	return t
}

// SetTable replaces the watched endpoints. Runs under way are forgotten:
// a slot may stand for another endpoint in the new table.
func (t *Tracker) SetTable(tab *Table) { t.table.Store(tab) }

// Table returns the watched endpoints.
func (t *Tracker) Table() *Table { return t.table.Load() }

// Handle takes one event, and acts on the triggers it makes.
func (t *Tracker) Handle(ev Event) {
	tab := t.table.Load()
	if tab != t.seen {
		t.seen = tab
		clear(t.runs)
	}
	if int(ev.Slot) >= tab.Slots() {
		return
	}
	first := tab.start[ev.Slot]
	for i, m := range tab.Members(ev.Slot) {
		idx := first + uint32(i)
		r := t.runs[idx]
		if !ev.Failure {
			// A success ends the run.
			delete(t.runs, idx)
			continue
		}
		if ev.Run == 1 && r != nil {
			// The observer starting a new run means it saw the end of
			// the last, even if that event was lost.
			r.n, r.next = 0, 0
		}
		if r == nil {
			r = &run{at: make([]int64, m.Rule.Failures)}
			t.runs[idx] = r
		}
		if !r.add(ev.At, m.Rule) {
			continue
		}
		span := time.Duration(ev.At - r.oldest())
		r.n, r.next = 0, 0
		t.act(m, ev, span)
	}
}

// add records a failure at time at and reports whether the run now makes a
// trigger: rule.Failures of them at most rule.Window apart.
func (r *run) add(at int64, rule Rule) bool {
	r.at[r.next] = at
	r.next = (r.next + 1) % len(r.at)
	r.n = min(r.n+1, len(r.at))
	return r.n == len(r.at) && at-r.oldest() <= int64(rule.Window)
}

// oldest returns the time of the oldest failure in the ring.
func (r *run) oldest() int64 {
	if r.n < len(r.at) {
		return r.at[0]
	}
	return r.at[r.next]
}

// act carries out m's rule on a trigger by ev.
func (t *Tracker) act(m Member, ev Event, span time.Duration) {
	tr := Trigger{Member: m, At: ev.At, Outcome: ev.Outcome, Span: span, Accepted: true}
	switch m.Rule.Action {
	case Recheck:
		tr.Accepted = t.eng.Recheck(m.Target, m.Rule.Gap)
	case Eject:
		tr.Accepted = t.eng.Evidence(m.Target, ev.Outcome, ev.At)
	}
	if t.onTrigger != nil {
		t.onTrigger(tr)
	}
}
