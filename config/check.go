package config

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	httpprobe "github.com/sondeprobe/sonde/probe/http"
	"github.com/sondeprobe/sonde/scheduler"
)

// Protocol is how a check probes: a TCP handshake or an HTTP(S) request.
type Protocol uint8

// The protocols. The zero Protocol is not valid.
const (
	TCP Protocol = iota + 1
	HTTP
	HTTPS
)

var protocolNames = [...]string{TCP: "tcp", HTTP: "http", HTTPS: "https"}

// String returns "tcp", "http" or "https".
func (p Protocol) String() string {
	if p >= TCP && int(p) < len(protocolNames) {
		return protocolNames[p]
	}
	return "protocol(" + strconv.Itoa(int(p)) + ")"
}

// MarshalText encodes the protocol as its name.
func (p Protocol) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// TCPMode chooses the prober of a TCP check.
type TCPMode uint8

// The TCP modes.
const (
	TCPAuto    TCPMode = iota // SYN prober when sonde has the privileges, connect() otherwise
	TCPSyn                    // raw-socket SYN prober only (T1, T3)
	TCPConnect                // connect() prober only
)

var tcpModeNames = [...]string{TCPAuto: "auto", TCPSyn: "syn", TCPConnect: "connect"}

// String returns "auto", "syn" or "connect".
func (m TCPMode) String() string {
	if int(m) < len(tcpModeNames) {
		return tcpModeNames[m]
	}
	return "tcpmode(" + strconv.Itoa(int(m)) + ")"
}

