package http

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/sondeprobe/sonde/probe"
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

// StatusSet is the set of status codes that count as healthy (docs/semantics.md H3).
// [ParseStatusCodes] reads lists such as "200-399" or "200,204,403" into one.
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
	// Host is the Host header (H6), sent as written. Empty means
	// DefaultHost, else the target's host name, else its address, with
	// ":port" unless the port is the scheme's default.
	Host string
	// DefaultHost, when Host is empty, replaces the target's name or address
	// in the Host header; the target's port is added as for them. It names no
	// TLS server: the server name still comes from the target. App Gateway's
	// default probe sends 127.0.0.1 (its URL is <protocol>://127.0.0.1:<port>/).
	DefaultHost string
	// SNI is the TLS server name, sent in the handshake and verified against
	// the server's certificate. Empty means the host of the Host header, and
	// no SNI when that is an IP address (which is then verified instead).
	SNI string
	// UserAgent is the User-Agent header (H7); empty means DefaultUserAgent.
	UserAgent string
	// Headers are extra request headers. The headers of [ReservedHeader]
	// (Host, User-Agent, the token header, Connection, Content-Length,
	// Transfer-Encoding) are rejected here.
	Headers http.Header
	// Token, when set, is sent in the x-ms-auth-internal-token header (H10).
	Token Token
	// TLS holds the HTTPS settings; they are an error with scheme "http".
	TLS TLSOptions
	// Source is the local address probes are sent from; the zero Addr lets
	// the kernel choose.
	Source netip.Addr
}

// TLSOptions are the TLS settings of an HTTPS check. JSON names are those
// of sonde's config file.
type TLSOptions struct {
	// CAFile is a PEM file of the CA certificates that verify servers;
	// empty means the system's roots.
	CAFile string `json:"ca_file,omitempty"`
	// CertFile and KeyFile are a PEM client certificate and its key, given
	// together or not at all.
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`
	// InsecureSkipVerify accepts any server certificate. The certificate's
	// expiry is still reported.
	InsecureSkipVerify bool `json:"insecure_skip_verify"`
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

// reservedHeaders are the request headers that extra headers may not set,
// by canonical name, with the reason: the probe sets each of them from a
// setting of its own, or never sends it.
var reservedHeaders = map[string]string{
	"Host":              "set it with the host setting",
	"User-Agent":        "set it with the user agent setting",
	TokenHeader:         "set it with the auth token setting",
	"Connection":        "probes always use a new connection",
	"Content-Length":    "probes have no body",
	"Transfer-Encoding": "probes have no body",
}

// ReservedHeader reports whether extra headers may not set the header
// called name (in any case), and why.
func ReservedHeader(name string) (why string, reserved bool) {
	why, reserved = reservedHeaders[http.CanonicalHeaderKey(name)]
	return why, reserved
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
	case !ValidPath(o.Path):
		return bad("path %q: want a path starting with one /, without spaces or control characters", o.Path)
	case o.MaxBodyBytes < 0:
		return bad("max body bytes %d: want 0 (default) or more", o.MaxBodyBytes)
	case o.Body != "" && o.Method == http.MethodHead:
		return bad("body match needs method GET: a HEAD response has no body")
	case int64(len(o.Body)) > o.MaxBodyBytes:
		return bad("body match of %d bytes is longer than max body bytes %d", len(o.Body), o.MaxBodyBytes)
	case o.Host != "" && !ValidHost(o.Host):
		return bad("host %q: want a host name or IP address with an optional port", o.Host)
	case o.DefaultHost != "" && !validBareHost(o.DefaultHost):
		return bad("default host %q: want a host name or IP address without a port", o.DefaultHost)
	case o.SNI != "" && !probe.ValidHostName(o.SNI):
		return bad("sni %q: want a DNS name (TLS sends no IP addresses)", o.SNI)
	case !ValidHeaderValue(o.UserAgent):
		return bad("user agent %q contains control characters", o.UserAgent)
	case len(o.UserAgent) > MaxHeaderValueBytes:
		return bad("user agent is %d bytes, more than %d", len(o.UserAgent), MaxHeaderValueBytes)
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
		if why, ok := ReservedHeader(name); ok {
			return bad("header %q cannot be set here: %s", name, why)
		}
		for _, v := range values {
			if !ValidHeaderValue(v) {
				return bad("header %q value contains control characters", name)
			}
			if len(v) > MaxHeaderValueBytes {
				return bad("header %q value is %d bytes, more than %d", name, len(v), MaxHeaderValueBytes)
			}
		}
	}
	return nil
}

// MaxHeaderValueBytes bounds the value of a request header a probe sends
// (extra headers and the user agent): servers refuse request heads of more
// than 8 KiB or so, and a probe that cannot be read is no probe.
const MaxHeaderValueBytes = 4096

// ValidPath reports whether p can be the request target of a probe: "/"
// followed by printable ASCII other than space. "//" at the start would read
// as an authority and is refused.
func ValidPath(p string) bool {
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
