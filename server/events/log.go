package events

import (
	"sync"

	"github.com/sondeprobe/sonde/server/web/api"
)

// Log keeps the most recent events in a ring, numbers them, and hands
// each to the event webhooks that want it. It is safe for concurrent use;
// events are rare next to probes, so a mutex is fine. Readers that follow
// the log (event streams) wait on the channel of [Log.read].
type Log struct {
	mu    sync.Mutex
	buf   []api.Event
	next  uint64        // sequence number of the next event; the first is 1
	wake  chan struct{} // closed by the next add; nil while nobody waits
	hooks []*Hook       // event webhooks, fed in sequence order
}

// NewLog returns an empty log that keeps the size most recent events.
func NewLog(size int) *Log { return &Log{buf: make([]api.Event, size), next: 1} }

// Add numbers e, keeps it, offers it to the webhooks and wakes the readers.
func (l *Log) Add(e api.Event) {
	l.mu.Lock()
	e.Seq = l.next
	l.buf[l.next%uint64(len(l.buf))] = e
	l.next++
	for _, h := range l.hooks {
		h.offer(&e)
	}
	if l.wake != nil {
		close(l.wake)
		l.wake = nil
	}
	l.mu.Unlock()
}

// setHooks replaces the webhooks that new events are offered to.
func (l *Log) setHooks(hooks []*Hook) {
	l.mu.Lock()
	l.hooks = hooks
	l.mu.Unlock()
}

// Waiting reports whether a reader waits for the next event (a stream
// that has read every event).
func (l *Log) Waiting() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.wake != nil
}

// oldest returns the sequence number of the oldest event kept (l.next when
// none is). l.mu is held.
func (l *Log) oldest() uint64 {
	if n := uint64(len(l.buf)); l.next-1 > n {
		return l.next - n
	}
	return 1
}

// Last returns the sequence number of the newest event, 0 before the first.
func (l *Log) Last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// Window returns where a poll's page lies: the events from from to end
// (excluded) are the oldest after sequence number since, at most limit of
// them (0: every one kept), and lost counts the events after since that
// fell out of the ring before this call. end-1 is the sequence number to
// ask for next: the last one of the page, or the newest one when the page
// is empty (so a client that asks from beyond the newest event, after a
// restart, starts again from the present). The page's events are read
// with [Log.CopyRange].
func (l *Log) Window(since uint64, limit int) (from, end, lost uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	newest := l.next - 1
	if since >= newest {
		return newest + 1, newest + 1, 0
	}
	from = since + 1
	if first := l.oldest(); from < first {
		lost, from = first-from, first
	}
	n := newest + 1 - from
	if limit > 0 {
		n = min(n, uint64(limit))
	}
	return from, from + n, lost
}

// CopyRange copies into buf the events from sequence number from on,
// before end, as many as fit. It reports false when event from is no
// longer in the ring.
func (l *Log) CopyRange(from, end uint64, buf []api.Event) ([]api.Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if from < l.oldest() {
		return buf[:0], false
	}
	return l.copyLocked(from, end, buf), true
}

// copyLocked copies into buf the events from sequence number from on,
// before end and the next event, as many as fit. Called with l.mu held.
func (l *Log) copyLocked(from, end uint64, buf []api.Event) []api.Event {
	evs := buf[:0]
	for s := from; s < min(end, l.next) && len(evs) < cap(buf); s++ {
		evs = append(evs, l.buf[s%uint64(len(l.buf))])
	}
	return evs
}

// read copies into buf the oldest events after sequence number after, as
// many as fit, and reports how many events after after were lost to the
// ring. When there is nothing new, it returns a channel that is closed when
// the next event is added.
func (l *Log) read(after uint64, buf []api.Event) (evs []api.Event, lost uint64, wait <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := after + 1
	if first := l.oldest(); from < first {
		lost, from = first-from, first
	}
	evs = l.copyLocked(from, l.next, buf)
	if len(evs) == 0 {
		if l.wake == nil {
			l.wake = make(chan struct{})
		}
		wait = l.wake
	}
	return evs, lost, wait
}

// Newest returns the newest events that keep selects (every one when keep
// is nil), at most n, newest first.
func (l *Log) Newest(n int, keep func(*api.Event) bool) []api.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []api.Event
	for s := l.next - 1; s >= l.oldest() && s > 0 && len(out) < n; s-- {
		e := &l.buf[s%uint64(len(l.buf))]
		if keep == nil || keep(e) {
			out = append(out, *e)
		}
	}
	return out
}
