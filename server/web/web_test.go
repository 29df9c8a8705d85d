package web

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// TestSlotsFreedFromNonReaders: a client that asks for a long answer in a
// slot (a big /metrics, a list) and never reads it holds the slot for at
// most the write stall, not until the server's whole-response timeout.
func TestSlotsFreedFromNonReaders(t *testing.T) {
	t.Parallel()
	const stall = 200 * time.Millisecond
	s := NewSlots("scrape", "scrapes", 1, time.Second, stall)
	var entered atomic.Bool // the handler ran, in the slot
	big := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		entered.Store(true)
		chunk := bytes.Repeat([]byte("# filler\n"), 1<<12)
		for range 4096 { // 144 MiB: far more than any socket buffers
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	srv := httptest.NewServer(s.Admit(big))
	t.Cleanup(srv.Close)
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The client never reads. The slot is taken, then freed.
	testenv.Eventually(t, "the slot taken", func() (bool, bool) { e := entered.Load(); return e, e })
	testenv.Eventually(t, fmt.Sprintf("the slot of a client that never reads freed (write stall %v)", stall), func() (int64, bool) {
		n := s.InUse()
		return n, n == 0
	})
}

// TestConnLimiterVictim checks the order in which the connection limit
// makes room: a connection idle between requests, longest first; then one
// whose request is unread since at least NewConnGrace, longest first; then
// one busy in a handler that is not vital, longest first; then a new one
// younger than NewConnGrace, longest first; never one serving a vital
// endpoint. A new connection's request may wait unread while a loaded
// daemon works through a burst: it is taken only when nothing older or
// hanging is left.
func TestConnLimiterVictim(t *testing.T) {
	t.Parallel()
	now := time.Now()
	type kind int
	const (
		unread kind = iota
		idle
		busy
		vital
	)
	conn := func(name string, k kind, age time.Duration) *limitedConn {
		return &limitedConn{Conn: namedConn{name: name}, busy: k >= busy, vital: k == vital, served: k == idle, since: now.Add(-age)}
	}
	grace := NewConnGrace
	for _, tt := range []struct {
		name  string
		conns []*limitedConn
		want  string // "" for none
	}{
		{"idle the longest first", []*limitedConn{
			conn("new", unread, 10*time.Millisecond), conn("idle", idle, 5*time.Second), conn("idle-older", idle, 6*time.Second),
			conn("trickling", unread, 9*time.Second), conn("probe", busy, time.Minute)}, "idle-older"},
		{"then unread for the grace, the longest first", []*limitedConn{
			conn("new", unread, 10*time.Millisecond), conn("trickling", unread, 9*time.Second),
			conn("trickling-just", unread, grace), conn("probe", busy, time.Minute)}, "trickling"},
		{"a request in progress before a new one", []*limitedConn{
			conn("new", unread, time.Millisecond), conn("probe", busy, 2*time.Second), conn("stream", busy, time.Hour),
			conn("metrics", vital, 2*time.Hour)}, "stream"},
		{"the oldest new one when nothing else is left", []*limitedConn{
			conn("healthy", unread, 20*time.Millisecond), conn("newer", unread, time.Millisecond),
			conn("metrics", vital, time.Hour)}, "healthy"},
		{"never a vital one", []*limitedConn{conn("metrics", vital, time.Hour), conn("healthy", vital, time.Minute)}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := NewConnLimiter(nil, len(tt.conns))
			for _, c := range tt.conns {
				c.l = l
				l.conns[c] = struct{}{}
			}
			got := ""
			if v := l.victim(now); v != nil {
				got = v.Conn.(namedConn).name
			}
			if got != tt.want {
				t.Errorf("victim %q, want %q", got, tt.want)
			}
		})
	}
}

// namedConn is a net.Conn that only has a name, for the limiter's
// bookkeeping.
type namedConn struct {
	net.Conn
	name string
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:9123", true},
		{"127.1.2.3:9123", true},
		{"[::1]:9123", true},
		{"[::ffff:127.0.0.1]:9123", true},
		{"0.0.0.0:9123", false},
		{"[::]:9123", false},
		{"192.0.2.1:9123", false},
	} {
		a, err := net.ResolveTCPAddr("tcp", tt.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := IsLoopback(a); got != tt.want {
			t.Errorf("IsLoopback(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

func TestConnectionCap(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		want   int
		nofile uint64
		cap    int
	}{
		{0, 1 << 20, DefaultMaxConnections},
		{0, 1024, 256},
		{100, 1024, 100},
		{1000, 1024, 256},
		{10, 0, 10},
		{10, 2, 1},
	} {
		if got := ConnectionCap(tt.want, tt.nofile); got != tt.cap {
			t.Errorf("ConnectionCap(%d, %d) = %d, want %d", tt.want, tt.nofile, got, tt.cap)
		}
	}
}
