package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/probe/endpoint"
)

// probeRun is what one "sonde probe" run printed and its exit code.
type probeRun struct {
	code   int
	stdout string
	stderr string
}

// lines decodes the -json output, one object per line.
func (r probeRun) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("stdout line %q is not JSON: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// runProbeTest runs "sonde probe args..." with a resolver that knows only
// the names in hosts.
func runProbeTest(t *testing.T, hosts map[string]netip.Addr, args ...string) probeRun {
	t.Helper()
	res := endpoint.ResolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
		if a, ok := hosts[host]; ok {
			return []netip.Addr{a}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	})
	var out, errOut bytes.Buffer
	err := runProbeWith(context.Background(), args, &out, &errOut, res)
	code := report(err, &errOut)
	return probeRun{code: code, stdout: out.String(), stderr: errOut.String()}
}

// request is what a test server saw of one request.
type request struct {
	Method, Path, Host, UserAgent, Header string
}

// recordingServer answers with handler and records every request.
type recordingServer struct {
	*httptest.Server
	mu   sync.Mutex
	seen []request
}

func newRecordingServer(t *testing.T, tls bool, h http.HandlerFunc) *recordingServer {
	t.Helper()
	rs := &recordingServer{}
	wrapped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rs.mu.Lock()
		rs.seen = append(rs.seen, request{r.Method, r.URL.RequestURI(), r.Host, r.UserAgent(), r.Header.Get("X-Probe")})
		rs.mu.Unlock()
		h(w, r)
	})
	rs.Server = httptest.NewUnstartedServer(wrapped)
	rs.Config.ErrorLog = log.New(io.Discard, "", 0) // TLS handshake errors are expected
	if tls {
		rs.StartTLS()
	} else {
		rs.Start()
	}
	t.Cleanup(rs.Close)
	return rs
}

func (rs *recordingServer) requests() []request {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]request(nil), rs.seen...)
}

func answer(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

// refusedAddr returns a loopback port that refuses connections for the
// test's duration: a bound socket that does not listen.
func refusedAddr(t *testing.T) netip.AddrPort {
	t.Helper()
	d := &demo{stop: make(chan struct{})}
	addr, err := d.refuse()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return addr
}

// tcpListener returns the address of a listener that accepts and closes.
func tcpListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	acceptAndClose(t, ln)
	return ln.Addr().String()
}

// acceptAndClose accepts connections on ln and closes each at once, until
// the test ends.
func acceptAndClose(t *testing.T, ln net.Listener) {
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
}

