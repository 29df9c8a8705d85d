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
