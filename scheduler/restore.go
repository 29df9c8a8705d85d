package scheduler

// Saved is one target's evaluator state, latency and timing, taken from an
// engine that is about to be replaced (a configuration reload) and given to
// its successor, so that an unchanged target keeps its state, its counts
// toward rise/fall, its latency and its place in the schedule.
type Saved struct {
	ev      evalState
	word    uint64
	latency uint64
	last    int64
	since   int64
	next    int64 // due time of the next probe; 0: none known (a follower, or a probe in flight)
}

// State returns the saved health state.
func (s *Saved) State() State { return s.ev.state }

// Save returns target id's state. Call it only while the engine is not
// running: after Run returned, or between Steps on the stepping goroutine.
func (e *Engine) Save(id uint32) Saved {
	s, i := e.locate(id)
	rec := &s.rec[i]
	sv := Saved{
		ev:      rec.ev,
		word:    rec.word.Load(),
		latency: rec.latency.Load(),
		last:    rec.last.Load(),
		since:   rec.since.Load(),
	}
	if rec.flags&(flagActive|flagInFlight) == flagActive {
		sv.next = rec.at
	}
	return sv
}

// Restore gives target id a state saved from another engine: its evaluator
// state, latency and timestamps, and, for a stream leader, the time of its
// next probe, at most one interval ahead (a probe that was in flight, or due
// less than an interval ago, is sent again at once; one due longer ago gets a
// first probe). Call it after New and before the first Step or Run; later
// calls are ignored. A disabled target keeps no state and ignores Restore.
func (e *Engine) Restore(id uint32, sv Saved) {
	if e.started {
		return
	}
	s, i := e.locate(id)
	rec := &s.rec[i]
	if rec.flags&flagDisabled != 0 {
		return
	}
	c := &e.checks[rec.check]
	rec.ev = sv.ev
	if c.Window.Size > 0 && rec.ev.filled() > c.Window.Size {
		rec.ev.info = rec.ev.info&infoLastOK | uint8(c.Window.Size)
	}
	rec.word.Store(sv.word &^ wordDisabled)
	rec.latency.Store(sv.latency)
	rec.last.Store(sv.last)
	rec.since.Store(sv.since)
	if rec.flags&flagActive == 0 {
		return
	}
	now := e.clock.Nanotime()
	switch {
	case sv.next == 0:
		rec.at = now
	case sv.next >= now:
		rec.at = min(sv.next, now+int64(c.Interval))
	case sv.next > now-int64(c.Interval):
		rec.at = now
	}
}
