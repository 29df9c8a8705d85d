package passive

import (
	"strings"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// fakeEngine records what triggers ask of the engine.
type fakeEngine struct {
	rechecks []recheck
	evidence []evidence
	gone     map[uint32]bool
}

type recheck struct {
	id  uint32
	gap time.Duration
}

type evidence struct {
	id uint32
	o  probe.Outcome
	at int64
}

func (f *fakeEngine) Recheck(id uint32, gap time.Duration) bool {
	f.rechecks = append(f.rechecks, recheck{id, gap})
	return !f.gone[id]
}

func (f *fakeEngine) Evidence(id uint32, o probe.Outcome, at int64) bool {
	f.evidence = append(f.evidence, evidence{id, o, at})
	return !f.gone[id]
}

const ms = int64(time.Millisecond)

// fail and ok build events of slot 0.
func fail(at int64, run uint32) Event {
	return Event{At: at, Slot: 0, Failure: true, Outcome: probe.Refused, Run: run}
}

func ok(at int64) Event { return Event{At: at, Slot: 0, Outcome: probe.Success} }

func oneSlot(t *testing.T, rules ...Rule) *Table {
	t.Helper()
	var ms []Member
	for i, r := range rules {
		ms = append(ms, Member{Target: uint32(10 + i), Rule: r, Group: i})
	}
	tab, err := NewTable([][]Member{ms})
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func TestTrigger(t *testing.T) {
	rule := Rule{Failures: 3, Window: time.Second, Action: Recheck, Gap: 100 * time.Millisecond}
	for _, tt := range []struct {
		name     string
		events   []Event
		triggers []int64 // times of the triggers
	}{
		{"three in a row within the window", []Event{fail(0, 1), fail(100*ms, 2), fail(200*ms, 3)}, []int64{200 * ms}},
		{"the run starts again after a trigger", []Event{fail(0, 1), fail(1*ms, 2), fail(2*ms, 3), fail(3*ms, 4), fail(4*ms, 5), fail(5*ms, 6), fail(6*ms, 7)},
			[]int64{2 * ms, 5 * ms}},
		{"too far apart", []Event{fail(0, 1), fail(600*ms, 2), fail(1200*ms, 3)}, nil},
		{"the window slides", []Event{fail(0, 1), fail(800*ms, 2), fail(1600*ms, 3), fail(1700*ms, 4)}, []int64{1700 * ms}},
		{"exactly the window", []Event{fail(0, 1), fail(500*ms, 2), fail(1000*ms, 3)}, []int64{1000 * ms}},
		{"a success ends the run", []Event{fail(0, 1), fail(1*ms, 2), ok(2 * ms), fail(3*ms, 1), fail(4*ms, 2)}, nil},
		{"a new run of the observer ends the run though its success was lost", []Event{fail(0, 1), fail(1*ms, 2), fail(3*ms, 1), fail(4*ms, 2)}, nil},
		{"events lost inside a run do not end it", []Event{fail(0, 1), fail(1*ms, 2), fail(3*ms, 9)}, []int64{3 * ms}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			eng := &fakeEngine{}
			var got []Trigger
			tr := NewTracker(eng, func(x Trigger) { got = append(got, x) })
			tr.SetTable(oneSlot(t, rule))
			for _, ev := range tt.events {
				tr.Handle(ev)
			}
			if len(got) != len(tt.triggers) {
				t.Fatalf("%d triggers %+v, want at %v", len(got), got, tt.triggers)
			}
			for i, x := range got {
				if x.At != tt.triggers[i] || x.Target != 10 || !x.Accepted || x.Outcome != probe.Refused {
					t.Errorf("trigger %d = %+v, want at %d of target 10, accepted", i, x, tt.triggers[i])
				}
			}
			if len(eng.rechecks) != len(tt.triggers) || len(eng.evidence) != 0 {
				t.Fatalf("engine got rechecks %v, evidence %v", eng.rechecks, eng.evidence)
			}
			for _, r := range eng.rechecks {
				if r != (recheck{10, rule.Gap}) {
					t.Errorf("recheck %+v, want target 10 with gap %v", r, rule.Gap)
				}
			}
		})
	}
}

func TestActions(t *testing.T) {
	eng := &fakeEngine{gone: map[uint32]bool{12: true}}
	var got []Trigger
	tr := NewTracker(eng, func(x Trigger) { got = append(got, x) })
	tr.SetTable(oneSlot(t,
		Rule{Failures: 1, Window: time.Second, Action: Eject},
		Rule{Failures: 2, Window: time.Second, Action: Observe},
		Rule{Failures: 1, Window: time.Second, Action: Recheck, Gap: time.Second},
	))
	if n := tr.Table().Threshold(0); n != 2 {
		t.Errorf("threshold %d, want the most any member asks for, 2", n)
	}
	tr.Handle(Event{At: 5, Slot: 0, Failure: true, Outcome: probe.Timeout, Run: 1})
	tr.Handle(Event{At: 7, Slot: 0, Failure: true, Outcome: probe.Unreachable, Run: 2})
	if want := []evidence{{10, probe.Timeout, 5}, {10, probe.Unreachable, 7}}; !equal(eng.evidence, want) {
		t.Errorf("evidence %+v, want %+v", eng.evidence, want)
	}
	if want := []recheck{{12, time.Second}, {12, time.Second}}; !equal(eng.rechecks, want) {
		t.Errorf("rechecks %+v, want %+v", eng.rechecks, want)
	}
	var kinds []string
	for _, x := range got {
		kinds = append(kinds, x.Rule.Action.String())
		if x.Target == 12 && x.Accepted {
			t.Errorf("trigger of a target the engine no longer has says accepted: %+v", x)
		}
		if x.Group != int(x.Target-10) {
			t.Errorf("trigger %+v lost its member's group", x)
		}
	}
	if s := strings.Join(kinds, ","); s != "eject,recheck,eject,observe,recheck" {
		t.Errorf("triggers %s, want eject,recheck,eject,observe,recheck", s)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSetTableForgetsRuns(t *testing.T) {
	eng := &fakeEngine{}
	tr := NewTracker(eng, nil)
	rule := Rule{Failures: 2, Window: time.Second}
	tr.SetTable(oneSlot(t, rule))
	tr.Handle(fail(0, 1))
	tr.SetTable(oneSlot(t, rule))
	tr.Handle(fail(1*ms, 2))
	if len(eng.rechecks) != 0 {
		t.Errorf("a run begun under the old table made a trigger under the new one: %v", eng.rechecks)
	}
	tr.Handle(Event{At: 2 * ms, Slot: 7, Failure: true, Outcome: probe.Refused, Run: 5})
	tr.Handle(fail(3*ms, 3))
	if len(eng.rechecks) != 1 {
		t.Errorf("rechecks %v, want one after two failures in the new table (slot 7 unknown)", eng.rechecks)
	}
}

func TestHandleAllocations(t *testing.T) {
	eng := &fakeEngine{rechecks: make([]recheck, 0, 1<<16)}
	tr := NewTracker(eng, nil)
	tr.SetTable(oneSlot(t, Rule{Failures: 4, Window: time.Second}))
	tr.Handle(fail(0, 1))
	at := int64(0)
	if n := testing.AllocsPerRun(1000, func() {
		at += ms
		tr.Handle(fail(at, 2))
	}); n != 0 {
		t.Errorf("%v allocations per failure within a run, want 0", n)
	}
}

func TestRuleValidate(t *testing.T) {
	for _, tt := range []struct {
		rule Rule
		want string
	}{
		{Rule{Failures: 0, Window: time.Second}, "passive.failures 0: must be 1..255"},
		{Rule{Failures: 256, Window: time.Second}, "passive.failures 256"},
		{Rule{Failures: 1}, "passive.window 0s: must be positive"},
		{Rule{Failures: 1, Window: time.Second, Action: NumActions}, "passive.action"},
		{Rule{Failures: 1, Window: time.Second, Gap: -1}, "passive.recheck_gap"},
	} {
		err := tt.rule.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: error %v, want one with %q", tt.rule, err, tt.want)
		}
	}
	if _, err := NewTable([][]Member{{{Target: 3, Rule: Rule{Failures: 1}}}}); err == nil || !strings.Contains(err.Error(), "target 3") {
		t.Errorf("NewTable with a bad rule: %v, want an error naming the target", err)
	}
	for _, a := range []Action{Recheck, Eject, Observe} {
		if got, err := ParseAction(a.String()); err != nil || got != a {
			t.Errorf("ParseAction(%q) = %v, %v", a, got, err)
		}
	}
	if _, err := ParseAction("drop"); err == nil || !strings.Contains(err.Error(), `"drop"`) {
		t.Errorf("ParseAction(drop): %v", err)
	}
}
