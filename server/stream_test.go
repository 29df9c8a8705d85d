package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/server/apiv1"
	"github.com/sondeprobe/sonde/server/web/api"
)

// sseMessage is one Server-Sent Events message as a client reads it.
type sseMessage struct {
	id, event, data string
	retry           string
	comment         bool
	at              time.Time // when the client read it
}

// sseClient follows a stream and hands every message to a channel.
type sseClient struct {
	resp *http.Response
	msgs chan sseMessage
}

// openStream connects to url with Accept: text/event-stream and extra
// headers, and reads messages until the test ends.
func openStream(t *testing.T, url string, header http.Header) *sseClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %q: %s", url, resp.Status, resp.Header.Get("Content-Type"), body)
	}
	c := &sseClient{resp: resp, msgs: make(chan sseMessage, 1024)}
	go func() {
		defer close(c.msgs)
		sc := bufio.NewScanner(resp.Body)
		var m sseMessage
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if m != (sseMessage{}) {
					m.at = time.Now()
					c.msgs <- m
				}
				m = sseMessage{}
			case strings.HasPrefix(line, ":"):
				m.comment = true
			case strings.HasPrefix(line, "id: "):
				m.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				m.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				m.data = line[6:]
			case strings.HasPrefix(line, "retry: "):
				m.retry = line[7:]
			}
		}
	}()
	return c
}

// next returns the next message that satisfies ok, failing after timeout.
func (c *sseClient) next(t *testing.T, timeout time.Duration, what string, ok func(sseMessage) bool) sseMessage {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case m, open := <-c.msgs:
			if !open {
				t.Fatalf("stream ended before %s", what)
			}
			if ok(m) {
				return m
			}
		case <-deadline:
			t.Fatalf("no %s within %v", what, timeout)
		}
	}
}

func (m sseMessage) decode(t *testing.T) api.Event {
	t.Helper()
	var e api.Event
	if err := json.Unmarshal([]byte(m.data), &e); err != nil {
		t.Fatalf("event data %q: %v", m.data, err)
	}
	if m.id != strconv.FormatUint(e.Seq, 10) || m.event != e.Kind {
		t.Fatalf("message id %q event %q for event seq %d kind %q", m.id, m.event, e.Seq, e.Kind)
	}
	return e
}

