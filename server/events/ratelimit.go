package events

import (
	"sync/atomic"
	"time"
)

// RateLimit lets one event through every Period and counts the others. It
// is safe for concurrent use; the zero Period lets every event through.
type RateLimit struct {
	Period  time.Duration
	next    atomic.Int64 // UnixNano from which the next event may pass
	skipped atomic.Uint64
}

// Allow reports whether an event at now may pass, and how many were held
// back since the last one that did.
func (l *RateLimit) Allow(now time.Time) (skipped uint64, ok bool) {
	next := l.next.Load()
	if now.UnixNano() < next || !l.next.CompareAndSwap(next, now.Add(l.Period).UnixNano()) {
		l.skipped.Add(1)
		return 0, false
	}
	return l.skipped.Swap(0), true
}
