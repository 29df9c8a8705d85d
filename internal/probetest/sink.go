// Package probetest holds fakes for tests of probers and of what consumes
// their results. Only tests import it.
package probetest

import (
	"sync"
	"sync/atomic"

	"github.com/sondeprobe/sonde/probe"
)

// Sink is a [probe.Sink] that keeps every result it is given, in order. It is
// safe for concurrent use.
type Sink struct {
	mu  sync.Mutex
	res []probe.Result
	n   atomic.Int64
}

// Deliver keeps r.
func (s *Sink) Deliver(r probe.Result) {
	s.mu.Lock()
	s.res = append(s.res, r)
	s.mu.Unlock()
	s.n.Add(1)
}

// Count returns how many results were delivered since the sink was made,
// including those already taken.
func (s *Sink) Count() int { return int(s.n.Load()) }

// Take returns the results kept since the last Take and forgets them.
func (s *Sink) Take() []probe.Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.res
	s.res = nil
	return r
}

// ByID returns the last kept result of every target id.
func (s *Sink) ByID() map[uint32]probe.Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[uint32]probe.Result, len(s.res))
	for _, r := range s.res {
		m[r.ID] = r
	}
	return m
}

// Counter is a [probe.Sink] that only counts results; benchmarks use it. It
// is safe for concurrent use.
type Counter struct{ n atomic.Int64 }

// Deliver counts r.
func (c *Counter) Deliver(probe.Result) { c.n.Add(1) }

// Count returns the number of results delivered.
func (c *Counter) Count() int64 { return c.n.Load() }

// Discard is a [probe.Sink] that drops every result.
type Discard struct{}

// Deliver drops r.
func (Discard) Deliver(probe.Result) {}