// MarshalText encodes the mode as its name.
func (m TCPMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// IPFamily is the address family preferred when a target is a host name.
type IPFamily uint8

// The address families.
const (
	IPAny IPFamily = iota // IPv4 when the name has one, otherwise IPv6
	IP4                   // IPv4 only
	IP6                   // IPv6 only
)

var ipFamilyNames = [...]string{IPAny: "any", IP4: "ip4", IP6: "ip6"}

// String returns "any", "ip4" or "ip6".
func (f IPFamily) String() string {
	if int(f) < len(ipFamilyNames) {
		return ipFamilyNames[f]
	}
	return "ipfamily(" + strconv.Itoa(int(f)) + ")"
}

// MarshalText encodes the family as its name.
func (f IPFamily) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// network is the network argument of a resolver lookup for f.
func (f IPFamily) network() string {
	switch f {
	case IP4:
		return "ip4"
	case IP6:
		return "ip6"
	}
	return "ip"
}

// AuthTokenHeader is the request header that carries the App Service probe
// token, base64(SHA-256(secret)) (H10).
const AuthTokenHeader = "X-Ms-Auth-Internal-Token"

// AuthToken says where the secret of the probe token is (H10). Exactly one
// field is set. Reading the secret is the prober's job; [Parse] only checks
// that the file exists or the variable is set.
type AuthToken struct {
	SecretFile string // path of a file holding the secret, relative paths resolved against the config's directory
	SecretEnv  string // name of an environment variable holding the secret
}

// TLS holds the TLS settings of an HTTPS check. File paths are resolved
// against the config's directory.
type TLS struct {
	CAFile             string // PEM roots that verify the server; "" means the system roots
	CertFile, KeyFile  string // client certificate and key, both or neither
	ServerName         string // name the server certificate must match; "" means the check's SNI
	InsecureSkipVerify bool   // accept any server certificate
}

// Limits and defaults of check settings that hold with or without a preset.
const (
	MaxDuration         = 24 * time.Hour // longest interval, timeout or other duration
	MaxBodyContains     = 4090           // characters of body_contains (H4)
	DefaultMaxBodyBytes = 64 << 10       // body bytes read for body_contains
	MaxMaxBodyBytes     = 16 << 20       // largest max_body_bytes
)

var (
	durationRange = durRange{time.Millisecond, MaxDuration}
	gapRange      = durRange{0, MaxDuration}
	portRange     = intRange{1, 65535}
)

// Check is one check with its effective settings: the preset's values with
// the check's own settings on top. Timing and evaluation are in the fields
// that [Check.Sched] hands to the scheduler; the others define one probe.
//
// A Check is read-only once [Parse] returns it and safe for concurrent reads.
type Check struct {
	Name   string     // key under "checks"
	Preset string     // preset name, "" for none
	Spec   *CheckSpec // the check as written in the file

	Protocol Protocol
	Port     uint16   // port of targets that give none; 0: see [Check.DefaultPort]
	TCPMode  TCPMode  // TCP checks only
	IPFamily IPFamily // address family preferred for host-name targets

	// HTTP and HTTPS checks only (zero for TCP).
	Method        string            // "GET" or "HEAD"
	Path          string            // request path, starting with "/"
	HealthyStatus StatusSet         // status codes that count as success (H3)
	BodyContains  string            // substring the body must contain (H4); "" for no body check
	MaxBodyBytes  int               // body bytes read when looking for BodyContains
	Host          string            // Host header; "" means the target's host name or address
	SNI           string            // TLS server name sent (HTTPS); "" means the target's host name
	UserAgent     string            // User-Agent header; "" lets the prober choose
	Headers       map[string]string // extra request headers, canonical names
	AuthToken     *AuthToken        // signed probe token (H10), nil for none
	TLS           *TLS              // HTTPS settings, nil for the defaults

	SourceAddress netip.Addr // local address probes are sent from; invalid for the system's choice

	Interval          time.Duration    // gap after a completed probe
	Timeout           time.Duration    // per-probe timeout
	FastRecheck       time.Duration    // gap after a first failure (E4); 0 = Interval
	UnhealthyInterval time.Duration    // gap while unhealthy; 0 = Interval
	Jitter            time.Duration    // random extra gap in [0, Jitter)
	Rise, Fall        int              // consecutive thresholds (E1); for a window check the equivalent k of W2 and W1
	Window            scheduler.Window // sliding window (E2) when Size > 0
	Initial           scheduler.State  // state before the first decision (E3)

	// Class is the check's probe class: checks with the same Class send the
	// same probe and judge it the same way, and differ at most in timing
	// and evaluation. Targets with the same address, port and class share
	// one probe stream (see [Target.Leader]).
	Class int
}

// Sched returns the check's timing and evaluation settings for the scheduler,
// without a Launcher.
func (c *Check) Sched() scheduler.Check {
	return scheduler.Check{Timing: scheduler.Timing{
		Interval:          c.Interval,
		Timeout:           c.Timeout,
		FastRecheck:       c.FastRecheck,
		UnhealthyInterval: c.UnhealthyInterval,
		Jitter:            c.Jitter,
		Rise:              c.Rise,
		Fall:              c.Fall,
		Window:            c.Window,
		Initial:           c.Initial,
	}}
}

// DefaultPort is the port of a target that gives none: the check's port, else
// 80 for HTTP and 443 for HTTPS, else 0 (a TCP check without a port needs a
// port on every target).
func (c *Check) DefaultPort() uint16 {
	switch {
	case c.Port != 0:
		return c.Port
	case c.Protocol == HTTP:
		return 80
	case c.Protocol == HTTPS:
		return 443
	}
	return 0
}

// hostNameMatters reports whether a target's host name changes the probe:
// it does for HTTP(S) checks without a Host setting, where it becomes the
// Host header (and the SNI).
func (c *Check) hostNameMatters() bool { return c.Protocol != TCP && c.Host == "" }

// field returns the path of one of the check's fields.
func (c *Check) field(name string) string { return "checks." + c.Name + "." + name }

// Validate reports the first effective setting out of its range, with the
// preset's documented ranges where it has them.
func (c *Check) Validate() error {
	if !validName(c.Name) {
		return fieldErr("checks."+c.Name, "invalid check name; want %s", nameRule)
	}
	p := defaultPreset
	if c.Preset != "" {
		var ok bool
		if p, ok = LookupPreset(c.Preset); !ok {
			return fieldErr(c.field("preset"), "%q is not one of %s", c.Preset, strings.Join(presetNames, ", "))
		}
	}
	if err := c.validateProbe(p); err != nil {
		return err
	}
	if err := c.validateTiming(p); err != nil {
		return err
	}
	sc := c.Sched()
	if err := sc.Validate(); err != nil {
		return &FieldError{Field: "checks." + c.Name, Msg: err.Error(), Err: err} // unreachable after the checks above
	}
	return nil
}

// validateProbe checks what goes on the wire and how one probe is judged.
func (c *Check) validateProbe(p Preset) error {
	if c.Protocol < TCP || c.Protocol > HTTPS {
		return fieldErr(c.field("protocol"), "%s is not one of tcp, http, https", c.Protocol)
	}
	if len(p.Protocols) > 0 && !slices.Contains(p.Protocols, c.Protocol) {
		return checkEnum(c.field("protocol"), c.Protocol.String(), protocolList(p.Protocols), p.Name)
	}
	if c.Protocol == TCP {
		return nil
	}
	if err := checkEnum(c.field("method"), c.Method, []string{"GET", "HEAD"}, ""); err != nil {
		return err
	}
	if c.Path == "" {
		return fieldErr(c.field("path"), "missing%s; there is no default path", forPreset(c.Preset))
	}
	if err := checkPath(c.field("path"), c.Path, p.strictPath, p.Name); err != nil {
		return err
	}
	if c.HealthyStatus.IsEmpty() {
		return fieldErr(c.field("healthy_status"), "no status codes")
	}
	if n := utf8.RuneCountInString(c.BodyContains); n > MaxBodyContains {
		return fieldErr(c.field("body_contains"), "%d characters, more than %d", n, MaxBodyContains)
	}
	if c.BodyContains != "" && c.Method == "HEAD" {
		return fieldErr(c.field("body_contains"), "cannot be used with method HEAD (a HEAD response has no body)")
	}
	if err := checkInt(c.field("max_body_bytes"), c.MaxBodyBytes, intRange{1, MaxMaxBodyBytes}, ""); err != nil {
		return err
	}
	if c.MaxBodyBytes < len(c.BodyContains) {
		return fieldErr(c.field("max_body_bytes"), "%d is less than the %d bytes of body_contains", c.MaxBodyBytes, len(c.BodyContains))
	}
	if c.Host != "" && !validHost(c.Host) {
		return fieldErr(c.field("host"), "%q is not a host name or IP address with an optional port", c.Host)
	}
	if c.SNI != "" && c.Protocol != HTTPS {
		return fieldErr(c.field("sni"), "only for protocol https, not %s", c.Protocol)
	}
	if c.SNI != "" && !validHostName(c.SNI) {
		return fieldErr(c.field("sni"), "%q is not a host name", c.SNI)
	}
	if !httpprobe.ValidHeaderValue(c.UserAgent) {
		return fieldErr(c.field("user_agent"), "%q contains a control character", c.UserAgent)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Headers)) {
		if err := c.validateHeader(name, c.Headers[name]); err != nil {
			return err
		}
	}
	return nil
}

