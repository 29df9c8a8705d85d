package http

import (
	"errors"
	"net/http"
	"testing"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts Options
		want string // error text, "" = valid
	}{
		{"zero value", Options{}, ""},
		{"full https", Options{Scheme: "https", Method: "HEAD", Path: "/h?x=1#frag", Host: "a.test:8443", SNI: "a.test",
			Headers: http.Header{"X-A": {"b"}}, TLS: TLSOptions{CertFile: "c", KeyFile: "k"}}, ""},
		{"scheme", Options{Scheme: "ftp"}, `invalid http probe options: scheme "ftp": want http or https`},
		{"method", Options{Method: "POST"}, `invalid http probe options: method "POST": want GET or HEAD`},
		{"lowercase method", Options{Method: "get"}, `invalid http probe options: method "get": want GET or HEAD`},
		{"path without slash", Options{Path: "health"}, `invalid http probe options: path "health": want a path starting with one /, without spaces or control characters`},
		{"path with authority", Options{Path: "//evil/x"}, `invalid http probe options: path "//evil/x": want a path starting with one /, without spaces or control characters`},
		{"path with space", Options{Path: "/a b"}, `invalid http probe options: path "/a b": want a path starting with one /, without spaces or control characters`},
		{"negative body bound", Options{MaxBodyBytes: -1}, `invalid http probe options: max body bytes -1: want 0 (default) or more`},
		{"body longer than bound", Options{Body: "abcdef", MaxBodyBytes: 5}, `invalid http probe options: body match of 6 bytes is longer than max body bytes 5`},
		{"body with HEAD", Options{Method: "HEAD", Body: "ok"}, `invalid http probe options: body match needs method GET: a HEAD response has no body`},
		{"host with path", Options{Host: "a.test/x"}, `invalid http probe options: host "a.test/x": want a host name or IP address with an optional port`},
		{"default host with port", Options{DefaultHost: "127.0.0.1:80"}, `invalid http probe options: default host "127.0.0.1:80": want a host name or IP address without a port`},
		{"host with CRLF", Options{Host: "a.test\r\nX: y"}, `invalid http probe options: host "a.test\r\nX: y": want a host name or IP address with an optional port`},
		{"sni is an IP", Options{Scheme: "https", SNI: "10.0.0.1"}, `invalid http probe options: sni "10.0.0.1": want a DNS name (TLS sends no IP addresses)`},
		{"sni with port", Options{Scheme: "https", SNI: "a.test:443"}, `invalid http probe options: sni "a.test:443": want a DNS name (TLS sends no IP addresses)`},
		{"user agent with newline", Options{UserAgent: "a\nb"}, `invalid http probe options: user agent "a\nb" contains control characters`},
		{"tls on http", Options{TLS: TLSOptions{InsecureSkipVerify: true}}, `invalid http probe options: tls settings and sni need scheme https`},
		{"cert without key", Options{Scheme: "https", TLS: TLSOptions{CertFile: "c"}}, `invalid http probe options: tls client certificate and key must be given together`},
		{"bad header name", Options{Headers: http.Header{"X A": {"b"}}}, `invalid http probe options: header name "X A" is not a valid token`},
		{"host header", Options{Headers: http.Header{"host": {"b"}}}, `invalid http probe options: header "host" cannot be set here: set it with the host setting`},
		{"token header", Options{Headers: http.Header{"X-Ms-Auth-Internal-Token": {"b"}}}, `invalid http probe options: header "X-Ms-Auth-Internal-Token" cannot be set here: set it with the auth token setting`},
		{"header value CRLF", Options{Headers: http.Header{"X-A": {"b\r\nc"}}}, `invalid http probe options: header "X-A" value contains control characters`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			got := ""
			if err != nil {
				got = err.Error()
				if !errors.Is(err, ErrInvalidOptions) {
					t.Errorf("error %v does not wrap ErrInvalidOptions", err)
				}
			}
			if got != tt.want {
				t.Errorf("Validate() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestValidHost(t *testing.T) {
	t.Parallel()
	for h, want := range map[string]bool{
		"api.internal": true, "api.internal:8443": true, "api.internal.": true, "under_score.test": true,
		"10.0.0.1": true, "10.0.0.1:80": true, "2001:db8::1": true, "[2001:db8::1]": true, "[2001:db8::1]:8443": true,
		"": false, "a.test/x": false, "a.test:0": false, "a.test:65536": false, "a.test:+80": false, "a.test:": false,
		"[10.0.0.1]": false, "[10.0.0.1]:80": false, "2001:db8::1:80x": false, "[2001:db8::1]x": false,
		"fe80::1%eth0": false, "10.0.0.300": false, "-a.test": false, "a b": false, "a.test\r\nX: y": false,
	} {
		if got := ValidHost(h); got != want {
			t.Errorf("ValidHost(%q) = %v, want %v", h, got, want)
		}
	}
}

func TestHostName(t *testing.T) {
	t.Parallel()
	for h, want := range map[string]string{
		"api.internal": "api.internal", "api.internal:8443": "api.internal", "10.0.0.1:80": "10.0.0.1",
		"[2001:db8::1]:8443": "2001:db8::1", "[2001:db8::1]": "2001:db8::1",
	} {
		if got := HostName(h); got != want {
			t.Errorf("HostName(%q) = %q, want %q", h, got, want)
		}
	}
}

func TestValidPath(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]bool{
		"/": true, "/health?full=1": true, "/a#frag": true,
		"": false, "health": false, "//evil/x": false, "/a b": false, "/caf\u00e9": false, "/a\x7f": false,
	} {
		if got := ValidPath(p); got != want {
			t.Errorf("ValidPath(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestReservedHeader(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"host": true, "USER-AGENT": true, "x-ms-auth-internal-token": true, "Connection": true,
		"Content-Length": true, "transfer-encoding": true, "X-Probe": false, "Accept": false,
	} {
		why, got := ReservedHeader(name)
		if got != want || got != (why != "") {
			t.Errorf("ReservedHeader(%q) = %q, %v; want reserved %v with a reason", name, why, got, want)
		}
	}
}

func TestNewLoadsTLSFiles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		tls  TLSOptions
	}{
		{"missing ca file", TLSOptions{CAFile: "/nonexistent/ca.pem"}},
		{"ca file without PEM", TLSOptions{CAFile: "/dev/null"}},
		{"missing client cert", TLSOptions{CertFile: "/nonexistent/c.pem", KeyFile: "/nonexistent/k.pem"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(t.Context(), Options{Scheme: "https", TLS: tt.tls}); err == nil {
				t.Error("New succeeded, want an error")
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	o := Options{}.WithDefaults()
	if o.Scheme != "http" || o.Method != "GET" || o.Path != "/" || o.MaxBodyBytes != 65536 ||
		o.UserAgent != DefaultUserAgent || o.Healthy == nil {
		t.Errorf("defaults %+v", o)
	}
	for code, want := range map[int]bool{199: false, 200: true, 299: true, 300: false} {
		if o.Healthy.Contains(code) != want {
			t.Errorf("default healthy set contains %d = %v, want %v", code, !want, want)
		}
	}
}
