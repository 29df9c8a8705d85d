package web

import (
	"fmt"
	"net/http"
	"net/url"
)

// Middleware of the daemon's HTTP endpoints: wrappers that decide whether a
// request reaches its handler, kept apart from the handlers themselves.

// WithHeaders sets the headers every response carries, before anything
// else answers: X-Content-Type-Options: nosniff, so that no browser takes
// an answer for another type than it says (a JSON list or a probe's text
// holding markup from a target, run as a page).
func WithHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r)
	})
}

// crossSite returns why r looks like a request a browser sent for a page of
// another origin, or "" when it does not: a Sec-Fetch-Site other than
// same-origin or none (typed by the user), or, from a browser without
// fetch metadata, an Origin that is not r's own host. A request with
// neither header does not come from a browser script or element (curl,
// Prometheus).
func crossSite(r *http.Request) string {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" {
		if s == "same-origin" || s == "none" {
			return ""
		}
		return fmt.Sprintf("Sec-Fetch-Site %q", s)
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return ""
	}
	if u, err := url.Parse(o); err != nil || u.Host != r.Host {
		return fmt.Sprintf("Origin %q is not this server's", o)
	}
	return ""
}

// SameOrigin refuses, with 403, what a web page of another site could make
// a browser send: a GET is no less a request for being safe to repeat, and
// an <img> or a fetch in no-cors mode sends one from any page, to
// 127.0.0.1 too. http.CrossOriginProtection, which guards the lifecycle
// endpoints, lets safe methods through; endpoints whose GET acts (a probe
// sent where the client says) need this instead.
func SameOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := crossSite(r); why != "" {
			http.Error(w, "cross-origin request refused: "+why, http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// SwitchedOff answers every request with 403 and why: an endpoint the
// operator turned off.
func SwitchedOff(why string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, why, http.StatusForbidden)
	})
}
