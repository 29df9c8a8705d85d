package probe

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestNanotimeIsClockMonotonic sandwiches every reading of Nanotime between
// two clock_gettime(CLOCK_MONOTONIC) calls. A clock equal to the kernel's
// always lands between them; one that runs behind or ahead by any amount
// fails as soon as the gap between the reads is smaller than its error, which
// a thousand rounds make certain.
func TestNanotimeIsClockMonotonic(t *testing.T) {
	var before, after unix.Timespec
	for i := range 1000 {
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &before); err != nil {
			t.Fatal(err)
		}
		got := Nanotime()
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &after); err != nil {
			t.Fatal(err)
		}
		if got < before.Nano() || got > after.Nano() {
			t.Fatalf("round %d: Nanotime() = %d, not within CLOCK_MONOTONIC [%d, %d]",
				i, got, before.Nano(), after.Nano())
		}
	}
}

func BenchmarkNanotime(b *testing.B) {
	for b.Loop() {
		_ = Nanotime()
	}
}