// reservedHeaders are set by other settings or by the prober itself.
var reservedHeaders = map[string]string{
	"Host":              "use host",
	"User-Agent":        "use user_agent",
	"Connection":        "probes always use a new connection",
	"Content-Length":    "probes have no body",
	"Transfer-Encoding": "probes have no body",
}

func (c *Check) validateHeader(name, value string) error {
	f := c.field("headers." + name)
	if !httpprobe.ValidHeaderName(name) {
		return fieldErr(c.field("headers"), "%q is not a valid header name", name)
	}
	if why, ok := reservedHeaders[textproto.CanonicalMIMEHeaderKey(name)]; ok {
		return fieldErr(f, "cannot be set here; %s", why)
	}
	if c.AuthToken != nil && textproto.CanonicalMIMEHeaderKey(name) == AuthTokenHeader {
		return fieldErr(f, "cannot be set together with auth_token")
	}
	if !httpprobe.ValidHeaderValue(value) {
		return fieldErr(f, "%q contains a control character", value)
	}
	return nil
}

// validateTiming checks the timing and evaluation settings.
func (c *Check) validateTiming(p Preset) error {
	iv := durationRange
	if p.intervalRange != (durRange{}) {
		iv = p.intervalRange
	}
	if err := checkDur(c.field("interval"), c.Interval, iv, presetIf(p.intervalRange != (durRange{}), p.Name)); err != nil {
		return err
	}
	if err := checkDur(c.field("timeout"), c.Timeout, durationRange, ""); err != nil {
		return err
	}
	if c.Window.Size == 0 {
		rise, fall, name := intRange{1, scheduler.MaxThreshold}, intRange{1, scheduler.MaxThreshold}, ""
		if p.thresholdRange != (intRange{}) {
			rise, fall, name = p.thresholdRange, p.thresholdRange, p.Name
		}
		riseName := name
		if p.fallRange != (intRange{}) {
			fall, name = p.fallRange, p.Name
		}
		if err := checkInt(c.field("rise"), c.Rise, rise, riseName); err != nil {
			return err
		}
		if err := checkInt(c.field("fall"), c.Fall, fall, name); err != nil {
			return err
		}
	} else {
		if err := checkInt(c.field("window.size"), c.Window.Size, intRange{1, scheduler.MaxWindow}, ""); err != nil {
			return err
		}
		if err := checkInt(c.field("window.required"), c.Window.Required, intRange{1, c.Window.Size}, ""); err != nil {
			return err
		}
	}
	if c.Initial > scheduler.Unhealthy {
		return fieldErr(c.field("initial_state"), "%s is not one of unknown, unhealthy, healthy", c.Initial)
	}
	if err := checkDur(c.field("fast_recheck_interval"), c.FastRecheck, gapRange, ""); err != nil {
		return err
	}
	if err := checkDur(c.field("unhealthy_interval"), c.UnhealthyInterval, gapRange, ""); err != nil {
		return err
	}
	if c.Jitter < 0 || c.Jitter > c.Interval {
		return fieldErr(c.field("jitter"), "%s is out of range 0s..%s (at most the interval)", formatDuration(c.Jitter), formatDuration(c.Interval))
	}
	return nil
}

