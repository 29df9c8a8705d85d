package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/sondeprobe/sonde/server/web"
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
	// anything but /metrics and the /-/ endpoints (see web.ConnLimiter).
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

	defaultShutdownGrace = 5 * time.Second
)

// Serve serves the daemon's HTTP endpoints on l until ctx is done, then shuts
// the server down: requests in progress get Options.Web.ShutdownGrace to
// finish, then their connections are closed. A slow client never makes
// Serve fail. When l listens on loopback, requests must name an allowed host
// (see WebOptions.AllowedHosts).
func (d *Daemon) Serve(ctx context.Context, l net.Listener) error {
	w := d.opt.Web
	h := d.Handler()
	if web.IsLoopback(l.Addr()) {
		h = web.WithHeaders(web.HostGuard(h, w.AllowedHosts)) // its refusals too
	}
	nofile := web.FileLimit()
	lim := web.NewConnLimiter(l, web.ConnectionCap(w.MaxConnections, nofile))
	h = lim.Tracked(h)
	d.conns.Store(lim)
	d.log.Info("listening", "listen", l.Addr().String(), "max_connections", lim.Max(), "nofile", nofile,
		"lifecycle", w.EnableLifecycle, "probe", !w.DisableProbe, "host_check", web.IsLoopback(l.Addr()))
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         lim.Track,
		ConnContext:       web.ConnContext,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(d.streams.End) // event streams never go idle by themselves
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
		open, _, _, _ := lim.Counts()
		d.log.Warn("closing connections still busy at shutdown", "connections", open, "grace", grace)
		_ = srv.Close() // closes what is left; the listener is closed already
		return nil
	}
	if err != nil {
		return fmt.Errorf("shut down http: %w", err)
	}
	return nil
}
