package scheduler

import (
	"math/bits"
	"time"
)

// evalState is one target's evaluator state: the consecutive run of equal
// results (E1) and the recent-results bitmap (E2). It is owned by the target's
// shard.
type evalState struct {
	hist   uint32 // recent results, bit 0 the newest, 1 = success
	streak uint16 // consecutive results equal to the last one, saturating
	state  State
	info   uint8 // infoLastOK | results held in hist (up to the window size)
}

// infoLastOK marks in evalState.info that the most recent result succeeded.
const infoLastOK = 0x80

// lastOK reports whether the most recent result was a success.
func (st *evalState) lastOK() bool { return st.info&infoLastOK != 0 }

// filled returns how many results hist holds, up to the window size.
func (st *evalState) filled() int { return int(st.info &^ infoLastOK) }

// observe records one probe result and reports whether the state changed.
// It implements E1 (consecutive rise/fall, rise 1 = healthy at once) and E2
// (sliding window: healthy with at least Required successes among the last Size
// results, unhealthy once Required successes can no longer be reached).
func (c *Timing) observe(st *evalState, ok bool) bool {
	if ok == st.lastOK() && st.streak > 0 {
		if st.streak < ^uint16(0) {
			st.streak++
		}
	} else {
		st.streak = 1
		st.info &^= infoLastOK
		if ok {
			st.info |= infoLastOK
		}
	}
	st.hist <<= 1
	if ok {
		st.hist |= 1
	}
	prev := st.state
	if c.Window.Size > 0 {
		if st.filled() < c.Window.Size {
			st.info++
		}
		n := st.filled()
		succ := bits.OnesCount32(st.hist & uint32(1<<n-1))
		switch {
		case succ >= c.Window.Required:
			st.state = Healthy
		case n-succ >= c.Window.Size-c.Window.Required+1:
			st.state = Unhealthy
		}
		return st.state != prev
	}
	switch {
	case ok && int(st.streak) >= c.Rise:
		st.state = Healthy
	case !ok && int(st.streak) >= c.Fall:
		st.state = Unhealthy
	}
	return st.state != prev
}

// gap returns the time from a completed probe to the next one for a target in
// evaluator state st, before jitter: the unhealthy interval while unhealthy,
// the fast re-check interval while a failure is being confirmed (E4), and the
// interval otherwise.
func (c *Timing) gap(st *evalState) time.Duration {
	switch {
	case st.state == Unhealthy:
		if c.UnhealthyInterval > 0 {
			return c.UnhealthyInterval
		}
	case !st.lastOK() && st.streak > 0 && c.FastRecheck > 0:
		return c.FastRecheck
	}
	return c.Interval
}

// due returns when the next probe goes for a target in evaluator state st,
// before jitter, after a probe sent at sent completed at done: the gap from
// the probe's completion or, at a fixed rate, from its send.
func (c *Timing) due(st *evalState, sent, done int64) int64 {
	from := done
	if c.Cadence == FixedRate {
		from = sent
	}
	return from + int64(c.gap(st))
}
