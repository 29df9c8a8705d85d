package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// listenLoopback opens a TCP listener on a free port of 127.0.0.1.
func listenLoopback(ctx context.Context) (net.Listener, netip.AddrPort, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, netip.AddrPort{}, fmt.Errorf("listen: %w", err)
	}
	return ln, ln.Addr().(*net.TCPAddr).AddrPort(), nil
}

// serveHTTP serves h on a free port of 127.0.0.1 until Close.
func (d *demo) serveHTTP(ctx context.Context, h http.Handler) (netip.AddrPort, error) {
	ln, addr, err := listenLoopback(ctx)
	if err != nil {
		return addr, err
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          log.New(io.Discard, "", 0), // a helper logs nothing
	}
	d.wg.Go(func() { _ = srv.Serve(ln) }) // returns ErrServerClosed after Shutdown
	d.closers = append(d.closers, func() error {
		sctx, cancel := context.WithTimeout(context.Background(), demoShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close() // a request still running after the timeout
			return fmt.Errorf("stop demo backend %s: %w", addr, err)
		}
		return nil
	})
	return addr, nil
}

// serveTCP accepts connections on a free port of 127.0.0.1 and closes each
// at once, until Close.
func (d *demo) serveTCP(ctx context.Context) (netip.AddrPort, error) {
	ln, addr, err := listenLoopback(ctx)
	if err != nil {
		return addr, err
	}
	d.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				select {
				case <-d.stop:
					return
				case <-time.After(10 * time.Millisecond): // e.g. out of file descriptors: retry
				}
				continue
			}
			_ = c.Close()
		}
	})
	d.closers = append(d.closers, func() error {
		if err := ln.Close(); err != nil {
			return fmt.Errorf("stop demo backend %s: %w", addr, err)
		}
		return nil
	})
	return addr, nil
}

// refuse binds a TCP socket to a free port of 127.0.0.1 without listening
// on it: connections to the port get an RST, and while the socket is open no
// other program can take the port. It is closed by Close.
func (d *demo) refuse() (netip.AddrPort, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("socket: %w", err)
	}
	lo := [4]byte{127, 0, 0, 1}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: lo}); err != nil {
		_ = unix.Close(fd)
		return netip.AddrPort{}, fmt.Errorf("bind: %w", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		_ = unix.Close(fd)
		return netip.AddrPort{}, fmt.Errorf("getsockname: %w", err)
	}
	sa4, ok := sa.(*unix.SockaddrInet4)
	if !ok {
		_ = unix.Close(fd)
		return netip.AddrPort{}, fmt.Errorf("getsockname: unexpected address %T", sa)
	}
	addr := netip.AddrPortFrom(netip.AddrFrom4(lo), uint16(sa4.Port))
	d.closers = append(d.closers, func() error {
		if err := unix.Close(fd); err != nil {
			return fmt.Errorf("close demo backend %s: %w", addr, err)
		}
		return nil
	})
	return addr, nil
}

func serveHealthy(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "Healthy\n")
}

func serveFailing(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "demo backend failing: always 500", http.StatusInternalServerError)
}

// serveRedirect redirects every path but /elsewhere there; /elsewhere
// answers 200 for people who follow it (sonde never does, H5).
func serveRedirect(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/elsewhere" {
		_, _ = io.WriteString(w, "You followed the redirect; health probes do not.\n")
		return
	}
	http.Redirect(w, r, "/elsewhere", http.StatusFound)
}

// slowHandler answers 200 "Healthy" after delay. When the client goes away
// or the demo stops first, it drops the connection without an answer.
func (d *demo) slowHandler(delay time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
			serveHealthy(w, r)
		case <-r.Context().Done():
			panic(http.ErrAbortHandler) // no answer; the server does not log it
		case <-d.stop:
			panic(http.ErrAbortHandler)
		}
	})
}

// flapper answers like a healthy backend for one period, then 500 for the
// next, and so on, counting from start on the clock now.
type flapper struct {
	start  time.Time
	period time.Duration
	now    func() time.Time
}

// healthy reports whether the flapper is in a healthy period now.
func (f *flapper) healthy() bool {
	return f.now().Sub(f.start)/f.period%2 == 0
}

func (f *flapper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.healthy() {
		serveHealthy(w, r)
		return
	}
	http.Error(w, "demo backend flapping: failing for now", http.StatusInternalServerError)
}