func TestProbeHTTPHealthyJSON(t *testing.T) {
	srv := newRecordingServer(t, false, answer(200, "Healthy"))
	r := runProbeTest(t, nil, "-json", "-header", "X-Probe: yes", srv.URL+"/health?full=1")
	if r.code != exitOK {
		t.Fatalf("exit %d, want 0; stderr: %s", r.code, r.stderr)
	}
	lines := r.lines(t)
	if len(lines) != 1 {
		t.Fatalf("got %d lines, want 1: %s", len(lines), r.stdout)
	}
	l := lines[0]
	want := map[string]any{
		"target": srv.URL + "/health?full=1", "protocol": "http", "outcome": "success",
		"healthy": true, "status": float64(200), "address": strings.TrimPrefix(srv.URL, "http://"),
	}
	for k, v := range want {
		if diff := cmp.Diff(v, l[k]); diff != "" {
			t.Errorf("field %s (-want +got):\n%s", k, diff)
		}
	}
	if lat, ok := l["latency_seconds"].(float64); !ok || lat <= 0 {
		t.Errorf("latency_seconds = %v, want > 0", l["latency_seconds"])
	}
	if _, ok := l["phases"].(map[string]any)["first_byte_seconds"]; !ok {
		t.Errorf("phases lack first_byte_seconds: %v", l["phases"])
	}
	if _, ok := l["error"]; ok {
		t.Errorf("a healthy result has an error: %v", l["error"])
	}
	got := srv.requests()
	wantReq := []request{{Method: "GET", Path: "/health?full=1", Host: strings.TrimPrefix(srv.URL, "http://"), UserAgent: "sonde-health-probe/1", Header: "yes"}}
	if diff := cmp.Diff(wantReq, got); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestProbeHTTPFailures(t *testing.T) {
	failing := newRecordingServer(t, false, answer(500, "oops"))
	healthy := newRecordingServer(t, false, answer(200, "Healthy"))
	redirect := newRecordingServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	})
	slow := newRecordingServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // answers only when the prober gives up
	})
	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		outcome   string
		status    float64
		errSubstr string
	}{
		{"500", []string{failing.URL}, 1, "http_status", 500, "(healthy: 200-299)"},
		{"500 accepted by -status", []string{"-status", "200-299,500", failing.URL}, 0, "success", 500, ""},
		{"body mismatch", []string{"-body", "Ready", healthy.URL}, 1, "body_mismatch", 200, `want "Ready"`},
		{"body match", []string{"-body", "Heal", healthy.URL}, 0, "success", 200, ""},
		{"redirect not followed", []string{redirect.URL + "/x"}, 1, "http_status", 302, "302"},
		{"redirect accepted by 200-399", []string{"-status", "200-399", redirect.URL + "/x"}, 0, "success", 302, ""},
		{"timeout", []string{"-timeout", "200ms", slow.URL}, 1, "timeout", 0, "(timeout 200ms)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runProbeTest(t, nil, append([]string{"-json"}, tc.args...)...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d; stdout %s stderr %s", r.code, tc.code, r.stdout, r.stderr)
			}
			l := r.lines(t)[0]
			if l["outcome"] != tc.outcome || l["status"] != tc.status || l["healthy"] != (tc.code == 0) {
				t.Errorf("got outcome %v status %v healthy %v, want %s %v %v", l["outcome"], l["status"], l["healthy"], tc.outcome, tc.status, tc.code == 0)
			}
			e, _ := l["error"].(string)
			if tc.errSubstr == "" && e != "" || !strings.Contains(e, tc.errSubstr) {
				t.Errorf("error %q, want it to contain %q", e, tc.errSubstr)
			}
		})
	}
	if n := len(redirect.requests()); n != 2 {
		t.Errorf("redirecting server saw %d requests, want 2 (redirects are not followed)", n)
	}
}

func TestProbePresetFrontDoor(t *testing.T) {
	ok := newRecordingServer(t, false, answer(200, ""))
	noContent := newRecordingServer(t, false, answer(204, ""))
	r := runProbeTest(t, nil, "-preset", "frontdoor", "-json", ok.URL, noContent.URL)
	if r.code != exitFailure {
		t.Fatalf("exit %d, want 1 (204 is not healthy for frontdoor); stderr %s", r.code, r.stderr)
	}
	lines := r.lines(t)
	if lines[0]["outcome"] != "success" || lines[1]["outcome"] != "http_status" {
		t.Errorf("outcomes %v, %v; want success, http_status", lines[0]["outcome"], lines[1]["outcome"])
	}
	for _, srv := range []*recordingServer{ok, noContent} {
		got := srv.requests()
		if len(got) != 1 || got[0].Method != "HEAD" || got[0].UserAgent != "Edge Health Probe" {
			t.Errorf("requests %+v, want one HEAD with user agent Edge Health Probe", got)
		}
	}
}

// TestProbePresetAppGateway checks App Gateway's default probe: Host
// 127.0.0.1 with the port, unless -host says otherwise.
func TestProbePresetAppGateway(t *testing.T) {
	srv := newRecordingServer(t, false, answer(302, ""))
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	if r := runProbeTest(t, nil, "-preset", "appgateway", srv.URL); r.code != exitOK {
		t.Fatalf("exit %d, want 0 (302 is healthy for appgateway); stderr %s", r.code, r.stderr)
	}
	if r := runProbeTest(t, nil, "-preset", "appgateway", "-host", "api.internal", srv.URL); r.code != exitOK {
		t.Fatalf("exit %d; stderr %s", r.code, r.stderr)
	}
	got := srv.requests()
	if len(got) != 2 || got[0].Host != "127.0.0.1:"+port || got[1].Host != "api.internal" {
		t.Errorf("requests %+v, want Host 127.0.0.1:%s, then api.internal", got, port)
	}
}

