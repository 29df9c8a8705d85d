package scheduler

import (
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// Bit layout of record.word.
const (
	wordStateMask   = 0x3
	wordDisabled    = 1 << 2
	wordHasResult   = 1 << 3
	wordOutcomeShft = 4  // 4 bits
	wordStreakShft  = 8  // 16 bits
	wordStatusShft  = 24 // 16 bits
	wordStreakOK    = 1 << 40
	wordRetransShft = 41      // 8 bits
	wordCauseShft   = 49      // 4 bits
	wordPassive     = 1 << 53 // the most recent result was passive evidence
	wordOff         = 1 << 54 // the shard does not run the target: it has not applied its addition yet, or has applied its removal
)

// wordDetail packs the detail of the most recent result into word bits:
// its retransmissions, for a local error its cause, and whether it was
// passive evidence.
func wordDetail(r *probe.Result) uint64 {
	w := uint64(r.Retransmits)<<wordRetransShft | uint64(r.Cause&0xf)<<wordCauseShft
	if r.Passive {
		w |= wordPassive
	}
	return w
}

func packWord(st *evalState, disabled, hasResult bool, o probe.Outcome, status uint16) uint64 {
	w := uint64(st.state) | uint64(o&0xf)<<wordOutcomeShft | uint64(st.streak)<<wordStreakShft | uint64(status)<<wordStatusShft
	if disabled {
		w |= wordDisabled
	}
	if hasResult {
		w |= wordHasResult
	}
	if st.lastOK() {
		w |= wordStreakOK
	}
	return w
}

// TargetStatus is a reader's copy of one target's health.
type TargetStatus struct {
	State       State         // current health state
	Disabled    bool          // excluded from probing, evaluation and pool decisions (E6)
	Probed      bool          // at least one result has been applied
	LastOutcome probe.Outcome // outcome of the most recent result: a probe's, or passive evidence's (LastPassive)
	LastStatus  uint16        // HTTP status of the most recent result, 0 if none
	// LastRetransmits is how often the most recent probe's SYN was sent
	// again (T5).
	LastRetransmits int
	// LastCause is why the most recent probe could not run, when its
	// outcome is a LocalError.
	LastCause probe.LocalCause
	// LastPassive says the most recent result was passive evidence
	// ([Engine.Evidence]), not a probe: LastOutcome is the failure seen,
	// and LastProbe still dates the most recent probe.
	LastPassive bool
	Streak      int           // consecutive results with the most recent verdict's kind (a LocalError is no verdict; passive evidence counts as a failure)
	StreakOK    bool          // the streak is a run of successes, else of failures (LastOutcome may be no verdict)
	Latency     time.Duration // latency of the most recent successful probe (µs resolution)
	Smoothed    time.Duration // exponentially smoothed latency of successful probes (E7)
	Since       int64         // Nanotime when the target entered its state
	LastProbe   int64         // Nanotime of the most recent probe result, 0 before the first
}

func (r *record) load() TargetStatus {
	w := r.word.Load()
	l := r.latency.Load()
	return TargetStatus{
		State:           State(w & wordStateMask),
		Disabled:        w&wordDisabled != 0,
		Probed:          w&wordHasResult != 0,
		LastOutcome:     probe.Outcome(w >> wordOutcomeShft & 0xf),
		Streak:          int(uint16(w >> wordStreakShft)),
		StreakOK:        w&wordStreakOK != 0,
		LastStatus:      uint16(w >> wordStatusShft),
		LastRetransmits: int(uint8(w >> wordRetransShft)),
		LastCause:       probe.LocalCause(w >> wordCauseShft & 0xf),
		LastPassive:     w&wordPassive != 0,
		Latency:         time.Duration(l>>32) * time.Microsecond,
		Smoothed:        time.Duration(uint32(l)) * time.Microsecond,
		Since:           r.since.Load(),
		LastProbe:       r.last.Load(),
	}
}

// recordLatency folds a successful probe's latency into the view: the last
// value and an exponentially weighted average with weight 1/4 for the newest.
// A latency that is no round-trip sample (a retransmitted probe's) is only
// the last value, unless the average has nothing else to start from.
func (r *record) recordLatency(d time.Duration, sample bool) {
	us := uint64(d / time.Microsecond)
	if us > 1<<32-1 {
		us = 1<<32 - 1
	}
	avg := us
	if prev := r.latency.Load(); prev != 0 {
		old := int64(prev & (1<<32 - 1))
		avg = uint64(old)
		if sample {
			avg = uint64(old + (int64(us)-old)/4)
		}
	}
	r.latency.Store(us<<32 | avg)
}
