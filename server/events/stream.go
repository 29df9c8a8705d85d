package events

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/server/web"
	"github.com/sondeprobe/sonde/server/web/api"
)

// Event streams (Server-Sent Events on /api/v1/events).
const (
	// streamBatch is the most events a stream copies out of the log at
	// once: its memory bound besides the connection's buffers.
	streamBatch = 256
	// streamRetry is the reconnection delay suggested to clients.
	streamRetry = 2 * time.Second
	// streamSendBuffer is the socket send buffer of a stream's connection.
	// The kernel would grow it to megabytes for a client that does not
	// read, and a write deadline measures nothing while a buffer takes
	// every write; this is room for a burst of events.
	streamSendBuffer = 16 << 10
	// heartbeatPadBytes is the padding of a heartbeat while stream slots
	// are scarce (see [Streams.heartbeat]).
	heartbeatPadBytes = 32 << 10
)

// heartbeatPad is heartbeatPadBytes of SSE comment lines.
var heartbeatPad = strings.Repeat(":"+strings.Repeat(" ", 62)+"\n", heartbeatPadBytes/64)

// Streams serves an event log as Server-Sent Events (see
// [Streams.ServeHTTP]), each stream in one of slots; it counts the clients
// dropped and ends the streams at shutdown. It is safe for concurrent use.
type Streams struct {
	events    *Log
	slots     *web.Slots
	stall     time.Duration // how long a write to a client may block before it is dropped
	keepAlive time.Duration // the heartbeat period of a quiet stream
	log       *slog.Logger

	dropped atomic.Uint64 // clients dropped for being too slow
	once    sync.Once
	done    chan struct{} // closed when the HTTP server shuts down
}

// NewStreams returns the streams of events, each in one of slots; a
// client whose connection takes no write for stall is dropped, and a
// quiet stream gets a heartbeat every keepAlive.
func NewStreams(events *Log, slots *web.Slots, stall, keepAlive time.Duration, log *slog.Logger) *Streams {
	return &Streams{events: events, slots: slots, stall: stall, keepAlive: keepAlive, log: log, done: make(chan struct{})}
}

// Dropped returns the clients dropped for reading too slowly.
func (s *Streams) Dropped() uint64 { return s.dropped.Load() }

// End makes every stream return, so a graceful shutdown does not wait for
// clients that never hang up.
func (s *Streams) End() { s.once.Do(func() { close(s.done) }) }

// start returns the sequence number a stream starts after: the
// Last-Event-ID of a reconnecting client, else since=, else the newest event
// (a new client sees what happens from now on).
func (s *Streams) start(r *http.Request) (uint64, error) {
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("Last-Event-ID %q: want an event sequence number", v)
		}
		return n, nil
	}
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("since=%q: want an event sequence number", v)
		}
		return n, nil
	}
	return s.events.Last(), nil
}

