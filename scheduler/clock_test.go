package scheduler

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRealClockIsKernelMonotonic checks that the engine's real clock is the
// kernel's CLOCK_MONOTONIC, the time base of BPF and packet timestamps: every
// reading lies between two clock_gettime calls made around it.
func TestRealClockIsKernelMonotonic(t *testing.T) {
	c := NewRealClock()
	var before, after unix.Timespec
	for i := range 1000 {
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &before); err != nil {
			t.Fatal(err)
		}
		got := c.Nanotime()
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &after); err != nil {
			t.Fatal(err)
		}
		if got < before.Nano() || got > after.Nano() {
			t.Fatalf("round %d: Nanotime() = %d, not within CLOCK_MONOTONIC [%d, %d]",
				i, got, before.Nano(), after.Nano())
		}
	}
}

func TestSimClock(t *testing.T) {
	t.Parallel()
	epoch := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewSimClock(epoch)
	c.Advance(1500 * time.Millisecond)
	if got := c.Nanotime(); got != int64(1500*time.Millisecond) {
		t.Errorf("Nanotime() = %d after Advance(1.5s), want %d", got, int64(1500*time.Millisecond))
	}
	if got, want := WallTime(c, int64(time.Second)), epoch.Add(time.Second); !got.Equal(want) {
		t.Errorf("WallTime(1s) = %v, want %v", got, want)
	}
	defer func() {
		if recover() == nil {
			t.Error("moving the SimClock backwards did not panic")
		}
	}()
	c.Set(int64(time.Second))
}

// TestRealClockWallAgrees converts one reading many times, and readings
// that follow each other: one instant gets one wall-clock time, and a later
// one a time no earlier. Converting with a fresh offset each time gave
// times that differed by nanoseconds, in either direction.
func TestRealClockWallAgrees(t *testing.T) {
	c := NewRealClock()
	ns := c.Nanotime()
	first := WallTime(c, ns)
	if d := time.Until(first); d < -time.Minute || d > time.Minute {
		t.Fatalf("WallTime(Nanotime()) = %v, %v away from time.Now()", first, d)
	}
	prev := first
	for i := range int64(100_000) {
		if got := WallTime(c, ns); !got.Equal(first) {
			t.Fatalf("conversion %d of one reading: %v, the first gave %v (%v apart)", i, got, first, got.Sub(first))
		}
		next := WallTime(c, ns+i)
		if next.Before(prev) {
			t.Fatalf("reading +%dns converts to %v, before the one before it (%v)", i, next, prev)
		}
		prev = next
	}
}

// TestRealClockOffset feeds the offset measurement readings of both clocks:
// jitter within wallSlack keeps the offset, a step of the wall clock moves
// it, and readings too far apart to tell a step from a pause are ignored.
func TestRealClockOffset(t *testing.T) {
	const base = int64(1_700_000_000_000_000_000)
	us, ms := int64(time.Microsecond), int64(time.Millisecond)
	c := NewRealClock()
	steps := []struct {
		name                string
		wall, before, after int64
		want                int64
	}{
		{"first measurement", base + 1000, 1000, 1000, base},
		{"jitter of 3µs", base + 2*ms + 3*us, 2 * ms, 2 * ms, base},
		{"jitter of -900µs", base + 5*ms - 900*us, 5 * ms, 5 * ms, base},
		{"readings 200µs apart: the middle", base + 8*ms + 100*us, 8 * ms, 8*ms + 200*us, base},
		{"the wall clock stepped 2s ahead", base + 2000*ms + 10*ms, 10 * ms, 10 * ms, base + 2000*ms},
		{"readings 5ms apart, as if stepped back", base + 20*ms, 20 * ms, 25 * ms, base + 2000*ms},
		{"stepped back 1.5ms", base + 2000*ms - 1500*us + 30*ms, 30 * ms, 30 * ms, base + 2000*ms - 1500*us},
	}
	for _, s := range steps {
		if got := c.offset(s.wall, s.before, s.after); got != s.want {
			t.Fatalf("%s: offset %d, want %d", s.name, got, s.want)
		}
	}
}
