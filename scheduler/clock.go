package scheduler

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Clock tells the engine what time it is. The engine works in monotonic
// nanoseconds ([Clock.Nanotime]); wall-clock time ([Clock.Now]) is only used to
// stamp events for people. Every timing test uses [SimClock]; the daemon uses
// [RealClock].
type Clock interface {
	// Now returns the wall-clock time.
	Now() time.Time
	// Nanotime returns monotonic nanoseconds. For RealClock this is the
	// CLOCK_MONOTONIC time base that the kernel also uses for packet and BPF
	// timestamps, so kernel timestamps can be compared with it directly.
	Nanotime() int64
}

// WallTime converts a Nanotime reading ns of clock c into wall-clock time.
func WallTime(c Clock, ns int64) time.Time {
	now := c.Now()
	return now.Add(time.Duration(ns - c.Nanotime()))
}

// RealClock is the system clock. Nanotime follows CLOCK_MONOTONIC. It is safe
// for concurrent use.
type RealClock struct {
	mono0 int64     // CLOCK_MONOTONIC at creation
	t0    time.Time // time.Now at creation, carrying Go's monotonic reading
}

// NewRealClock returns a clock anchored to CLOCK_MONOTONIC.
func NewRealClock() *RealClock {
	var ts unix.Timespec
	// CLOCK_MONOTONIC cannot fail on Linux; should it, the anchor is zero and
	// Nanotime is still monotonic, only not comparable with kernel timestamps.
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return &RealClock{mono0: ts.Nano(), t0: time.Now()}
}

// Now returns time.Now().
func (c *RealClock) Now() time.Time { return time.Now() }

// Nanotime returns CLOCK_MONOTONIC nanoseconds, read through Go's vDSO-backed
// monotonic clock.
func (c *RealClock) Nanotime() int64 { return c.mono0 + int64(time.Since(c.t0)) }

// SimClock is a simulated clock that moves only when told to. It is safe for
// concurrent use; tests drive it from one goroutine.
type SimClock struct {
	ns    atomic.Int64
	epoch time.Time
}

// NewSimClock returns a simulated clock whose Nanotime is 0 at wall time epoch.
func NewSimClock(epoch time.Time) *SimClock { return &SimClock{epoch: epoch} }

// Now returns the simulated wall-clock time.
func (c *SimClock) Now() time.Time { return c.epoch.Add(time.Duration(c.ns.Load())) }

// Nanotime returns the simulated monotonic time.
func (c *SimClock) Nanotime() int64 { return c.ns.Load() }

// Set moves the clock to ns. Moving it backwards panics: monotonic time never
// goes back, and a test that tries has a bug.
func (c *SimClock) Set(ns int64) {
	if ns < c.ns.Load() {
		panic("scheduler: SimClock moved backwards")
	}
	c.ns.Store(ns)
}

// Advance moves the clock forward by d.
func (c *SimClock) Advance(d time.Duration) { c.Set(c.ns.Load() + int64(d)) }
