package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/server"
	"github.com/sondeprobe/sonde/server/webhook"
)

// backend is a loopback HTTP server that can fail its health checks and
// counts the requests HAProxy forwards to it (path /lb).
type backend struct {
	srv     *httptest.Server
	failing atomic.Bool
	served  atomic.Int64
}

func newBackend(t *testing.T) *backend {
	b := &backend{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/lb" {
			b.served.Add(1)
			return
		}
		if b.failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *backend) addr() string { return b.srv.Listener.Addr().String() }

// freePort returns a loopback address nothing listens on.
func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startHAProxy runs HAProxy in the foreground on loopback with backend be_api
// over the backends, without health checks of its own, and a runtime API
// socket. It stops HAProxy by PID when the test ends.
func startHAProxy(t *testing.T, dir, frontend string, bs ...*backend) (socket string) {
	bin := testenv.Tool(t, "haproxy", "haproxy")
	socket = filepath.Join(dir, "admin.sock")
	cfg := fmt.Sprintf(`global
    stats socket %s mode 600 level admin
defaults
    mode http
    timeout connect 1s
    timeout client 5s
    timeout server 5s
frontend fe
    bind %s
    default_backend be_api
backend be_api
`, socket, frontend)
	for i, b := range bs {
		cfg += fmt.Sprintf("    server s%d %s\n", i+1, b.addr())
	}
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	proc := testenv.Start(t, exec.Command(bin, "-f", path, "-db"))
	testenv.Eventually(t, "HAProxy's runtime API socket", func() (string, bool) {
		c, err := net.Dial("unix", socket)
		if err != nil {
			return fmt.Sprintf("%v; log:\n%s", err, proc.Output()), false
		}
		c.Close()
		return "", true
	})
	return socket
}

// adminState returns srv_admin_state of every server of be_api by name.
func adminState(t *testing.T, rl *relay) map[string]string {
	t.Helper()
	servers, err := rl.servers(context.Background(), "be_api")
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, s := range servers {
		states[s["srv_name"]] = s["srv_admin_state"]
	}
	return states
}

// TestHAProxyFollowsSonde drives a real HAProxy from sonde's webhooks: when
// a backend fails, sonde removes it (one of two under 50 %) and the relay
// puts its HAProxy server in maintenance, so traffic goes to the other one;
// when it recovers, the server is ready again.
func TestHAProxyFollowsSonde(t *testing.T) {
	dir := t.TempDir()
	b1, b2 := newBackend(t), newBackend(t)
	frontend := freePort(t)
	socket := startHAProxy(t, dir, frontend, b1, b2)

	secret := []byte("hook secret")
	secretFile := filepath.Join(dir, "hook.secret")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	rl, err := newRelay(options{socket: socket, secret: secret, removed: "maint",
		backends: backends{"api": "be_api"}, log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hook := httptest.NewServer(rl)
	t.Cleanup(hook.Close)

	cfgPath := filepath.Join(dir, "sonde.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
checks:
  web: {protocol: http, path: /health, interval: 100ms, timeout: 1s, rise: 1, fall: 2}
pools:
  - {name: api, check: web, max_unhealthy_percent: 50, targets: [%q, %q]}
webhooks:
  - url: %s/
    secret_file: %s
    events: {kinds: [route]}
`, b1.addr(), b2.addr(), hook.URL, secretFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := server.New(server.Options{
		Load:   func() (*config.Config, error) { return config.Load(cfgPath, config.LoadOptions{}) },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NoSyn:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	api := httptest.NewServer(d.Handler())
	t.Cleanup(api.Close)
	rl.o.sonde = api.URL

	waitState := func(what string, want map[string]string) {
		t.Helper()
		testenv.Eventually(t, fmt.Sprintf("%s: HAProxy admin states %v", what, want), func() (map[string]string, bool) {
			got := adminState(t, rl)
			return got, fmt.Sprint(got) == fmt.Sprint(want)
		})
	}
	// srv_admin_state: 0 ready, 1 forced maintenance.
	waitState("start", map[string]string{"s1": "0", "s2": "0"})

	b2.failing.Store(true)
	waitState("s2 failing", map[string]string{"s1": "0", "s2": "1"})
	before := b2.served.Load()
	for range 10 {
		resp, err := http.Get("http://" + frontend + "/lb")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("through HAProxy: %s", resp.Status)
		}
	}
	if n := b2.served.Load() - before; n != 0 {
		t.Fatalf("HAProxy sent %d requests to the removed backend", n)
	}

	b2.failing.Store(false)
	waitState("s2 recovered", map[string]string{"s1": "0", "s2": "0"})

	// A batch that reports lost events makes the relay read every route
	// from sonde's API: a server put in maintenance behind its back is
	// ready again.
	if _, err := rl.command(context.Background(), "set server be_api/s1 state maint"); err != nil {
		t.Fatal(err)
	}
	waitState("s1 set by hand", map[string]string{"s1": "1", "s2": "0"})
	body := `{"webhook":"x","lost":3,"events":[]}`
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	req.Header.Set(webhook.SignatureHeader, webhook.Sign(secret, []byte(body)))
	rec := httptest.NewRecorder()
	rl.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("batch with lost events: %d %s", rec.Code, rec.Body)
	}
	waitState("after a resync", map[string]string{"s1": "0", "s2": "0"})
}

// TestRelayRefusesForgery checks that a request without the secret's
// signature changes nothing.
func TestRelayRefusesForgery(t *testing.T) {
	rl, err := newRelay(options{socket: "/nonexistent", secret: []byte("k"), removed: "maint", log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	rl.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"events":[{"kind":"route","pools":["api"],"target":"127.0.0.1:1","to":"removed"}]}`)))
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("unsigned batch: %d, want 401", rec.Code)
	}
}
