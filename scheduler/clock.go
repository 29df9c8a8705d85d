package scheduler

import (
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/probe"
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

// RealClock is the system clock. Nanotime is the kernel's CLOCK_MONOTONIC
// ([probe.Nanotime]). It is safe for concurrent use.
type RealClock struct{}

// NewRealClock returns the system clock.
func NewRealClock() *RealClock { return &RealClock{} }

// Now returns time.Now().
func (c *RealClock) Now() time.Time { return time.Now() }

// Nanotime returns CLOCK_MONOTONIC nanoseconds.
func (c *RealClock) Nanotime() int64 { return probe.Nanotime() }

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
