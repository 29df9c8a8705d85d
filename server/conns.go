package server

import (
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// connLimiter caps the open connections of a listener. It knows of each
// connection whether a handler is serving it (tracked), and whether that
// handler is one of the daemon's own endpoints (vital: /metrics, /-/healthy,
// /-/ready). At the cap, a new connection takes the place of
//
//  1. the connection out of a handler the longest: idle between requests,
//     new, or still sending its request (a client that trickles its
//     headers holds no more than an idle one); else
//  2. the connection in a handler of anything but the vital endpoints the
//     longest: a request that hangs (a /probe of a silent target, an event
//     stream, a client that does not read) loses its connection, and its
//     client asks again;
//
// and is closed at once only when every connection serves a vital
// endpoint. A flood of connections that send nothing thus takes only
// connections that wait, never a request in progress; accept never stops;
// the connections cost the daemon at most max descriptors; and a
// connection for /-/healthy or /metrics always gets in: the slots of each
// class (admission.go) bound what hangs in handlers, and what hangs can
// be taken.
type connLimiter struct {
	net.Listener
	max int

	mu      sync.Mutex
	conns   map[*limitedConn]struct{}
	evicted uint64 // connections out of a handler closed to make room
	shed    uint64 // connections busy in a handler closed to make room
	refused uint64 // new connections closed because all served vital endpoints
}

// limitedConn is a connection counted by a connLimiter.
type limitedConn struct {
	net.Conn
	l     *connLimiter
	busy  bool      // guarded by l.mu: a handler serves it
	vital bool      // guarded by l.mu: that handler is a vital endpoint's
	since time.Time // guarded by l.mu: when it last entered or left a handler, or went idle
}

// connKey is the request context key of the request's *limitedConn.
type connKey struct{}

func newConnLimiter(l net.Listener, max int) *connLimiter {
	return &connLimiter{Listener: l, max: max, conns: make(map[*limitedConn]struct{}, max)}
}

// Accept returns the next connection, making room for it when needed.
func (l *connLimiter) Accept() (net.Conn, error) {
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
func (l *connLimiter) admit(c *limitedConn) (victim *limitedConn, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.conns) >= l.max {
		if victim = l.victim(); victim == nil {
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

// victim returns the connection to close for a new one (see connLimiter),
// or nil. l.mu is held.
func (l *connLimiter) victim() *limitedConn {
	var waiting, busy *limitedConn
	for x := range l.conns {
		switch {
		case !x.busy:
			if waiting == nil || x.since.Before(waiting.since) {
				waiting = x
			}
		case !x.vital:
			if busy == nil || x.since.Before(busy.since) {
				busy = x
			}
		}
	}
	if waiting != nil {
		return waiting
	}
	return busy
}

// track is the server's ConnState hook.
func (l *connLimiter) track(c net.Conn, s http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case http.StateIdle:
		lc.busy, lc.vital, lc.since = false, false, time.Now()
	case http.StateHijacked, http.StateClosed:
		delete(l.conns, lc)
	}
}

// tracked wraps the server's handler: a connection is busy while a
// handler serves it.
func (l *connLimiter) tracked(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lc, ok := r.Context().Value(connKey{}).(*limitedConn)
		if ok {
			l.setBusy(lc, true)
			defer l.setBusy(lc, false)
		}
		h.ServeHTTP(w, r)
	})
}

func (l *connLimiter) setBusy(lc *limitedConn, busy bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lc.busy, lc.vital, lc.since = busy, false, time.Now()
}

// setVital marks lc, busy, as serving a vital endpoint.
func (l *connLimiter) setVital(lc *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lc.vital = lc.busy
}

// tcpConnOf returns the TCP connection serving r, or nil when it is not
// one served through a connLimiter.
func tcpConnOf(r *http.Request) *net.TCPConn {
	lc, ok := r.Context().Value(connKey{}).(*limitedConn)
	if !ok {
		return nil
	}
	tc, _ := lc.Conn.(*net.TCPConn)
	return tc
}

// counts returns the open connections, and those evicted, shed and
// refused.
func (l *connLimiter) counts() (open int, evicted, shed, refused uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns), l.evicted, l.shed, l.refused
}

// connectionCap returns the connection limit for want (0: the default)
// under the process's file descriptor limit nofile: at most a quarter of it,
// and at least one.
func connectionCap(want int, nofile uint64) int {
	if want <= 0 {
		want = defaultMaxConnections
	}
	if nofile > 0 && uint64(want) > nofile/4 {
		want = int(max(nofile/4, 1))
	}
	return want
}

// fileLimit returns the soft RLIMIT_NOFILE, 0 when it cannot be read.
func fileLimit() uint64 {
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) != nil {
		return 0
	}
	return rl.Cur
}
