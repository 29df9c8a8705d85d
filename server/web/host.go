package web

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// hostGuard refuses requests whose Host is neither an IP address,
// "localhost", nor one of allowed (lower case, without a trailing dot).
type hostGuard struct {
	next    http.Handler
	allowed map[string]bool
}

// HostGuard returns next behind a check of the Host header: requests that
// name neither an IP address, "localhost", nor one of allowed (any case,
// with or without a trailing dot) are refused with 403. A server on
// loopback needs it: a web page that rebinds its own name to 127.0.0.1
// (DNS rebinding) must not read the API.
func HostGuard(next http.Handler, allowed []string) http.Handler {
	g := &hostGuard{next: next, allowed: map[string]bool{"localhost": true}}
	for _, h := range allowed {
		g.allowed[normalHost(h)] = true
	}
	return g
}

// normalHost lowers a host name and drops its trailing dot.
func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

func (g *hostGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.ok(r.Host) {
		http.Error(w, fmt.Sprintf("host %q refused: sonde listens on loopback and answers only IP addresses, localhost and the names of -web.allowed-hosts", r.Host), http.StatusForbidden)
		return
	}
	g.next.ServeHTTP(w, r)
}

func (g *hostGuard) ok(hostport string) bool {
	if hostport == "" {
		return true // HTTP/1.0 without Host: not a browser
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return g.allowed[normalHost(host)]
}

// IsLoopback reports whether a listener's address is a loopback address.
func IsLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return false
	}
	ap := ta.AddrPort()
	return ap.Addr().Unmap().IsLoopback()
}

// Lifecycle guards a state-changing endpoint: 403 unless enabled (the
// lifecycle endpoints are, with -web.enable-lifecycle), and 403 for a request a browser sent from another
// site (Sec-Fetch-Site or Origin), or with a body a cross-site form or
// script can send without asking first (a CORS-safelisted content type). A
// browser adds Sec-Fetch-Site or Origin to every cross-site POST, so a
// request without a body and without either header does not come from one
// (curl -X POST).
func Lifecycle(enabled bool, h http.HandlerFunc) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !enabled {
			http.Error(w, "lifecycle endpoints are disabled; start sonde run with -web.enable-lifecycle", http.StatusForbidden)
			return
		}
		if err := cop.Check(r); err != nil {
			http.Error(w, "cross-origin request refused: "+err.Error(), http.StatusForbidden)
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "" {
			mt, _, err := mime.ParseMediaType(ct)
			if err != nil || mt == "application/x-www-form-urlencoded" || mt == "multipart/form-data" || mt == "text/plain" {
				http.Error(w, fmt.Sprintf("content type %q refused: a browser sends it from any site; send no body, or application/json", ct), http.StatusForbidden)
				return
			}
		}
		h(w, r)
	})
}
