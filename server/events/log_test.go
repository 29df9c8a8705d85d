package events

import (
	"testing"

	"github.com/sondeprobe/sonde/server/web/api"
)

// page reads a poll's page whole, as the API's poll of events (server/apiv1) writes it.
func (l *Log) page(since uint64, limit int) (evs []api.Event, next, lost uint64) {
	from, end, lost := l.Window(since, limit)
	evs, _ = l.CopyRange(from, end, make([]api.Event, 0, end-from))
	return evs, end - 1, lost
}

// TestEventLogCopyRange checks the reads a poll's page is written with:
// chunks as large as the buffer, up to the page's end, and false once the
// ring went past the page.
func TestEventLogCopyRange(t *testing.T) {
	t.Parallel()
	l := NewLog(4)
	for range 3 {
		l.Add(api.Event{})
	}
	from, end, _ := l.Window(0, 0)
	evs, ok := l.CopyRange(from, end, make([]api.Event, 0, 2))
	if !ok || len(evs) != 2 || evs[0].Seq != 1 {
		t.Fatalf("first chunk: %d events from %d (ok %v), want 2 from 1", len(evs), evs[0].Seq, ok)
	}
	for range 3 {
		l.Add(api.Event{}) // seq 4..6: the ring keeps 3..6
	}
	if evs, ok = l.CopyRange(3, end, make([]api.Event, 0, 2)); !ok || len(evs) != 1 || evs[0].Seq != 3 {
		t.Errorf("last chunk: %d events (ok %v), want event 3 alone: the page ends where it was asked", len(evs), ok)
	}
	if _, ok = l.CopyRange(2, end, make([]api.Event, 0, 2)); ok {
		t.Error("a chunk of events no longer kept: ok, want false")
	}
}

// TestEventLogPage pins polling: since returns the oldest events
// after it, up to limit, and says how many fell out of the ring.
func TestEventLogPage(t *testing.T) {
	t.Parallel()
	l := NewLog(4)
	for i := range 6 { // seq 1..6 = a..f; the ring keeps c..f
		l.Add(api.Event{Target: string(rune('a' + i))})
	}
	tests := []struct {
		name     string
		since    uint64
		limit    int
		want     string
		wantNext uint64
		wantLost uint64
	}{
		{"from the start: the oldest kept, and two lost", 0, 0, "cdef", 6, 2},
		{"oldest first up to limit", 0, 2, "cd", 4, 2},
		{"the next page", 4, 2, "ef", 6, 0},
		{"from the middle", 3, 0, "def", 6, 0},
		{"just wrapped", 2, 1, "c", 3, 0},
		{"one lost", 1, 0, "cdef", 6, 1},
		{"nothing new", 6, 0, "", 6, 0},
		{"from the future (a restarted daemon): start again from now", 100, 0, "", 6, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, next, lost := l.page(tt.since, tt.limit)
			got := ""
			for i, e := range evs {
				got += e.Target
				if want := tt.since + lost + uint64(i) + 1; e.Seq != want {
					t.Errorf("event %d: seq %d, want %d", i, e.Seq, want)
				}
			}
			if got != tt.want || next != tt.wantNext || lost != tt.wantLost {
				t.Errorf("page(%d, %d) = %q next %d lost %d, want %q next %d lost %d",
					tt.since, tt.limit, got, next, lost, tt.want, tt.wantNext, tt.wantLost)
			}
		})
	}
}

// TestEventLogRead checks the stream side: a batch at most as large as the
// buffer, a wait channel when there is nothing new, closed by the next add.
func TestEventLogRead(t *testing.T) {
	t.Parallel()
	l := NewLog(8)
	evs, lost, wait := l.read(0, make([]api.Event, 0, 4))
	if len(evs) != 0 || lost != 0 || wait == nil {
		t.Fatalf("empty log: %d events, lost %d, wait %v", len(evs), lost, wait)
	}
	for range 6 {
		l.Add(api.Event{})
	}
	select {
	case <-wait:
	default:
		t.Fatal("add did not close the wait channel")
	}
	evs, _, wait = l.read(0, make([]api.Event, 0, 4))
	if len(evs) != 4 || evs[3].Seq != 4 || wait != nil {
		t.Fatalf("read: %d events ending at %d, wait %v; want 4 ending at 4 and no wait", len(evs), evs[len(evs)-1].Seq, wait)
	}
	for range 10 {
		l.Add(api.Event{})
	}
	if _, lost, _ := l.read(4, make([]api.Event, 0, 4)); lost != 4 {
		t.Fatalf("reader at 4 after 16 events in a ring of 8: lost %d, want 4", lost)
	}
}
