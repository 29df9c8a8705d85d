package http

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// Defaults applied by [Options.WithDefaults] to zero fields.
const (
	DefaultScheme       = "http"
	DefaultMethod       = http.MethodGet
	DefaultPath         = "/"
	DefaultMaxBodyBytes = 64 << 10
	DefaultUserAgent    = "sonde-health-probe/1"
)

// ErrInvalidOptions is returned (wrapped) by [Options.Validate] and [New].
var ErrInvalidOptions = errors.New("invalid http probe options")

// StatusSet is the set of status codes that count as healthy (SEMANTICS H3).
// The config package parses lists such as "200-399" or "200,204,403" into one.
type StatusSet interface {
	Contains(code int) bool
}

// StatusRange is a StatusSet of the codes from Min to Max, both included.
type StatusRange struct{ Min, Max int }

// Contains reports whether Min <= code <= Max.
func (r StatusRange) Contains(code int) bool { return r.Min <= code && code <= r.Max }

// Options describe one HTTP check. The zero value is a GET of / over plain
// HTTP that accepts 200–299. Zero fields take the defaults of
// [Options.WithDefaults]; [New] applies them and calls [Options.Validate].
type Options struct {
	// Scheme is "http" or "https" (H6). The port is always the target's.
	Scheme string
	// Method is "GET" or "HEAD" (H1).
	Method string
	// Path is the request target: a path starting with "/", with an
	// optional query (H2). It is sent as written; a "#fragment" is dropped.
	Path string
	// Healthy is the set of healthy status codes (H3, H11); nil means
	// 200–299. Redirects are never followed: a 3xx is judged by its code (H5).
	Healthy StatusSet
	// Body, when not empty, must occur in the first MaxBodyBytes bytes of
	// the response body (H4). It is a plain substring, not a pattern.
	Body string
	// MaxBodyBytes bounds how much of the body is read; default 65536. The
	// probe's last byte (H8) is the last byte read.
	MaxBodyBytes int64
	// Host is the Host header (H6), sent as written. Empty means the
	// target's host name, else its address, with ":port" unless the port is
	// the scheme's default.
	Host string
	// SNI is the TLS server name, sent in the handshake and verified against
	// the server's certificate. Empty means the host of the Host header, and
	// no SNI when that is an IP address (which is then verified instead).
	SNI string
	// UserAgent is the User-Agent header (H7); empty means DefaultUserAgent.
	UserAgent string
	// Headers are extra request headers. Host, User-Agent, Connection,
	// Content-Length, Transfer-Encoding and the token header have their own
	// settings and are rejected here.
	Headers http.Header
	// Token, when set, is sent in the x-ms-auth-internal-token header (H10).
	Token Token
	// TLS holds the HTTPS settings; they are an error with scheme "http".
	TLS TLSOptions
	// Source is the local address probes are sent from; the zero Addr lets
	// the kernel choose.
	Source netip.Addr
}

// TLSOptions are the TLS settings of an HTTPS check.
type TLSOptions struct {
	// CAFile is a PEM file of the CA certificates that verify servers;
	// empty means the system's roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, given
	// together or not at all.
	CertFile, KeyFile string
	// InsecureSkipVerify accepts any server certificate. The certificate's
	// expiry is still reported.
	InsecureSkipVerify bool
}

func (t TLSOptions) isZero() bool { return t == TLSOptions{} }

// WithDefaults returns o with every zero field that has a default set to it.
func (o Options) WithDefaults() Options {
	if o.Scheme == "" {
		o.Scheme = DefaultScheme
	}
	if o.Method == "" {
		o.Method = DefaultMethod
	}
	if o.Path == "" {
		o.Path = DefaultPath
	}
	if o.Healthy == nil {
		o.Healthy = StatusRange{200, 299}
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.UserAgent == "" {
		o.UserAgent = DefaultUserAgent
	}
	return o
}

// reservedHeaders are the request headers that have a field of their own or
// that the prober controls (canonical form).
var reservedHeaders = []string{
	"Host", "User-Agent", "Connection", "Content-Length", "Transfer-Encoding", TokenHeader,
}

// Validate reports the first setting a probe cannot use. Zero fields are
// valid: they stand for their defaults. It does not read the TLS files;
// [New] does.
func (o Options) Validate() error {
	o = o.WithDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	switch {
	case o.Scheme != "http" && o.Scheme != "https":
		return bad("scheme %q: want http or https", o.Scheme)
	case o.Method != http.MethodGet && o.Method != http.MethodHead:
		return bad("method %q: want GET or HEAD", o.Method)
	case !validPath(o.Path):
		return bad("path %q: want a path starting with one /, without spaces or control characters", o.Path)
	case o.MaxBodyBytes < 0:
		return bad("max body bytes %d: want 0 (default) or more", o.MaxBodyBytes)
	case o.Body != "" && o.Method == http.MethodHead:
		return bad("body match needs method GET: a HEAD response has no body")
	case int64(len(o.Body)) > o.MaxBodyBytes:
		return bad("body match of %d bytes is longer than max body bytes %d", len(o.Body), o.MaxBodyBytes)
	case o.Host != "" && !validHost(o.Host):
		return bad("host %q: want host or host:port", o.Host)
	case o.SNI != "" && !validServerName(o.SNI):
		return bad("sni %q: want a DNS name (TLS sends no IP addresses)", o.SNI)
	case !ValidHeaderValue(o.UserAgent):
		return bad("user agent %q contains control characters", o.UserAgent)
	case o.Scheme == "http" && (!o.TLS.isZero() || o.SNI != ""):
		return bad("tls settings and sni need scheme https")
	case (o.TLS.CertFile == "") != (o.TLS.KeyFile == ""):
		return bad("tls client certificate and key must be given together")
	}
	return validateHeaders(o.Headers, bad)
}

func validateHeaders(h http.Header, bad func(string, ...any) error) error {
	for name, values := range h {
		if !ValidHeaderName(name) {
			return bad("header name %q is not a valid token", name)
		}
		canon := http.CanonicalHeaderKey(name)
		for _, r := range reservedHeaders {
			if canon == r {
				return bad("header %q has its own setting", name)
			}
		}
		for _, v := range values {
			if !ValidHeaderValue(v) {
				return bad("header %q value contains control characters", name)
			}
		}
	}
	return nil
}

// validPath accepts "/" followed by printable ASCII other than space; "//"
// at the start would read as an authority and is refused.
func validPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] >= 0x7f {
			return false
		}
	}
	return true
}

// validHost accepts a host name, IPv4 address or bracketed IPv6 address,
// with an optional port: the characters of a URL authority without user info.
func validHost(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`/?#@"<>\{}|^`+"`", c) >= 0 {
			return false
		}
	}
	return true
}

// validServerName accepts a DNS name: no IP literal, port or brackets.
func validServerName(s string) bool {
	if _, err := netip.ParseAddr(s); err == nil {
		return false
	}
	return validHost(s) && !strings.ContainsAny(s, ":[]")
}

// ValidHeaderName reports whether s can be a header field name: an RFC 9110
// token.
func ValidHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && strings.IndexByte("!#$%&'*+-.^_`|~", c) < 0 {
			return false
		}
	}
	return true
}

// ValidHeaderValue reports whether v can be sent as a header field value: no
// control characters other than tab (no CR, LF, NUL).
func ValidHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
