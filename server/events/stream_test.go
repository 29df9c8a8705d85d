package events

import (
	"bufio"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/server/web"
)

// TestHeartbeatPaddedOnlyUnderPressure checks that a heartbeat is a short
// comment while stream slots are plentiful, and carries padding once three
// quarters are taken.
func TestHeartbeatPaddedOnlyUnderPressure(t *testing.T) {
	t.Parallel()
	slots := web.NewSlots("stream", "event streams", 4, time.Second, time.Second)
	s := NewStreams(NewLog(16), slots, time.Second, time.Hour, slog.New(slog.DiscardHandler))
	var b strings.Builder
	w := bufio.NewWriter(&b)
	heartbeat := func() string {
		b.Reset()
		if err := s.heartbeat(w); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		return b.String()
	}
	if got := heartbeat(); got != ": keep-alive\n\n" {
		t.Errorf("heartbeat with every slot free: %q", got)
	}
	for range 3 {
		slots.Enter(httptest.NewRecorder())
	}
	got := heartbeat()
	if len(got) < heartbeatPadBytes || !strings.HasPrefix(got, ": keep-alive\n") || !strings.HasSuffix(got, "\n\n") {
		t.Errorf("heartbeat with 3 of 4 slots taken: %d bytes, want a comment of at least %d", len(got), heartbeatPadBytes)
	}
	for line := range strings.SplitSeq(strings.TrimSuffix(got, "\n\n"), "\n") {
		if !strings.HasPrefix(line, ":") {
			t.Fatalf("padding line %q is not an SSE comment", line)
		}
	}
}