// TestEventStreamStateAndRoute is the acceptance test of the event stream: a client of
// the stream sees a state change and the route change it causes within a
// second of the probe that caused them.
func TestEventStreamStateAndRoute(t *testing.T) {
	t.Parallel()
	good, bad := newBackend(t), newBackend(t)
	td := startDaemon(t, fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 100ms, timeout: 1s, rise: 1, fall: 1}
pools:
  - {name: api, check: web, max_unhealthy_percent: 50, targets: [%q, %q]}
`, good.addr(), bad.addr()))
	td.waitPool(t, "api", "both healthy", func(p api.PoolJSON) bool { return p.Healthy == 2 })
	c := openStream(t, td.http.URL+"/api/v1/events", nil)

	bad.failing.Store(true)
	// The bound is generous for a loaded machine: events reach a stream
	// within milliseconds of the probe that caused them.
	const within = time.Second
	state := c.next(t, 20*time.Second, "state event", func(m sseMessage) bool { return m.event == api.KindState })
	se := state.decode(t)
	if se.Target != bad.addr() || se.From != "healthy" || se.To != "unhealthy" || se.Reason != "http_status" {
		t.Fatalf("state event %+v: want %s healthy → unhealthy by http_status", se, bad.addr())
	}
	if d := state.at.Sub(se.Time); d > within {
		t.Errorf("state event read %v after the probe that caused it, want within %v", d, within)
	}
	route := c.next(t, 5*time.Second, "route event", func(m sseMessage) bool { return m.event == api.KindRoute })
	re := route.decode(t)
	if re.Target != bad.addr() || re.From != "routed" || re.To != "removed" || re.Reason != "unhealthy" || re.Seq <= se.Seq ||
		len(re.Pools) != 1 || re.Pools[0] != "api" {
		t.Fatalf("route event %+v: want %s routed → removed in api because unhealthy, after seq %d", re, bad.addr(), se.Seq)
	}
	if re.Time.Before(se.Time) {
		t.Errorf("route event at %v, before the state change behind it (%v)", re.Time, se.Time)
	}
	if d := route.at.Sub(re.Time); d > within {
		t.Errorf("route event read %v after the state change behind it, want within %v", d, within)
	}

	// Polling shows the same events, oldest first.
	var page api.EventsPage
	td.getJSON(t, fmt.Sprintf("/api/v1/events?since=%d&limit=2", se.Seq-1), &page)
	if len(page.Events) != 2 || page.Events[0].Seq != se.Seq || page.Events[0].Kind != api.KindState || page.Next != page.Events[1].Seq {
		t.Fatalf("poll from %d: %+v", se.Seq-1, page)
	}
}

// TestEventsPreferredAndFailOpen checks that the pool policy's other
// decisions reach clients as events too: members ranked into the preferred
// set (E7), and a pool failing open when every member fails and back when
// one recovers (P2), in the stream and in a poll alike.
func TestEventsPreferredAndFailOpen(t *testing.T) {
	t.Parallel()
	a, b := newBackend(t), newBackend(t)
	td := startDaemon(t, fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 100ms, timeout: 1s, rise: 1, fall: 1}
pools:
  - {name: api, check: web, fail_open: true, latency_margin: 10s, targets: [%q, %q]}
`, a.addr(), b.addr()))
	// From the first event on: the first ranking follows the targets'
	// first results.
	c := openStream(t, td.http.URL+"/api/v1/events?since=0", nil)
	type decision struct{ kind, target, from, to, reason string }
	seen := map[decision]api.Event{}
	wait := func(want ...decision) {
		t.Helper()
		for _, w := range want {
			for {
				if _, ok := seen[w]; ok {
					break
				}
				m := c.next(t, 20*time.Second, fmt.Sprintf("%+v", w), func(m sseMessage) bool { return m.event != "" })
				e := m.decode(t)
				if e.Kind != api.KindState && (len(e.Pools) != 1 || e.Pools[0] != "api") {
					t.Fatalf("%s event for pools %v, want api", e.Kind, e.Pools)
				}
				seen[decision{e.Kind, e.Target, e.From, e.To, e.Reason}] = e
			}
		}
	}
	wait(decision{api.KindPreferred, a.addr(), "not_preferred", "preferred", "latency"},
		decision{api.KindPreferred, b.addr(), "not_preferred", "preferred", "latency"})

	a.failing.Store(true)
	wait(decision{api.KindPreferred, a.addr(), "preferred", "not_preferred", "unhealthy"})
	b.failing.Store(true)
	// The member whose change flipped it is named, with its new state.
	wait(decision{api.KindFailOpen, b.addr(), "normal", "failing_open", "unhealthy"})
	b.failing.Store(false)
	wait(decision{api.KindFailOpen, b.addr(), "failing_open", "normal", "healthy"})

	var page api.EventsPage
	td.getJSON(t, "/api/v1/events?since=0", &page)
	polled := map[uint64]api.Event{}
	for _, e := range page.Events {
		polled[e.Seq] = e
	}
	for d, e := range seen {
		if d.kind != api.KindPreferred && d.kind != api.KindFailOpen {
			continue
		}
		if p, ok := polled[e.Seq]; !ok || p.Kind != e.Kind || p.Target != e.Target || p.From != e.From || p.To != e.To || p.Reason != e.Reason {
			t.Errorf("streamed %+v; the poll has %+v", e, p)
		}
	}
}

// streamDaemon is a daemon whose event log the test fills itself.
func streamDaemon(t *testing.T, opt Options) (*Daemon, *httptest.Server) {
	t.Helper()
	opt.Load = func() (*config.Config, error) { return nil, fmt.Errorf("not loaded") }
	opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	return d, srv
}