// ServeHTTP serves the event log as Server-Sent Events: one "id:" (the
// sequence number), "event:" (the kind) and "data:" (the event's JSON) per
// event, a heartbeat comment when nothing happened for a while (see
// [Streams.heartbeat]), an event "lost"
// when a reconnecting client asked for events that fell out of the ring, and
// an event "reset" when it asked for events beyond the newest (numbered by
// an earlier run of the daemon): it then resumes from the newest. A
// client that falls so far behind that the ring wraps past it is told so
// (an event "lost") and dropped, and so is one whose connection accepts no
// data for the stall of NewStreams: it reads at its own pace and never
// slows the daemon.
func (s *Streams) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	after, err := s.start(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w, release := s.slots.Enter(w)
	if release == nil {
		return
	}
	defer release()
	if tc := web.TCPConnOf(r); tc != nil {
		_ = tc.SetWriteBuffer(streamSendBuffer) // a smaller buffer only makes a slow client found sooner
	}

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // tells proxies not to buffer the stream
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	// send runs write and flushes, within the write timeout: a client that
	// accepts nothing for that long is dropped.
	send := func(write func() error) bool {
		if rc.SetWriteDeadline(time.Now().Add(s.stall)) != nil {
			return false
		}
		err := write()
		if err == nil {
			err = bw.Flush()
		}
		if err == nil {
			err = rc.Flush()
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.dropped.Add(1)
			s.log.Warn("event stream client too slow; dropped", "remote", r.RemoteAddr, "stalled", s.stall)
		}
		return err == nil
	}
	if !send(func() error { _, err := fmt.Fprintf(bw, "retry: %d\n\n", streamRetry.Milliseconds()); return err }) {
		return
	}

	if newest := s.events.Last(); after > newest {
		// The client saw events this process never numbered: it restarted
		// and numbers from 1 again. Resume from the newest, and move the
		// client's Last-Event-ID there.
		if !send(func() error {
			_, err := fmt.Fprintf(bw, "id: %d\nevent: reset\ndata: {\"next\":%d}\n\n", newest, newest)
			return err
		}) {
			return
		}
		after = newest
	}

	keepAlive := time.NewTimer(s.keepAlive)
	defer keepAlive.Stop()
	buf := make([]api.Event, 0, streamBatch)
	first := true
	// lostNotice tells the client how many events it missed, with the id of
	// the last of them: a client that reconnects resumes after the loss and
	// is not told about it again.
	lostNotice := func(lost uint64) {
		fmt.Fprintf(bw, "id: %d\nevent: lost\ndata: {\"lost\":%d}\n\n", after+lost, lost)
	}
	for {
		evs, lost, wait := s.events.read(after, buf)
		if lost > 0 && !first {
			// The ring wrapped past this client while it read: it is too
			// slow. It learns what it lost, and goes.
			s.dropped.Add(1)
			s.log.Warn("event stream client too slow; dropped", "remote", r.RemoteAddr, "lost", lost)
			send(func() error { lostNotice(lost); return nil })
			return
		}
		first = false
		if len(evs) > 0 || lost > 0 {
			ok := send(func() error {
				if lost > 0 { // a reconnecting client asked for events the ring no longer has
					lostNotice(lost)
				}
				for i := range evs {
					if err := writeEvent(bw, &evs[i]); err != nil {
						return err
					}
				}
				return nil
			})
			if !ok {
				return
			}
			if len(evs) > 0 {
				after = evs[len(evs)-1].Seq
			}
			keepAlive.Reset(s.keepAlive)
		}
		if wait == nil {
			continue
		}
		select {
		case <-wait:
		case <-keepAlive.C:
			if !send(func() error { return s.heartbeat(bw) }) {
				return
			}
			keepAlive.Reset(s.keepAlive)
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		}
	}
}

// heartbeat writes a comment, which SSE clients ignore, so that the write
// deadline has something to measure on a quiet stream: a client that does
// not read is dropped once its connection's buffers are full. A comment
// of a few bytes every few seconds would take hours to fill them, so while
// the stream slots are scarce (three quarters taken) the heartbeat carries
// heartbeatPadBytes of padding: then a client that does not read is found
// within a few heartbeats and its slot freed, and a client that reads pays
// a few kilobytes a second until the slots are free again.
func (s *Streams) heartbeat(w *bufio.Writer) error {
	if _, err := w.WriteString(": keep-alive\n"); err != nil {
		return err
	}
	if sl := s.slots; sl.InUse()*4 >= sl.Max()*3 {
		if _, err := w.WriteString(heartbeatPad); err != nil {
			return err
		}
	}
	_, err := w.WriteString("\n")
	return err
}

// writeEvent writes one event as an SSE message. The JSON of an event is one
// line: encoding/json escapes line breaks inside strings.
func writeEvent(w *bufio.Writer, e *api.Event) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	w.WriteString("id: ")
	w.WriteString(strconv.FormatUint(e.Seq, 10))
	w.WriteString("\nevent: ")
	w.WriteString(e.Kind)
	w.WriteString("\ndata: ")
	w.Write(data)
	_, err = w.WriteString("\n\n")
	return err
}
