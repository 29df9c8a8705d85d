package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// WebOptions configure the daemon's HTTP server.
type WebOptions struct {
	// EnableLifecycle allows the state-changing endpoints (POST /-/reload);
	// without it they answer 403, as in Prometheus.
	EnableLifecycle bool
	// AllowedHosts are the host names requests may name in their Host
	// header when the server listens on loopback, besides IP addresses and
	// "localhost". Other names are refused: a web page that rebinds its own
	// name to 127.0.0.1 (DNS rebinding) must not read the API.
	AllowedHosts []string
	// MaxConnections caps the server's open connections; default 512, and
	// never more than a quarter of the process's file descriptor limit, so
	// probes keep descriptors whatever clients do. At the cap, a new
	// connection closes one that waits for a request, else one busy with
	// anything but /metrics and the /-/ endpoints (see connLimiter).
	MaxConnections int
	// DisableProbe turns /probe off (sonde run -web.enable-probe=false): it
	// answers 403. /probe shares the port of /metrics, and a deployment
	// that does not use it need not offer it.
	DisableProbe bool
	// RoutePrefix is the path every endpoint is served under ("/sonde"
	// serves /sonde/, /sonde/metrics...), for a reverse proxy that forwards
	// a path of its own; "" or "/" for none.
	RoutePrefix string
	// ShutdownGrace bounds how long a shutdown waits for requests in
	// progress before it closes their connections; default 5 s.
	ShutdownGrace time.Duration
}

// Timeouts of the HTTP server. No endpoint reads a request body: the read
// timeout bounds the reading of one (the server lifts it once a request
// without a body is read). The write timeout bounds how long a client that
// does not read holds its response; it is longer than the longest /probe
// (60 s), and event streams extend it per event.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 2 * time.Minute
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10

	defaultMaxConnections = 512
	defaultShutdownGrace  = 5 * time.Second
)

// lifecycle guards a state-changing endpoint: 403 unless the lifecycle
// endpoints are enabled, and 403 for a request a browser sent from another
// site (Sec-Fetch-Site or Origin), or with a body a cross-site form or
// script can send without asking first (a CORS-safelisted content type). A
// browser adds Sec-Fetch-Site or Origin to every cross-site POST, so a
// request without a body and without either header does not come from one
// (curl -X POST).
func (d *Daemon) lifecycle(h http.HandlerFunc) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !d.opt.Web.EnableLifecycle {
			http.Error(w, "lifecycle endpoints are disabled; start sonde run with -web.enable-lifecycle", http.StatusForbidden)
			return
		}
		if err := cop.Check(r); err != nil {
			http.Error(w, "cross-origin request refused: "+err.Error(), http.StatusForbidden)
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "" {
			mt, _, err := mime.ParseMediaType(ct)
			if err != nil || mt == "application/x-www-form-urlencoded" || mt == "multipart/form-data" || mt == "text/plain" {
				http.Error(w, fmt.Sprintf("content type %q refused: a browser sends it from any site; send no body, or application/json", ct), http.StatusForbidden)
				return
			}
		}
		h(w, r)
	})
}

// hostGuard refuses requests whose Host is neither an IP address,
// "localhost", nor one of allowed (lower case, without a trailing dot).
type hostGuard struct {
	next    http.Handler
	allowed map[string]bool
}

func newHostGuard(next http.Handler, allowed []string) *hostGuard {
	g := &hostGuard{next: next, allowed: map[string]bool{"localhost": true}}
	for _, h := range allowed {
		g.allowed[normalHost(h)] = true
	}
	return g
}

// normalHost lowers a host name and drops its trailing dot.
func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

func (g *hostGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.ok(r.Host) {
		http.Error(w, fmt.Sprintf("host %q refused: sonde listens on loopback and answers only IP addresses, localhost and the names of -web.allowed-hosts", r.Host), http.StatusForbidden)
		return
	}
	g.next.ServeHTTP(w, r)
}

func (g *hostGuard) ok(hostport string) bool {
	if hostport == "" {
		return true // HTTP/1.0 without Host: not a browser
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return g.allowed[normalHost(host)]
}

// isLoopback reports whether a listener's address is a loopback address.
func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return false
	}
	ap := ta.AddrPort()
	return ap.Addr().Unmap().IsLoopback()
}

// Serve serves the daemon's HTTP endpoints on l until ctx is done, then shuts
// the server down: requests in progress get Options.Web.ShutdownGrace to
// finish, then their connections are closed. A slow client never makes
// Serve fail. When l listens on loopback, requests must name an allowed host
// (see WebOptions.AllowedHosts).
func (d *Daemon) Serve(ctx context.Context, l net.Listener) error {
	w := d.opt.Web
	h := d.Handler()
	if isLoopback(l.Addr()) {
		h = withHeaders(newHostGuard(h, w.AllowedHosts)) // its refusals too
	}
	nofile := fileLimit()
	lim := newConnLimiter(l, connectionCap(w.MaxConnections, nofile))
	h = lim.tracked(h)
	d.conns.Store(lim)
	d.log.Info("listening", "listen", l.Addr().String(), "max_connections", lim.max, "nofile", nofile,
		"lifecycle", w.EnableLifecycle, "probe", !w.DisableProbe, "host_check", isLoopback(l.Addr()))
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         lim.track,
		ConnContext:       func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(d.streams.end) // event streams never go idle by themselves
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lim) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}
	grace := w.ShutdownGrace
	if grace <= 0 {
		grace = defaultShutdownGrace
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		open, _, _, _ := lim.counts()
		d.log.Warn("closing connections still busy at shutdown", "connections", open, "grace", grace)
		_ = srv.Close() // closes what is left; the listener is closed already
		return nil
	}
	if err != nil {
		return fmt.Errorf("shut down http: %w", err)
	}
	return nil
}