// TestEventStreamResume checks Last-Event-ID: a reconnecting client gets the
// events after the one it saw last, and an event "lost" when the ring no
// longer has some of them; a new client starts with what happens next.
func TestEventStreamResume(t *testing.T) {
	t.Parallel()
	d, srv := streamDaemon(t, Options{Events: 8, EventKeepAlive: 50 * time.Millisecond})
	for i := range 20 {
		d.events.Add(api.Event{Kind: api.KindState, Target: strconv.Itoa(i + 1)})
	}
	isEvent := func(m sseMessage) bool { return m.event != "" }

	c := openStream(t, srv.URL+"/api/v1/events", http.Header{"Last-Event-ID": {"15"}})
	for want := uint64(16); want <= 20; want++ {
		if e := c.next(t, 5*time.Second, "resumed event", isEvent).decode(t); e.Seq != want {
			t.Fatalf("resumed at 15: event %d, want %d", e.Seq, want)
		}
	}
	// Idle: keep-alive comments.
	c.next(t, 5*time.Second, "keep-alive comment", func(m sseMessage) bool { return m.comment })

	old := openStream(t, srv.URL+"/api/v1/events", http.Header{"Last-Event-ID": {"2"}})
	m := old.next(t, 5*time.Second, "lost notice", isEvent)
	if m.event != "lost" || m.data != `{"lost":10}` || m.id != "12" {
		t.Fatalf("resume at 2 with 13..20 kept: %+v, want event lost with 10, id 12", m)
	}
	if e := old.next(t, 5*time.Second, "oldest kept", isEvent).decode(t); e.Seq != 13 {
		t.Fatalf("after the lost notice: event %d, want 13", e.Seq)
	}

	fresh := openStream(t, srv.URL+"/api/v1/events", nil)
	if m := fresh.next(t, 5*time.Second, "first message", func(sseMessage) bool { return true }); m.retry != "2000" {
		t.Fatalf("first message %+v, want retry 2000", m)
	}
	d.events.Add(api.Event{Kind: api.KindRoute})
	if e := fresh.next(t, 5*time.Second, "new event", isEvent).decode(t); e.Seq != 21 || e.Kind != api.KindRoute {
		t.Fatalf("new client: event %+v, want 21 route", e)
	}
}

// TestEventStreamResumeBeyondNewest reconnects with an event number this
// daemon never gave (the one before a restart gave it): the stream says so
// with an event "reset" that moves the client's Last-Event-ID to the newest
// event, and goes on with the events after it.
func TestEventStreamResumeBeyondNewest(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		url    string
		header http.Header
	}{
		{"Last-Event-ID", "/api/v1/events", http.Header{"Last-Event-ID": {"1000"}}},
		{"since", "/api/v1/events?since=1000", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, srv := streamDaemon(t, Options{Events: 64, EventKeepAlive: time.Hour})
			for range 40 {
				d.events.Add(api.Event{Kind: api.KindState})
			}
			isEvent := func(m sseMessage) bool { return m.event != "" }
			s := openStream(t, srv.URL+c.url, c.header)
			if m := s.next(t, 5*time.Second, "reset notice", isEvent); m.event != "reset" || m.id != "40" || m.data != `{"next":40}` {
				t.Fatalf("resume at 1000 with newest 40: %+v, want event reset, id 40, next 40", m)
			}
			for range 10 {
				d.events.Add(api.Event{Kind: api.KindRoute})
			}
			for want := uint64(41); want <= 50; want++ {
				if e := s.next(t, 5*time.Second, "event after the reset", isEvent).decode(t); e.Seq != want {
					t.Fatalf("after the reset: event %d, want %d", e.Seq, want)
				}
			}
		})
	}
}

// stalled sends the raw HTTP request req to srv over a connection with a
// small receive buffer and reads nothing of the answer; the test closes it
// at its end.
func stalled(t *testing.T, srv *httptest.Server, req string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(conn, req)
	return conn
}

// streamRequest asks for the event stream.
const streamRequest = "GET /api/v1/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"

