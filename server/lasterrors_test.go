package server

import (
	"errors"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
)

func TestLastErrors(t *testing.T) {
	fail := func(msg string) *probe.Report {
		return &probe.Report{Result: probe.Result{Outcome: probe.Timeout}, Err: errors.New(msg)}
	}
	ok := &probe.Report{Result: probe.Result{Outcome: probe.Success}}
	type step struct {
		id   uint32
		r    *probe.Report
		gone []uint32 // forget these after r
	}
	tests := []struct {
		name  string
		steps []step
		want  map[uint32]string
	}{
		{"success never failed", []step{{id: 3, r: ok}}, map[uint32]string{3: ""}},
		{"failure kept", []step{{id: 3, r: fail("boom")}}, map[uint32]string{3: "boom", 4: ""}},
		{"success clears", []step{{id: 3, r: fail("boom")}, {id: 3, r: ok}}, map[uint32]string{3: ""}},
		{"outcome without error", []step{{id: 3, r: &probe.Report{Result: probe.Result{Outcome: probe.Refused}}}}, map[uint32]string{3: probe.Refused.String()}},
		{"latest failure", []step{{id: 3, r: fail("one")}, {id: 3, r: fail("two")}}, map[uint32]string{3: "two"}},
		{"bits grow and keep", []step{{id: 1, r: fail("low")}, {id: 70_000, r: fail("high")}, {id: 200, r: fail("mid")}},
			map[uint32]string{1: "low", 70_000: "high", 200: "mid", 64: ""}},
		{"cleared after growth", []step{{id: 1, r: fail("low")}, {id: 70_000, r: fail("high")}, {id: 1, r: ok}},
			map[uint32]string{1: "", 70_000: "high"}},
		{"success beyond the bits", []step{{id: 1, r: fail("low")}, {id: 1 << 30, r: ok}}, map[uint32]string{1: "low", 1 << 30: ""}},
		{"forget", []step{{id: 5, r: fail("a")}, {id: 6, r: fail("b"), gone: []uint32{5}}}, map[uint32]string{5: "", 6: "b"}},
		{"fails again after forget", []step{{id: 5, r: fail("a"), gone: []uint32{5}}, {id: 5, r: fail("c")}, {id: 5, r: ok}}, map[uint32]string{5: ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := &lastErrors{m: map[uint32]string{}}
			for _, s := range tc.steps {
				l.record(s.id, s.r)
				l.forget(s.gone)
			}
			for id, want := range tc.want {
				if got := l.get(id); got != want {
					t.Errorf("get(%d) = %q, want %q", id, got, want)
				}
				if got := l.marked(id); got != (want != "") {
					t.Errorf("marked(%d) = %v, want %v", id, got, want != "")
				}
			}
			if n := len(l.m); n != countNonEmpty(tc.want) {
				t.Errorf("%d entries kept, want %d: %v", n, countNonEmpty(tc.want), l.m)
			}
		})
	}
}

func countNonEmpty(m map[uint32]string) int {
	n := 0
	for _, v := range m {
		if v != "" {
			n++
		}
	}
	return n
}

// TestLastErrorsSuccessTakesNoLock: the success of a target with no
// failure kept does not touch the lock, so the probes of a healthy fleet
// never wait on an API reader or on each other.
func TestLastErrorsSuccessTakesNoLock(t *testing.T) {
	l := &lastErrors{m: map[uint32]string{}}
	l.record(7, &probe.Report{Result: probe.Result{Outcome: probe.Timeout}})
	l.mu.Lock() // a writer holds it: a reader's RLock would wait
	t.Cleanup(l.mu.Unlock)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.record(8, &probe.Report{Result: probe.Result{Outcome: probe.Success}})
	}()
	testenv.EventuallyWithin(t, "the success of a target without a kept failure to be recorded while the lock is held", 10*time.Second, func() (struct{}, bool) {
		select {
		case <-done:
			return struct{}{}, true
		default:
			return struct{}{}, false
		}
	})
}
