package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/testenv"
)

// TestLifecycleDisabled checks that without EnableLifecycle a reload POST
// is refused with 403 and nothing is reloaded.
func TestLifecycleDisabled(t *testing.T) {
	t.Parallel()
	td := startDaemonWith(t, oneTargetConfig(t), func(o *Options) { o.Web.EnableLifecycle = false })
	if code := td.postReload(t); code != http.StatusForbidden {
		t.Fatalf("reload without -web.enable-lifecycle: status %d, want 403", code)
	}
	if n := countReloads(td); n != 1 {
		t.Fatalf("%v loads, want only the first", n)
	}
}

func oneTargetConfig(t *testing.T) string {
	b := newBackend(t)
	return fmt.Sprintf("checks:\n  web: {protocol: http, interval: 1s, timeout: 1s}\npools:\n  - {name: api, check: web, targets: [%q]}\n", b.addr())
}

func countReloads(td *testDaemon) float64 {
	return testutil.ToFloat64(td.d.metrics.reloads.WithLabelValues("success"))
}

// TestLifecycleCrossSite checks that an enabled reload endpoint refuses what
// a web page on another site could send, and accepts what tools send.
func TestLifecycleCrossSite(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, oneTargetConfig(t))
	host := strings.TrimPrefix(td.http.URL, "http://")
	for _, tt := range []struct {
		name   string
		header map[string]string
		body   string
		want   int
	}{
		{"curl -X POST", nil, "", http.StatusOK},
		{"json", map[string]string{"Content-Type": "application/json"}, "{}", http.StatusOK},
		{"same origin", map[string]string{"Origin": "http://" + host}, "", http.StatusOK},
		{"same origin by fetch metadata", map[string]string{"Sec-Fetch-Site": "same-origin"}, "", http.StatusOK},
		{"other origin", map[string]string{"Origin": "http://evil.example"}, "", http.StatusForbidden},
		{"cross-site by fetch metadata", map[string]string{"Sec-Fetch-Site": "cross-site"}, "", http.StatusForbidden},
		{"same-site by fetch metadata", map[string]string{"Sec-Fetch-Site": "same-site"}, "", http.StatusForbidden},
		{"text body", map[string]string{"Content-Type": "text/plain;charset=UTF-8"}, "x", http.StatusForbidden},
		{"form", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, "a=b", http.StatusForbidden},
		{"multipart", map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, "", http.StatusForbidden},
		{"bad content type", map[string]string{"Content-Type": ";;"}, "", http.StatusForbidden},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, td.http.URL+"/-/reload", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("status %d (%s), want %d", resp.StatusCode, strings.TrimSpace(string(body)), tt.want)
			}
		})
	}
	if got := td.client(t, http.MethodGet, "/-/reload", nil); got != http.StatusMethodNotAllowed {
		t.Errorf("GET /-/reload: status %d, want 405", got)
	}
}

// client sends one request to the test daemon and returns the status.
func (td *testDaemon) client(t *testing.T, method, path string, header map[string]string) int {
	t.Helper()
	return httpStatus(t, method, td.http.URL+path, header)
}

// httpStatus sends one request without a body and returns the status.
func httpStatus(t *testing.T, method, url string, header map[string]string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// served runs d.Serve on a new loopback listener and returns its address;
// the server stops, and Serve must return nil, when the test ends.
func served(t *testing.T, d *Daemon) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return l.Addr().String()
}

// TestHostGuard checks that a server on loopback answers requests naming an
// IP address, localhost or an allowed name, and refuses other names (DNS
// rebinding).
func TestHostGuard(t *testing.T) {
	t.Parallel()
	td := startDaemonWith(t, oneTargetConfig(t), func(o *Options) { o.Web.AllowedHosts = []string{"Sonde.Test."} })
	addr := served(t, td.d)
	_, port, _ := net.SplitHostPort(addr)
	for _, tt := range []struct {
		host string
		want int
	}{
		{addr, http.StatusOK},
		{"127.0.0.1", http.StatusOK},
		{"[::1]:" + port, http.StatusOK},
		{"localhost:" + port, http.StatusOK},
		{"LOCALHOST.", http.StatusOK},
		{"sonde.test:" + port, http.StatusOK},
		{"evil.example:" + port, http.StatusForbidden},
		{"evil.example", http.StatusForbidden},
		{"127.0.0.1.evil.example", http.StatusForbidden},
	} {
		t.Run(tt.host, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/pools", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tt.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("Host %q: status %d, want %d", tt.host, resp.StatusCode, tt.want)
			}
		})
	}
}

