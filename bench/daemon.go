package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/sondeprobe/sonde/bench/promtext"
	"github.com/sondeprobe/sonde/internal/netns"
)

// nsClient returns an HTTP client whose connections are made inside network
// namespace ns, so the bench (in the host namespace) can talk to servers
// listening on the prober namespace's loopback.
func nsClient(ns string, conns int) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := netns.Do(ns, func() error {
				var err error
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// daemon is `sonde run` running in the prober namespace, with its HTTP
// endpoints on the namespace's loopback.
type daemon struct {
	cmd    *exec.Cmd
	base   string // http://127.0.0.1:PORT
	client *http.Client
	out    lockedBuffer // its stderr (logs), for error messages
	done   chan struct{}
	err    error // set when done is closed
}

// lockedBuffer is a bytes.Buffer that a process writes while we read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 {
		l.b.Reset() // keep the latest megabyte, roughly
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return tail(l.b.Bytes(), n)
}

// startDaemon writes config to a file and starts `sonde run` on it in the
// prober namespace, serving on 127.0.0.1:port there. It returns once the
// process started; use waitReady.
func (e *env) startDaemon(ctx context.Context, name, config string, port int, extra ...string) (*daemon, error) {
	path := filepath.Join(e.dir, name+".yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return nil, fmt.Errorf("write daemon config: %w", err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	args := append([]string{"run", "-config", path, "-listen", listen, "-log-level", "warn"}, extra...)
	d := &daemon{
		cmd:    e.command(ctx, e.opt.Binary, args...),
		base:   "http://" + listen,
		client: nsClient(e.fleet.ProberNS, 4),
		done:   make(chan struct{}),
	}
	d.cmd.Stdout, d.cmd.Stderr = &d.out, &d.out
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sonde run: %w", err)
	}
	go func() {
		d.err = d.cmd.Wait()
		close(d.done)
	}()
	return d, nil
}

// pid returns the daemon's process id: `ip netns exec` replaces itself with
// the command, so it is sonde's.
func (d *daemon) pid() int { return d.cmd.Process.Pid }

// waitReady waits until /-/ready answers 200, the process exits or timeout
// passes. It returns how long the daemon took to get ready.
func (d *daemon) waitReady(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for time.Since(start) < timeout {
		select {
		case <-d.done:
			return 0, fmt.Errorf("sonde run exited: %v: %s", d.err, d.out.tail(2000))
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, d.base+"/-/ready", nil)
		resp, err := d.client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		cancel()
		if err == nil && resp.StatusCode == http.StatusOK {
			return time.Since(start), nil
		}
	}
	return 0, fmt.Errorf("sonde run not ready after %v: %s", timeout, d.out.tail(2000))
}

// get fetches path and returns the body.
func (d *daemon) get(ctx context.Context, path string) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, d.base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %s: %s: %s", path, resp.Status, tail(b, 500))
	}
	return b, nil
}

// scrape reads the daemon's /metrics.
func (d *daemon) scrape(ctx context.Context) (promtext.Scrape, error) {
	b, err := d.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	return promtext.Parse(bytes.NewReader(b))
}

// getJSON fetches path and decodes it into v.
func (d *daemon) getJSON(ctx context.Context, path string, v any) error {
	b, err := d.get(ctx, path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}

// stop ends the daemon with SIGTERM (SIGKILL after 10 s) and waits for it.
func (d *daemon) stop() error {
	select {
	case <-d.done:
		return nil // it died; the caller saw why
	default:
	}
	_ = d.cmd.Process.Signal(os.Interrupt)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	d.client.CloseIdleConnections()
	var ee *exec.ExitError
	if d.err != nil && !errors.As(d.err, &ee) {
		return fmt.Errorf("stop sonde run: %w", d.err)
	}
	return nil
}

// alive reports an error when the daemon has exited.
func (d *daemon) alive() error {
	select {
	case <-d.done:
		return fmt.Errorf("sonde run exited: %v: %s", d.err, d.out.tail(2000))
	default:
		return nil
	}
}

// sleep waits for d, returning early with an error when ctx is done or the
// daemon exits.
func (d *daemon) sleep(ctx context.Context, dur time.Duration) error {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-d.done:
		return d.alive()
	case <-t.C:
		return nil
	}
}
