package web

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ConnLimiter caps the open connections of a listener. It knows of each
// connection whether a handler is serving it (tracked), and whether that
// handler is one of the daemon's own endpoints (vital: /metrics, /-/healthy,
// /-/ready). At the cap, a new connection takes the place of
//
//  1. the connection idle between requests the longest; else
//  2. the connection accepted at least [NewConnGrace] ago whose request
//     is still unread the longest (a client that trickles its headers
//     holds no more than an idle one); else
//  3. the connection in a handler of anything but the vital endpoints the
//     longest: a request that hangs (a /probe of a silent target, an event
//     stream, a client that does not read) loses its connection, and its
//     client asks again; else
//  4. the connection accepted the longest ago among those younger than
//     [NewConnGrace] whose request is unread;
//
// and is closed at once only when every connection serves a vital
// endpoint. A flood of connections that send nothing thus takes only
// connections that wait, never a request in progress while older ones
// wait; accept never stops; the connections cost the daemon at most max
// descriptors; and a connection for /-/healthy or /metrics gets in and is
// read: the slots of each class (admission.go) bound what hangs in
// handlers, what hangs can be taken, and a new connection keeps its place
// for [NewConnGrace] — time for a daemon busy with a burst to read its
// request — while anything older or hanging is left to take.
type ConnLimiter struct {
	net.Listener
	max int

	mu      sync.Mutex
	conns   map[*limitedConn]struct{}
	evicted uint64 // connections out of a handler closed to make room
	shed    uint64 // connections busy in a handler closed to make room
	refused uint64 // new connections closed because all served vital endpoints
}

// limitedConn is a connection counted by a ConnLimiter.
type limitedConn struct {
	net.Conn
	l      *ConnLimiter
	busy   bool      // guarded by l.mu: a handler serves it
	vital  bool      // guarded by l.mu: that handler is a vital endpoint's
	served bool      // guarded by l.mu: a request of it was served
	since  time.Time // guarded by l.mu: when it was accepted, last entered or left a handler, or went idle
}

// NewConnGrace is how long a new connection whose request is still unread
// is taken only after idle, older and hanging ones (see [ConnLimiter]).
const NewConnGrace = time.Second

// ConnContext is the server's ConnContext hook: it keeps c in the
// requests' context, for [Vital], [ConnLimiter.Tracked] and [TCPConnOf].
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// Max returns the cap of open connections.
func (l *ConnLimiter) Max() int { return l.max }

// connKey is the request context key of the request's *limitedConn.
type connKey struct{}

// NewConnLimiter returns l limited to max open connections. The server
// serving it must call [ConnLimiter.Track] on each change of a
// connection's state, serve through [ConnLimiter.Tracked] and give each
// request's context its connection with [ConnContext].
func NewConnLimiter(l net.Listener, max int) *ConnLimiter {
	return &ConnLimiter{Listener: l, max: max, conns: make(map[*limitedConn]struct{}, max)}
}

// Accept returns the next connection, making room for it when needed.
func (l *ConnLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitedConn{Conn: c, l: l, since: time.Now()}
		victim, ok := l.admit(lc)
		if victim != nil {
			// Its server goroutine sees the close and ends; a handler
			// still running sees its request's context cancelled.
			_ = victim.Conn.Close()
		}
		if ok {
			return lc, nil
		}
		_ = c.Close()
	}
}

// admit adds c, and returns the connection it displaces, if any; ok is
// false when there is no room.
func (l *ConnLimiter) admit(c *limitedConn) (victim *limitedConn, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.conns) >= l.max {
		if victim = l.victim(c.since); victim == nil {
			l.refused++
			return nil, false
		}
		delete(l.conns, victim)
		if victim.busy {
			l.shed++
		} else {
			l.evicted++
		}
	}
	l.conns[c] = struct{}{}
	return victim, true
}

// victim returns the connection to close for a new one accepted at now
// (see [ConnLimiter]), or nil. l.mu is held.
func (l *ConnLimiter) victim(now time.Time) *limitedConn {
	var idle, stale, busy, fresh *limitedConn
	older := func(x, than *limitedConn) bool { return than == nil || x.since.Before(than.since) }
	for x := range l.conns {
		switch {
		case x.busy:
			if !x.vital && older(x, busy) {
				busy = x
			}
		case x.served:
			if older(x, idle) {
				idle = x
			}
		case now.Sub(x.since) >= NewConnGrace:
			if older(x, stale) {
				stale = x
			}
		default:
			if older(x, fresh) {
				fresh = x
			}
		}
	}
	for _, v := range [...]*limitedConn{idle, stale, busy, fresh} {
		if v != nil {
			return v
		}
	}
	return nil
}

// Track is the server's ConnState hook.
func (l *ConnLimiter) Track(c net.Conn, s http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case http.StateIdle:
		lc.busy, lc.vital, lc.served, lc.since = false, false, true, time.Now()
	case http.StateHijacked, http.StateClosed:
		delete(l.conns, lc)
	}
}

// Tracked wraps the server's handler: a connection is busy while a
// handler serves it.
func (l *ConnLimiter) Tracked(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lc, ok := r.Context().Value(connKey{}).(*limitedConn)
		if ok {
			l.setBusy(lc, true)
			defer l.setBusy(lc, false)
		}
		h.ServeHTTP(w, r)
	})
}

func (l *ConnLimiter) setBusy(lc *limitedConn, busy bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lc.busy, lc.vital, lc.since = busy, false, time.Now()
	if !busy {
		lc.served = true
	}
}

// setVital marks lc, busy, as serving a vital endpoint.
func (l *ConnLimiter) setVital(lc *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lc.vital = lc.busy
}

// TCPConnOf returns the TCP connection serving r, or nil when it is not
// one served through a ConnLimiter.
func TCPConnOf(r *http.Request) *net.TCPConn {
	lc, ok := r.Context().Value(connKey{}).(*limitedConn)
	if !ok {
		return nil
	}
	tc, _ := lc.Conn.(*net.TCPConn)
	return tc
}

// Counts returns the open connections, and those evicted, shed and
// refused.
func (l *ConnLimiter) Counts() (open int, evicted, shed, refused uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns), l.evicted, l.shed, l.refused
}

// DefaultMaxConnections is the connection limit when none is given.
const DefaultMaxConnections = 512

// ConnectionCap returns the connection limit for want (0: the default)
// under the process's file descriptor limit nofile: at most a quarter of it,
// and at least one.
func ConnectionCap(want int, nofile uint64) int {
	if want <= 0 {
		want = DefaultMaxConnections
	}
	if nofile > 0 && uint64(want) > nofile/4 {
		want = int(max(nofile/4, 1))
	}
	return want
}

// FileLimit returns the soft RLIMIT_NOFILE, 0 when it cannot be read.
func FileLimit() uint64 {
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) != nil {
		return 0
	}
	return rl.Cur
}