// TestIdleConnectionsCannotStarveAccept opens far more idle connections
// than the server keeps, then expects an API request to be answered: idle
// ones make room, and the server never holds more than its cap.
func TestIdleConnectionsCannotStarveAccept(t *testing.T) {
	t.Parallel()
	const limit, idle = 8, 40
	td := startDaemonWith(t, oneTargetConfig(t), func(o *Options) { o.Web.MaxConnections = limit })
	addr := served(t, td.d)
	for range idle {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	// One keep-alive connection that made a request and went idle.
	keep, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { keep.Close() })
	fmt.Fprintf(keep, "GET /-/healthy HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(keep), nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("keep-alive request: %v %v", resp, err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 5 {
		resp, err := client.Get("http://" + addr + "/api/v1/pools")
		if err != nil {
			t.Fatalf("request %d with %d idle connections open: %v", i, idle, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		client.CloseIdleConnections()
	}
	open, evicted, _, _ := td.d.conns.Load().Counts()
	if open > limit || evicted < idle+1-limit {
		t.Errorf("%d connections open, %d evicted; want at most %d open, at least %d evicted", open, evicted, limit, idle+1-limit)
	}
}

// TestShutdownSlowClient checks that a client stuck in the middle of a
// request delays shutdown by the grace period at most, and that Serve
// still returns nil.
func TestShutdownSlowClient(t *testing.T) {
	t.Parallel()
	td := startDaemonWith(t, oneTargetConfig(t), func(o *Options) { o.Web.ShutdownGrace = 200 * time.Millisecond })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- td.d.Serve(ctx, l) }()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /-/healthy HTTP/1.1\r\n") // and never the rest
	testenv.Eventually(t, "the slow client's connection open", func() (int, bool) {
		lim := td.d.conns.Load()
		if lim == nil {
			return 0, false
		}
		open, _, _, _ := lim.Counts()
		return open, open == 1
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve with a slow client: %v, want nil", err)
		}
	case <-time.After(4 * time.Second): // below the 5 s header timeout
		t.Fatal("Serve waited for the slow client beyond its grace")
	}
}

// TestServeBeforeStart checks the daemon's HTTP server while the first
// configuration loads: it serves from the start, /-/ready and the API answer
// 503 until a configuration runs, and a reload asked for meanwhile is
// answered by a reload after the start.
func TestServeBeforeStart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sonde.yaml")
	if err := os.WriteFile(path, []byte(oneTargetConfig(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	loading := make(chan struct{})
	var loads atomic.Int64
	d, err := New(Options{
		Load: func() (*config.Config, error) {
			if loads.Add(1) == 1 {
				<-loading // the first load takes until the test lets it go
			}
			return config.Load(path, config.LoadOptions{})
		},
		NoSyn: true,
		Web:   WebOptions{EnableLifecycle: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Error(err)
		}
	})
	base := "http://" + served(t, d)
	started := make(chan error, 1)
	go func() { started <- d.Start() }()
	status := func(method, path string) int {
		t.Helper()
		return httpStatus(t, method, base+path, nil)
	}
	testenv.Eventually(t, "the first load started", func() (int64, bool) { n := loads.Load(); return n, n > 0 })
	for path, want := range map[string]int{
		"/-/healthy": http.StatusOK, "/metrics": http.StatusOK, "/-/ready": http.StatusServiceUnavailable,
		"/api/v1/targets": http.StatusServiceUnavailable, "/api/v1/pools": http.StatusServiceUnavailable,
	} {
		if got := status(http.MethodGet, path); got != want {
			t.Errorf("GET %s while loading: %d, want %d", path, got, want)
		}
	}
	reloaded := make(chan int, 1)
	go func() { reloaded <- status(http.MethodPost, "/-/reload") }()
	testenv.Eventually(t, "the reload request waiting for the start", func() (bool, bool) {
		d.reloads.mu.Lock()
		defer d.reloads.mu.Unlock()
		return d.reloads.running, d.reloads.running
	})
	close(loading)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	if got := <-reloaded; got != http.StatusOK {
		t.Errorf("POST /-/reload during the start: %d, want 200 once started", got)
	}
	if got := status(http.MethodGet, "/-/ready"); got != http.StatusOK {
		t.Errorf("GET /-/ready once started: %d, want 200", got)
	}
}