// TestEventStreamSlowClient stalls a client that stops reading: the daemon
// keeps adding events at full speed, and drops the client once a write has
// waited longer than the write timeout.
func TestEventStreamSlowClient(t *testing.T) {
	t.Parallel()
	d, srv := streamDaemon(t, Options{Events: 1 << 16, WriteStall: 200 * time.Millisecond})
	stalled(t, srv, streamRequest) // open while the test runs; read by nobody
	testenv.Eventually(t, "the stream started", func() (int64, bool) { n := d.adm.Stream.InUse(); return n, n == 1 })
	// Far more than the socket buffers hold; the client reads nothing.
	pad := strings.Repeat("x", 1000)
	for i := range 1 << 15 {
		d.events.Add(api.Event{Kind: api.KindState, Target: strconv.Itoa(i), Message: pad})
	}
	testenv.Eventually(t, "the stalled client dropped", func() (string, bool) {
		dropped, open := d.streams.Dropped(), d.adm.Stream.InUse()
		return fmt.Sprintf("%d dropped, %d streams", dropped, open), dropped == 1 && open == 0
	})
}

// TestEventStreamWrapped stalls a client while the ring wraps past it: once
// it reads again it gets the events it was sent, then an event "lost" whose
// id is the last event it missed, and the stream ends. Reconnecting from
// that id, it goes on from the oldest event kept, and is not told again.
func TestEventStreamWrapped(t *testing.T) {
	t.Parallel()
	const ring = 16
	d, srv := streamDaemon(t, Options{Events: ring, WriteStall: time.Minute, EventKeepAlive: time.Hour})
	conn := stalled(t, srv, streamRequest)
	// Until the stream waits for the next event: it has started.
	testenv.Eventually(t, "the stream waiting for the next event", func() (bool, bool) { w := d.events.Waiting(); return w, w })
	// Far more than the socket buffers hold, while the client reads
	// nothing: the ring wraps past the stream, whether it is blocked in a
	// write or has yet to wake.
	const total = 1 << 15
	pad := strings.Repeat("x", 1000)
	for i := range total {
		d.events.Add(api.Event{Kind: api.KindState, Target: strconv.Itoa(i), Message: pad})
	}

	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var last uint64 // the last event read
	var notice *sseMessage
	sc := bufio.NewScanner(resp.Body)
	var m sseMessage
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" && m.event == "lost":
			if notice != nil {
				t.Fatalf("a second lost notice: %+v", m)
			}
			notice = &m
		case line == "" && m.event != "":
			if notice != nil {
				t.Fatalf("event %s after the lost notice", m.id)
			}
			e := m.decode(t)
			if e.Seq != last+1 {
				t.Fatalf("event %d after %d", e.Seq, last)
			}
			last = e.Seq
			m = sseMessage{}
		case line == "":
			m = sseMessage{}
		case strings.HasPrefix(line, "id: "):
			m.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			m.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			m.data = line[6:]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read the stream: %v", err)
	}
	if notice == nil {
		t.Fatalf("the stream ended after event %d of %d without a lost notice", last, total)
	}
	lost, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(notice.data, `{"lost":`), "}"), 10, 64)
	if err != nil || lost == 0 || notice.id != strconv.FormatUint(last+lost, 10) || last+lost > total-ring {
		t.Fatalf("after event %d: notice %+v; want the count lost and, as id, the last of them (before the %d kept)", last, *notice, ring)
	}
	if got := d.streams.Dropped(); got != 1 {
		t.Errorf("%d clients counted as dropped, want 1", got)
	}

	// Reconnecting from the notice's id: told only of the events lost
	// since (the ring now keeps the last 16), then the oldest kept.
	again := openStream(t, srv.URL+"/api/v1/events", http.Header{"Last-Event-ID": {notice.id}})
	isEvent := func(m sseMessage) bool { return m.event != "" }
	next := again.next(t, 5*time.Second, "first event after reconnecting", isEvent)
	if from := last + lost; from < total-ring {
		want := fmt.Sprintf(`{"lost":%d}`, total-ring-from)
		if next.event != "lost" || next.data != want || next.id != strconv.Itoa(total-ring) {
			t.Fatalf("reconnected from %s: %+v, want event lost with %s, id %d", notice.id, next, want, total-ring)
		}
		next = again.next(t, 5*time.Second, "oldest event kept", isEvent)
	}
	if e := next.decode(t); e.Seq != total-ring+1 {
		t.Fatalf("reconnected from %s: event %d, want %d", notice.id, e.Seq, total-ring+1)
	}
}

