package syn

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sondeprobe/sonde/probe"
)

var _ probe.Settler = (*Prober)(nil)

// settlement is what the prober tells the scheduler about the probes that
// go unanswered (see [probe.Settler]): how far the reply reader has read,
// and when replies were lost on this host.
type settlement struct {
	// read is the CLOCK_MONOTONIC ns up to which every reply the capture
	// received has been read and delivered; 0 before the first poll.
	read atomic.Int64

	mu       sync.Mutex                // serialises writers of episodes
	episodes atomic.Pointer[[]episode] // recent losses, oldest first; read without the lock
}

// episode is a span of CLOCK_MONOTONIC ns in which the capture lost replies.
type episode struct{ from, to int64 }

// maxEpisodes bounds the losses remembered. Only the most recent matter: a
// probe's deadline is at most seconds past by the time the scheduler asks,
// and a run of losses closer together than episodeGap is one episode.
const (
	maxEpisodes = 64
	episodeGap  = int64(10e6) // 10 ms
)

// Settled returns the time up to which the reply reader has read every
// reply the capture received: a probe whose deadline is at or before it and
// that has no result was not answered in time, as far as this host knows.
func (p *Prober) Settled() int64 { return p.settle.read.Load() }

// Expired tells whether the silence of r's probe may be this host's doing:
// CauseLate when its SYN left after half its time had passed, CauseBuffers
// when a retransmission could not be sent for lack of buffers, CauseCapture
// when the capture lost replies between the probe's send and its deadline.
// Otherwise the probe timed out on the target's account (CauseNone).
func (p *Prober) Expired(r probe.Request) probe.LocalCause {
	st, ok := p.probes.get(r.ID)
	if !ok || st.gen.Load() != r.Gen {
		return probe.CauseNone
	}
	sent := st.sent.Load()
	switch {
	case sent&answered != 0:
		return probe.CauseNone
	case sent&sentLate != 0:
		return probe.CauseLate
	case sent&resendErr != 0:
		return probe.CauseBuffers
	case p.lostBetween(r.Sent, r.Deadline):
		return probe.CauseCapture
	}
	return probe.CauseNone
}

// lost records that the capture lost replies between from and to.
func (p *Prober) lost(from, to int64) {
	s := &p.settle
	s.mu.Lock()
	defer s.mu.Unlock()
	var eps []episode
	if cur := s.episodes.Load(); cur != nil {
		eps = *cur
	}
	next := make([]episode, 0, min(len(eps)+1, maxEpisodes))
	start := max(0, len(eps)+1-maxEpisodes)
	next = append(next, eps[start:]...)
	if n := len(next); n > 0 && from <= next[n-1].to+episodeGap {
		next[n-1].from = min(next[n-1].from, from)
		next[n-1].to = max(next[n-1].to, to)
	} else {
		next = append(next, episode{from, to})
	}
	s.episodes.Store(&next)
}

// lostBetween reports whether the capture lost replies at any time in
// [from, to].
func (p *Prober) lostBetween(from, to int64) bool {
	eps := p.settle.episodes.Load()
	if eps == nil {
		return false
	}
	return slices.ContainsFunc(*eps, func(e episode) bool { return e.from <= to && e.to >= from })
}
