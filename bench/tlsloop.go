package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// TLSLoopConfig configures [TLSLoop].
type TLSLoopConfig struct {
	// Targets are the servers, taken in turn by the workers.
	Targets []netip.AddrPort
	// Concurrency is the number of connections in flight: one goroutine each.
	Concurrency int
	// Duration is how long the loop runs.
	Duration time.Duration
}

// TLSLoopResult is what [TLSLoop] did.
type TLSLoopResult struct {
	OK, Failed int64         // complete requests, and failed ones
	Elapsed    time.Duration // from the first dial to the last request's end
	CPU        time.Duration // the process's user+system CPU over Elapsed
	FirstErr   error         // the first failure, if any
}

// TLSLoop is the reference for sonde's HTTPS probes: a plain Go crypto/tls
// client doing what one probe does, in a loop — a new TCP connection, a
// full handshake (no session cache, one shared tls.Config that skips
// verification, HTTP/1.1 by ALPN), one GET, the response head and body
// read (net/http's parser, as sonde's HTTPS path), and a close with an RST — Concurrency at a time, for
// Duration.
func TLSLoop(ctx context.Context, cfg TLSLoopConfig) (TLSLoopResult, error) {
	var res TLSLoopResult
	switch {
	case len(cfg.Targets) == 0:
		return res, errors.New("tls loop: no targets")
	case cfg.Concurrency < 1:
		return res, fmt.Errorf("tls loop: concurrency %d is below 1", cfg.Concurrency)
	case cfg.Duration <= 0:
		return res, fmt.Errorf("tls loop: duration %v is not positive", cfg.Duration)
	}
	tc := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}} //nolint:gosec // the fleet's self-signed certificate
	cpu0 := processCPU()
	start := time.Now()
	end := start.Add(cfg.Duration)
	var ok, failed atomic.Int64
	var once sync.Once
	var wg sync.WaitGroup
	for w := range cfg.Concurrency {
		wg.Go(func() {
			d := net.Dialer{Timeout: 5 * time.Second}
			buf := make([]byte, 4096)
			for i := w; ctx.Err() == nil && time.Now().Before(end); i += cfg.Concurrency {
				t := cfg.Targets[i%len(cfg.Targets)]
				if err := tlsOnce(ctx, &d, tc, t, buf); err != nil {
					failed.Add(1)
					once.Do(func() { res.FirstErr = err })
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.CPU = processCPU() - cpu0
	res.OK, res.Failed = ok.Load(), failed.Load()
	return res, ctx.Err()
}

// tlsOnce runs one request of [TLSLoop] to t.
func tlsOnce(ctx context.Context, d *net.Dialer, tc *tls.Config, t netip.AddrPort, buf []byte) error {
	c, err := d.DialContext(ctx, "tcp", t.String())
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetLinger(0) // an RST, as sonde closes
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	conn := tls.Client(c, tc)
	if err := conn.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: "+t.Addr().String()+"\r\nUser-Agent: sonde-bench-tls-loop\r\nConnection: close\r\n\r\n"); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, len(buf)), nil)
	if err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	if _, err := io.CopyBuffer(io.Discard, resp.Body, buf); err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// processCPU returns the process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
