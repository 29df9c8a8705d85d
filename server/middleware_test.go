package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"
)

// TestNosniffOnEveryResponse is the regression test of answers without
// X-Content-Type-Options: nosniff (the status page had it, the API JSON and
// /probe did not): every kind of answer carries it — JSON, text, metrics,
// an event stream, the status page and its assets, and refusals of every
// layer (400, 403 of the host check, of /probe and of the lifecycle
// endpoints, 404, 405, 503 of admission).
func TestNosniffOnEveryResponse(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	td := startDaemon(t, fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 1h, timeout: 2s}
pools:
  - {name: api, check: web, targets: [%q], health_checks: false}
`, b.addr()))
	base := "http://" + served(t, td.d)
	probe := func(extra string) string {
		return "/probe?" + url.Values{"module": {"web"}, "target": {b.addr()}}.Encode() + extra
	}
	type req struct {
		name, method, path string
		header             map[string]string
		status             int
	}
	reqs := []req{
		{"API JSON", "GET", "/api/v1/pools", nil, 200},
		{"API list", "GET", "/api/v1/targets", nil, 200},
		{"API bad parameter", "GET", "/api/v1/targets?limit=x", nil, 400},
		{"API discovery", "GET", "/api/v1/discovery", nil, 200},
		{"API remediations", "GET", "/api/v1/remediations", nil, 200},
		{"event poll", "GET", "/api/v1/events", nil, 200},
		{"event stream", "GET", "/api/v1/events", map[string]string{"Accept": "text/event-stream"}, 200},
		{"probe", "GET", probe(""), nil, 200},
		{"probe debug", "GET", probe("&debug=true"), nil, 200},
		{"probe bad module", "GET", "/probe?module=nope&target=127.0.0.1", nil, 400},
		{"probe refused target", "GET", "/probe?module=web&target=127.0.0.2:1", nil, 403},
		{"probe cross-site", "GET", probe(""), map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"metrics", "GET", "/metrics", nil, 200},
		{"healthy", "GET", "/-/healthy", nil, 200},
		{"ready", "GET", "/-/ready", nil, 200},
		{"status page", "GET", "/", nil, 200},
		{"status asset", "GET", "/static/sonde.css", nil, 200},
		{"not found", "GET", "/nope", nil, 404},
		{"method not allowed", "POST", "/-/healthy", nil, 405},
		{"lifecycle cross-site", "POST", "/-/reload", map[string]string{"Origin": "http://evil.example"}, 403},
		{"host check", "GET", "/api/v1/pools", map[string]string{"Host": "evil.example"}, 403},
	}
	do := func(r req) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		hr, err := http.NewRequestWithContext(ctx, r.method, base+r.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range r.header {
			hr.Header.Set(k, v)
		}
		hr.Host = hr.Header.Get("Host")
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		defer resp.Body.Close()
		if r.name != "event stream" {
			io.Copy(io.Discard, resp.Body)
		}
		if resp.StatusCode != r.status {
			t.Errorf("%s: %s %s: status %d, want %d", r.name, r.method, r.path, resp.StatusCode, r.status)
		}
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: %s %s (%d): X-Content-Type-Options %q, want nosniff", r.name, r.method, r.path, resp.StatusCode, got)
		}
	}
	for _, r := range reqs {
		do(r)
	}
	// A refusal of admission: every list slot taken.
	for range td.d.adm.List.Max() {
		if _, release := td.d.adm.List.Enter(httptest.NewRecorder()); release != nil {
			defer release()
		}
	}
	do(req{"admission refusal", "GET", "/api/v1/pools", nil, 503})
}