// TestEventPollsBounded fills the event ring with 10,000 events of about
// 1.2 kB of JSON each and sends polls for all of them from 8 clients that
// read nothing: a poll is written as it is read, and runs among the list
// requests (at most heavyRequests at once), so the heap never holds much
// more than their buffers, where a page built whole holds 12 MB a client.
func TestEventPollsBounded(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what the heap holds; this test measures memory")
	}
	d, srv := streamDaemon(t, Options{})
	pad := strings.Repeat("x", 1000)
	for i := range apiv1.MaxEventsPage {
		d.events.Add(api.Event{Kind: api.KindState, Target: "192.0.2.1:80", Pools: []string{"api"}, Check: strconv.Itoa(i), Message: pad})
	}
	live := func() int64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := live()
	for range 8 {
		stalled(t, srv, "GET /api/v1/events?limit=0 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	}
	// Two seconds of samples: the heap must not grow while the polls wait
	// for readers that never come, so time has to pass.
	peak := int64(0)
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		peak = max(peak, live()-before)
	}
	if peak > 16<<20 {
		t.Errorf("8 polls that are not read grew the heap by %d MB, want at most 16", peak>>20)
	}
	t.Logf("heap growth %d kB", peak>>10)
}

// TestEventStreamLimit refuses streams beyond MaxEventStreams.
func TestEventStreamLimit(t *testing.T) {
	t.Parallel()
	_, srv := streamDaemon(t, Options{MaxEventStreams: 1})
	openStream(t, srv.URL+"/api/v1/events", nil)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second stream: %s, want 503", resp.Status)
	}
}

// TestEventStreamShutdown checks that a graceful shutdown ends streams
// instead of waiting for their clients.
func TestEventStreamShutdown(t *testing.T) {
	t.Parallel()
	d, _ := streamDaemon(t, Options{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx, l) }()
	c := openStream(t, "http://"+l.Addr().String()+"/api/v1/events", nil)
	c.next(t, 5*time.Second, "retry field", func(m sseMessage) bool { return m.retry != "" })
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v, want a clean shutdown", err)
		}
	case <-time.After(4 * time.Second): // the shutdown's own limit is 5 s
		t.Fatal("shutdown waited for the event stream's client")
	}
}

// TestQuietStreamsDropNonReaders is the regression test of event stream
// clients that never read holding every stream slot through a quiet
// period: the write deadline had nothing to measure, since a keep-alive of
// a few bytes now and then fits the connection's buffers for hours. With
// three of four slots taken by such clients and the fourth by a client
// that reads, heartbeats find the three and drop them while the reader
// stays, and a new client gets a stream. No event is added.
func TestQuietStreamsDropNonReaders(t *testing.T) {
	t.Parallel()
	const slots = 4
	d, _ := streamDaemon(t, Options{MaxEventStreams: slots, EventKeepAlive: 20 * time.Millisecond, WriteStall: 200 * time.Millisecond})
	addr := served(t, d)
	for range slots - 1 { // default socket buffers: what any client has
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprint(c, "GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n") // and never read
	}
	reader := openStream(t, "http://"+addr+"/api/v1/events", nil)
	read := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, reader.resp.Body)
		read <- err
	}()
	testenv.Eventually(t, "the clients that do not read dropped", func() (uint64, bool) { n := d.streams.Dropped(); return n, n >= slots-1 })
	select {
	case err := <-read:
		t.Fatalf("the client that reads lost its stream: %v", err)
	default:
	}
	if n, dropped := d.adm.Stream.InUse(), d.streams.Dropped(); n != 1 || dropped != slots-1 {
		t.Errorf("%d streams after %d drops, want the reader's after %d", n, dropped, slots-1)
	}
	openStream(t, "http://"+addr+"/api/v1/events", nil) // fails the test unless 200
}
