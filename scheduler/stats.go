package scheduler

import (
	"sync/atomic"
	"time"
)

// LatenessBuckets are the upper bounds of the scheduler-lateness histogram:
// how long after its due time a probe was handed to its prober.
var LatenessBuckets = [...]time.Duration{
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// shardCounts are a shard's tallies, kept in plain fields on the hot path.
type shardCounts struct {
	dispatched, results, timeouts, stale, late, transitions, retransmits uint64
	rechecks, evidence, passiveIgnored                                   uint64
	lateSum, lateMax                                                     int64
	lateCount                                                            [len(LatenessBuckets) + 1]uint64
}

// cacheLine pads hot atomics apart so that writers and readers do not share
// a cache line.
type cacheLine [64]byte

// shardStats are a shard's published counters: the shard stores its tallies
// after every step; readers load them at any time.
type shardStats struct {
	_          cacheLine
	dispatched atomic.Uint64
	results    atomic.Uint64 // results applied (answers and timeouts)
	timeouts   atomic.Uint64
	stale      atomic.Uint64 // answers for a probe that was no longer in flight
	late       atomic.Uint64 // answers that came after their deadline
	transition atomic.Uint64
	retransmit atomic.Uint64
	rechecks   atomic.Uint64
	evidence   atomic.Uint64
	ignored    atomic.Uint64 // rechecks and evidence that changed nothing
	lateSum    atomic.Int64  // nanoseconds
	lateMax    atomic.Int64
	lateCount  [len(LatenessBuckets) + 1]atomic.Uint64 // not cumulative; last is +Inf
	_          cacheLine
}

// observeLateness records one probe's lateness in nanoseconds.
func (s *shard) observeLateness(ns int64) {
	if ns < 0 {
		ns = 0
	}
	b := 0
	for b < len(LatenessBuckets) && ns > int64(LatenessBuckets[b]) {
		b++
	}
	c := &s.count
	c.lateCount[b]++
	c.lateSum += ns
	c.lateMax = max(c.lateMax, ns)
}

// publish stores the shard's tallies for readers.
func (s *shard) publish() {
	c, p := &s.count, &s.stats
	p.dispatched.Store(c.dispatched)
	p.results.Store(c.results)
	p.timeouts.Store(c.timeouts)
	p.stale.Store(c.stale)
	p.late.Store(c.late)
	p.transition.Store(c.transitions)
	p.retransmit.Store(c.retransmits)
	p.rechecks.Store(c.rechecks)
	p.evidence.Store(c.evidence)
	p.ignored.Store(c.passiveIgnored)
	p.lateSum.Store(c.lateSum)
	p.lateMax.Store(c.lateMax)
	for i := range c.lateCount {
		p.lateCount[i].Store(c.lateCount[i])
	}
}

// Stats are the engine's counters, summed over shards.
type Stats struct {
	Targets     int    // targets in the table
	Shards      int    // shards the targets are split over
	Dispatched  uint64 // probes handed to probers
	Results     uint64 // probe outcomes applied, timeouts included; never more than Dispatched
	Timeouts    uint64 // probes that reached their deadline without an answer
	Stale       uint64 // answers dropped because their probe was no longer in flight
	Late        uint64 // answers dropped because they completed after the deadline
	Invalid     uint64 // answers for an id the engine does not have
	Overflows   uint64 // answers that found their shard's result ring full and took the slower overflow path
	Transitions uint64 // state changes
	Retransmits uint64 // probes sent again after their retransmission timeout (T5)
	Rechecks    uint64 // probes that [Engine.Recheck] pulled forward
	Evidence    uint64 // passive failures ([Engine.Evidence]) applied as failed probes
	// PassiveIgnored counts the rechecks and passive evidence that changed
	// nothing: their target was gone, disabled or (a recheck) unhealthy,
	// its stream had a probe out or one due as soon, or the evidence was
	// older than the target's latest probe result.
	PassiveIgnored uint64

	// Lateness is the histogram of how late probes were dispatched:
	// LatenessCounts[i] counts probes with lateness ≤ LatenessBuckets[i] (and
	// above the previous bound); the last element counts the rest.
	LatenessCounts [len(LatenessBuckets) + 1]uint64
	LatenessSum    time.Duration
	LatenessMax    time.Duration
}

// LatenessQuantile estimates the q-quantile (0..1) of dispatch lateness from
// the histogram, interpolating linearly inside a bucket.
func (s *Stats) LatenessQuantile(q float64) time.Duration {
	var total uint64
	for _, c := range s.LatenessCounts {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var seen float64
	lower := time.Duration(0)
	for i, c := range s.LatenessCounts {
		upper := s.LatenessMax
		if i < len(LatenessBuckets) {
			upper = min(LatenessBuckets[i], s.LatenessMax)
		}
		if c > 0 && seen+float64(c) >= rank {
			frac := (rank - seen) / float64(c)
			return lower + time.Duration(frac*float64(upper-lower))
		}
		seen += float64(c)
		if i < len(LatenessBuckets) {
			lower = LatenessBuckets[i]
		}
	}
	return s.LatenessMax
}
