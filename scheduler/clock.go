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
// Conversions agree with each other: one reading gives one time however
// often it is converted, and a later reading a time no earlier, unless the
// wall clock was stepped in between (see [RealClock.Wall]).
func WallTime(c Clock, ns int64) time.Time {
	if w, ok := c.(wallClock); ok {
		return w.Wall(ns)
	}
	now := c.Now()
	return now.Add(time.Duration(ns - c.Nanotime()))
}

// wallClock is a [Clock] that converts its own readings into wall-clock time.
type wallClock interface {
	Wall(ns int64) time.Time
}

// RealClock is the system clock. Nanotime is the kernel's CLOCK_MONOTONIC
// ([probe.Nanotime]). It is safe for concurrent use.
type RealClock struct {
	// off is wall-clock minus monotonic nanoseconds, as measured when it
	// last moved; 0 before the first conversion.
	off atomic.Int64
}

// NewRealClock returns the system clock.
func NewRealClock() *RealClock { return &RealClock{} }

// wallSlack is how far the wall clock may drift from the monotonic clock
// before conversions follow it. Two clocks read one after the other give an
// offset that differs by nanoseconds to microseconds from one reading to
// the next; converting with each fresh one gave one instant a different time
// each time, so a route event could be stamped before the state change that
// caused it. Both clocks run at the same (NTP-adjusted) rate, so the offset
// moves only when the wall clock is stepped, or after a suspend.
const wallSlack = time.Millisecond

// Wall converts the monotonic reading ns into wall-clock time with the
// clocks' offset as last measured. It measures the offset again on each
// call and moves it when the wall clock has been stepped by more than a
// millisecond, so every conversion of an instant gives the same time.
func (c *RealClock) Wall(ns int64) time.Time {
	before := probe.Nanotime()
	wall := time.Now().UnixNano()
	after := probe.Nanotime()
	return time.Unix(0, ns+c.offset(wall, before, after))
}

// offset returns the offset to convert with, given a wall-clock reading
// taken between the monotonic readings before and after.
func (c *RealClock) offset(wall, before, after int64) int64 {
	cur := c.off.Load()
	if cur != 0 && after-before > int64(wallSlack) {
		return cur // the readings were interrupted: too coarse to tell a step
	}
	m := wall - (before + (after-before)/2)
	if d := m - cur; cur != 0 && d >= -int64(wallSlack) && d <= int64(wallSlack) {
		return cur
	}
	if c.off.CompareAndSwap(cur, m) {
		return m
	}
	return c.off.Load() // another conversion measured the same step
}

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
