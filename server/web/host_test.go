package web

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestHostGuardAlone checks the Host check on its own, without a daemon:
// IP addresses, localhost and the allowed names (any case, with or without
// a trailing dot or a port) pass; other names are refused with 403 before
// the handler runs, and so is a name that only starts with an address.
func TestHostGuardAlone(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := WithHeaders(HostGuard(ok, []string{"Sonde.Test."}))
	for _, tt := range []struct {
		host string
		want int
	}{
		{"", http.StatusTeapot},
		{"127.0.0.1:9123", http.StatusTeapot},
		{"127.0.0.1", http.StatusTeapot},
		{"[::1]:9123", http.StatusTeapot},
		{"[::1]", http.StatusTeapot},
		{"localhost:9123", http.StatusTeapot},
		{"LOCALHOST.", http.StatusTeapot},
		{"sonde.test:9123", http.StatusTeapot},
		{"SONDE.TEST", http.StatusTeapot},
		{"evil.example:9123", http.StatusForbidden},
		{"evil.example", http.StatusForbidden},
		{"127.0.0.1.evil.example", http.StatusForbidden},
		{"sonde.test.evil.example", http.StatusForbidden},
	} {
		t.Run(tt.host, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/api/v1/pools", nil)
			req.Host = tt.host
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Errorf("Host %q: status %d, want %d", tt.host, rec.Code, tt.want)
			}
			if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("Host %q: X-Content-Type-Options %q, want nosniff on refusals too", tt.host, got)
			}
		})
	}
}

// TestLifecycleAlone checks the lifecycle guard without a daemon: off, it
// refuses everything; on, it refuses cross-site requests and bodies a
// browser sends from any site, and lets a plain POST through.
func TestLifecycleAlone(t *testing.T) {
	t.Parallel()
	ran := 0
	h := func(w http.ResponseWriter, _ *http.Request) { ran++ }
	for _, tt := range []struct {
		name    string
		enabled bool
		header  map[string]string
		want    int
	}{
		{"disabled", false, nil, http.StatusForbidden},
		{"plain POST", true, nil, http.StatusOK},
		{"JSON body", true, map[string]string{"Content-Type": "application/json"}, http.StatusOK},
		{"form body", true, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, http.StatusForbidden},
		{"text body", true, map[string]string{"Content-Type": "text/plain; charset=utf-8"}, http.StatusForbidden},
		{"cross-site", true, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"same-origin", true, map[string]string{"Sec-Fetch-Site": "same-origin"}, http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := ran
			req := httptest.NewRequest(http.MethodPost, "/-/reload", nil)
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			Lifecycle(tt.enabled, h).ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Errorf("status %d, want %d: %s", rec.Code, tt.want, rec.Body)
			}
			if reached := ran > before; reached != (tt.want == http.StatusOK) {
				t.Errorf("handler reached: %v, want %v", reached, tt.want == http.StatusOK)
			}
		})
	}
}

// TestWithPrefixAlone checks the route prefix without a daemon.
func TestWithPrefixAlone(t *testing.T) {
	t.Parallel()
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(r.URL.Path)) })
	h := WithPrefix("/sonde", inner)
	for _, tt := range []struct {
		path, want string
		code       int
	}{
		{"/sonde/metrics", "/metrics", http.StatusOK},
		{"/sonde/", "/", http.StatusOK},
		{"/sonde", "", http.StatusFound},
		{"/sondex/metrics", "", http.StatusNotFound},
		{"/metrics", "", http.StatusNotFound},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
		if rec.Code != tt.code || tt.code == http.StatusOK && rec.Body.String() != tt.want {
			t.Errorf("%s: %d %q, want %d %q", tt.path, rec.Code, rec.Body, tt.code, tt.want)
		}
	}
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{"", "", true}, {"/", "", true}, {"/sonde/", "/sonde", true}, {"/a/b", "/a/b", true},
		{"sonde", "", false}, {"/a//b", "", false}, {"/a/../b", "", false}, {"/a?x=1", "", false},
	} {
		got, err := RoutePrefix(tt.in)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("RoutePrefix(%q) = %q, %v; want %q, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
