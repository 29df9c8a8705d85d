package server

import (
	"sync"
	"time"
)

// Event is a target's state change as the API shows it.
type Event struct {
	Time    time.Time `json:"time"`
	Target  string    `json:"target"`         // address:port
	Host    string    `json:"host,omitempty"` // host name the target was given as
	Pools   []string  `json:"pools"`
	Check   string    `json:"check"`
	From    string    `json:"from"`
	To      string    `json:"to"`
	Reason  string    `json:"reason"`           // outcome of the probe that caused it
	Status  int       `json:"status,omitempty"` // its HTTP status
	Streak  int       `json:"consecutive"`      // consecutive results of that kind
	Seq     uint64    `json:"seq"`              // position in the daemon's event stream
	Message string    `json:"error,omitempty"`  // why the probe failed, when known
}

// eventLog keeps the most recent state changes in a ring. It is safe for
// concurrent use; state changes are rare next to probes, so a mutex is fine.
type eventLog struct {
	mu   sync.Mutex
	buf  []Event
	next uint64 // sequence number of the next event
}

func newEventLog(size int) *eventLog { return &eventLog{buf: make([]Event, size)} }

func (l *eventLog) add(e Event) {
	l.mu.Lock()
	e.Seq = l.next
	l.buf[l.next%uint64(len(l.buf))] = e
	l.next++
	l.mu.Unlock()
}

// since returns up to limit events with sequence ≥ from, oldest first, and the
// sequence number to ask for next.
func (l *eventLog) since(from uint64, limit int) ([]Event, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := uint64(0)
	if l.next > uint64(len(l.buf)) {
		first = l.next - uint64(len(l.buf))
	}
	from = min(max(from, first), l.next)
	if limit > 0 && l.next-from > uint64(limit) {
		from = l.next - uint64(limit)
	}
	out := make([]Event, 0, l.next-from)
	for s := from; s < l.next; s++ {
		out = append(out, l.buf[s%uint64(len(l.buf))])
	}
	return out, l.next
}