// TestProbeMixedText checks the text output: one line per target in
// argument order, the reason for each failure, and exit 1.
func TestProbeMixedText(t *testing.T) {
	healthy := newRecordingServer(t, false, answer(200, "Healthy"))
	failing := newRecordingServer(t, false, answer(503, ""))
	listening := tcpListener(t)
	refused := refusedAddr(t)
	args := []string{failing.URL, "tcp://" + listening, healthy.URL + "/", "tcp://" + refused.String()}
	r := runProbeTest(t, nil, args...)
	if r.code != exitFailure {
		t.Fatalf("exit %d, want 1; stderr %s", r.code, r.stderr)
	}
	if r.stderr != "" {
		t.Errorf("stderr %q, want nothing: the output says what failed", r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	want := [][]string{
		{failing.URL, "http", "http_status", "503", "not in the healthy set: 503 (healthy: 200-299)"},
		{"tcp://" + listening, "tcp", "success", "-"},
		{healthy.URL + "/", "http", "success", "200"},
		{"tcp://" + refused.String(), "tcp", "refused", "-", "connection refused"},
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), r.stdout)
	}
	for i, w := range want {
		f := strings.Fields(lines[i])
		if len(f) < 5 || f[0] != w[0] || f[1] != w[1] || f[2] != w[2] || f[4] != w[3] {
			t.Errorf("line %d = %q, want fields %q", i, lines[i], w)
		}
		if len(w) > 4 && !strings.Contains(lines[i], w[4]) {
			t.Errorf("line %d = %q, want it to say %q", i, lines[i], w[4])
		}
	}
}

func TestProbeHostName(t *testing.T) {
	srv := newRecordingServer(t, false, answer(200, ""))
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	hosts := map[string]netip.Addr{"api.sonde.test": netip.MustParseAddr("127.0.0.1")}
	u := "http://api.sonde.test:" + strconv.Itoa(port) + "/ping"
	r := runProbeTest(t, hosts, "-ip-family", "ip4", u)
	if r.code != exitOK {
		t.Fatalf("exit %d, want 0; stdout %s stderr %s", r.code, r.stdout, r.stderr)
	}
	if got := srv.requests(); len(got) != 1 || got[0].Host != "api.sonde.test:"+strconv.Itoa(port) {
		t.Errorf("requests %+v, want Host api.sonde.test:%d", got, port)
	}
	// -host overrides the URL's host.
	runProbeTest(t, hosts, "-host", "other.example", u)
	if got := srv.requests(); len(got) != 2 || got[1].Host != "other.example" {
		t.Errorf("requests %+v, want Host other.example", got)
	}
	// A name without an address of the family fails the target, not the command.
	r = runProbeTest(t, hosts, "-json", "-ip-family", "ip6", u)
	if r.code != exitFailure {
		t.Fatalf("exit %d, want 1; stderr %s", r.code, r.stderr)
	}
	if l := r.lines(t)[0]; l["outcome"] != "error" || l["error"] != `"api.sonde.test" has no IPv6 address` {
		t.Errorf("got %v, want outcome error from resolving, worded as the daemon words it", l)
	}
}

func TestProbeHTTPS(t *testing.T) {
	srv := newRecordingServer(t, true, answer(200, "Healthy"))
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		outcome string
	}{
		{"test CA", []string{"-ca-file", caFile}, 0, "success"},
		{"insecure", []string{"-insecure"}, 0, "success"},
		{"unknown CA", nil, 1, "tls"},
		{"wrong server name", []string{"-ca-file", caFile, "-sni", "wrong.sonde.test"}, 1, "tls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runProbeTest(t, nil, append(append([]string{"-json"}, tc.args...), srv.URL+"/")...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d; stdout %s stderr %s", r.code, tc.code, r.stdout, r.stderr)
			}
			l := r.lines(t)[0]
			if l["outcome"] != tc.outcome || l["protocol"] != "https" {
				t.Errorf("got %v, want outcome %s", l, tc.outcome)
			}
			if _, ok := l["cert_expiry"].(string); !ok {
				t.Errorf("cert_expiry missing: %v", l)
			}
		})
	}
}

// TestProbeInterrupted checks that a cancelled context ends the command
// with an error (exit 1) and every target reported.
func TestProbeInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	err := runProbe(ctx, []string{"-json", "tcp://127.0.0.1:1", "tcp://127.0.0.1:2"}, &out, &errOut)
	if code := report(err, &errOut); code != exitFailure || !errors.Is(err, context.Canceled) {
		t.Errorf("exit %d, err %v; want 1 and context.Canceled", code, err)
	}
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Errorf("got %d result lines, want 2:\n%s", n, out.String())
	}
}
