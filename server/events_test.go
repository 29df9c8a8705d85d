package server

import "testing"

func TestEventLogSince(t *testing.T) {
	l := newEventLog(4)
	for i := range 6 {
		l.add(Event{Target: string(rune('a' + i))})
	}
	tests := []struct {
		from      uint64
		limit     int
		want      string
		wantNext  uint64
		wantFirst uint64
	}{
		{0, 0, "cdef", 6, 2}, // the ring keeps the last 4
		{3, 0, "def", 6, 3},  // from the middle
		{0, 2, "ef", 6, 4},   // the newest 2
		{6, 0, "", 6, 0},     // nothing new
		{100, 0, "", 6, 0},   // from the future: nothing, no panic
	}
	for _, tt := range tests {
		evs, next := l.since(tt.from, tt.limit)
		got := ""
		for _, e := range evs {
			got += e.Target
		}
		if got != tt.want || next != tt.wantNext {
			t.Errorf("since(%d, %d) = %q next %d, want %q next %d", tt.from, tt.limit, got, next, tt.want, tt.wantNext)
		}
		if len(evs) > 0 && evs[0].Seq != tt.wantFirst {
			t.Errorf("since(%d, %d): first seq %d, want %d", tt.from, tt.limit, evs[0].Seq, tt.wantFirst)
		}
	}
}