func presetIf(cond bool, name string) string {
	if cond {
		return name
	}
	return ""
}

func protocolList(ps []Protocol) []string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return s
}

// validHost reports whether h can be a Host header: a host name or IP address
// with an optional port ("[v6]:port" for IPv6 with a port).
func validHost(h string) bool {
	name, _, ok := splitHost(h)
	return ok && (validHostName(name) || isIP(name))
}

func isIP(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Zone() == ""
}

// splitHost splits "name", "name:port", "1.2.3.4:port", "[v6]:port" or "v6"
// into the name and the port (0 when absent).
func splitHost(h string) (name string, port uint16, ok bool) {
	if isIP(h) {
		return h, 0, true
	}
	if !strings.Contains(h, ":") {
		return h, 0, true
	}
	host, p, err := net.SplitHostPort(h)
	if err != nil {
		return "", 0, false
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 || strings.HasPrefix(p, "+") {
		return "", 0, false
	}
	return host, uint16(n), true
}

// ProbeKey is the part of a check that defines one probe: what goes on the
// wire and how the answer is judged. Checks with equal keys form one probe
// class. The check's port is left out on purpose: a target's effective port
// is part of the stream key, so two checks that differ only in their default
// port still share the streams of targets that name the same port.
func (c *Check) ProbeKey() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%v|%s|%s|%s|", c.Protocol, c.Timeout, c.SourceAddress, c.IPFamily, c.TCPMode)
	if c.Protocol == TCP {
		return b.String()
	}
	fmt.Fprintf(&b, "%q|%q|%s|%q|%d|%q|%q|%q|", c.Method, c.Path, c.HealthyStatus, c.BodyContains, c.MaxBodyBytes, c.Host, c.SNI, c.UserAgent)
	for _, k := range slices.Sorted(maps.Keys(c.Headers)) {
		fmt.Fprintf(&b, "%q=%q,", k, c.Headers[k])
	}
	if c.AuthToken != nil {
		fmt.Fprintf(&b, "|auth %q %q", c.AuthToken.SecretFile, c.AuthToken.SecretEnv)
	}
	if c.TLS != nil {
		t := c.TLS
		fmt.Fprintf(&b, "|tls %q %q %q %q %t", t.CAFile, t.CertFile, t.KeyFile, t.ServerName, t.InsecureSkipVerify)
	}
	return b.String()
}
