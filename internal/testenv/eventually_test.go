package testenv

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeTB records a failure instead of ending the goroutine, and has a
// deadline, so that a test can see how [Eventually] gives up.
type fakeTB struct {
	testing.TB
	deadline time.Time
	failed   string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

func (f *fakeTB) Deadline() (time.Time, bool) { return f.deadline, !f.deadline.IsZero() }

func TestEventuallyReturnsWhatItSaw(t *testing.T) {
	t.Parallel()
	calls := 0
	got := Eventually(t, "the third call", func() (int, bool) {
		calls++
		return calls * 10, calls == 3
	})
	if got != 30 || calls != 3 {
		t.Fatalf("Eventually returned %d after %d calls, want 30 after 3", got, calls)
	}
}

// TestEventuallyGivesUpBeforeTheTestDeadline: with the test's deadline
// near, Eventually fails at once, naming what it waited for and the last
// value it saw.
func TestEventuallyGivesUpBeforeTheTestDeadline(t *testing.T) {
	t.Parallel()
	tb := &fakeTB{deadline: time.Now().Add(time.Second)}
	calls := 0
	got := Eventually(tb, "the answer", func() (string, bool) {
		calls++
		return fmt.Sprintf("guess %d", calls), false
	})
	if got != "guess 1" || calls != 1 {
		t.Errorf("Eventually returned %q after %d calls, want the first guess after 1", got, calls)
	}
	for _, want := range []string{"for the answer", "last observed: guess 1"} {
		if !strings.Contains(tb.failed, want) {
			t.Errorf("failure %q does not say %q", tb.failed, want)
		}
	}
}

// TestEventuallyPollsUntilDone: a condition that becomes true while
// Eventually waits is seen, and no failure is reported.
func TestEventuallyPollsUntilDone(t *testing.T) {
	t.Parallel()
	tb := &fakeTB{}
	ready := time.Now().Add(50 * time.Millisecond)
	Eventually(tb, "the time to come", func() (time.Time, bool) {
		now := time.Now()
		return now, !now.Before(ready)
	})
	if tb.failed != "" {
		t.Fatalf("failed: %s", tb.failed)
	}
}

// TestEventuallyEveryKeepsItsPause: every pause between polls is the one
// asked for, where Eventually's start at a millisecond. (Only lower bounds:
// a loaded machine may oversleep any pause.)
func TestEventuallyEveryKeepsItsPause(t *testing.T) {
	t.Parallel()
	const pause = 20 * time.Millisecond
	var at []time.Time
	EventuallyEvery(t, "four polls", pause, func() (int, bool) {
		at = append(at, time.Now())
		return len(at), len(at) == 4
	})
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < pause {
			t.Errorf("pause %d was %v, want at least %v", i, gap, pause)
		}
	}
}

// TestEventuallyWithinGivesUpAtItsLimit: a condition that never holds
// fails once the limit has passed, not after WaitLimit.
func TestEventuallyWithinGivesUpAtItsLimit(t *testing.T) {
	t.Parallel()
	tb := &fakeTB{}
	start := time.Now()
	EventuallyWithin(tb, "nothing", 30*time.Millisecond, func() (int, bool) { return 0, false })
	if took := time.Since(start); tb.failed == "" || took < 30*time.Millisecond || took > WaitLimit/2 {
		t.Fatalf("gave up after %v with %q, want a failure after 30 ms", took, tb.failed)
	}
}
