package config

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sondeprobe/sonde/probe"
	httpprobe "github.com/sondeprobe/sonde/probe/http"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/passive"

	"github.com/sondeprobe/sonde/probe/endpoint"
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

// TCPMode chooses the prober of a TCP check. The zero TCPMode is that of a
// check that is not a TCP check.
type TCPMode uint8

// The TCP modes.
const (
	TCPAuto    TCPMode = iota + 1 // SYN prober when sonde has the privileges, connect() otherwise
	TCPSyn                        // raw-socket SYN prober only (T1, T3)
	TCPConnect                    // connect() prober only
)

var tcpModeNames = [...]string{TCPAuto: "auto", TCPSyn: "syn", TCPConnect: "connect"}

// String returns "auto", "syn" or "connect", and "" for the zero TCPMode.
func (m TCPMode) String() string {
	if int(m) < len(tcpModeNames) {
		return tcpModeNames[m]
	}
	return "tcpmode(" + strconv.Itoa(int(m)) + ")"
}

// MarshalText encodes the mode as its name.
func (m TCPMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// Retransmit is when the SYN prober sends an unanswered SYN again (T5):
// after this long, then after twice as long again, and so on, while the
// probe's timeout lasts, as a kernel retransmits the SYN of a connect(). The
// zero Retransmit sends every SYN once, as a scanner does.
type Retransmit time.Duration

// KernelRetransmit is the kernel's initial retransmission timeout of a SYN
// (RFC 6298, Linux's TCP_TIMEOUT_INIT), the default of syn_retransmit.
const KernelRetransmit = Retransmit(time.Second)

// MinRetransmit is the shortest retransmission timeout a check may set.
const MinRetransmit = Retransmit(10 * time.Millisecond)

// D returns r as a time.Duration.
func (r Retransmit) D() time.Duration { return time.Duration(r) }

// String returns "off", or the duration ("1s", "200ms").
func (r Retransmit) String() string {
	if r == 0 {
		return "off"
	}
	return formatDuration(time.Duration(r))
}

// MarshalText encodes the retransmission timeout as String does.
func (r Retransmit) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// ParseRetransmit reads syn_retransmit as a config file or a flag writes it:
// "kernel" (the kernel's 1s), "off", or a duration of at least
// [MinRetransmit] that is a whole number of milliseconds.
func ParseRetransmit(s string) (Retransmit, error) {
	switch s {
	case "kernel":
		return KernelRetransmit, nil
	case "off":
		return 0, nil
	}
	d, err := ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not \"kernel\", \"off\" or a whole number of milliseconds such as \"200ms\"", s)
	}
	if r := Retransmit(d); r < MinRetransmit || r.D() > MaxDuration {
		return 0, fmt.Errorf("%s is out of range %s..%s (or \"kernel\", \"off\")", formatDuration(d.D()), MinRetransmit, formatDuration(MaxDuration))
	}
	return Retransmit(d), nil
}

// IPFamily is the address families a target given as a host name is
// probed over: "any", "ip4" or "ip6" ([endpoint.Family], the one family
// type of sonde).
type IPFamily = endpoint.Family

// The address families.
const (
	IPAny = endpoint.Any // dual stack: IPv4 and IPv6, a target for each the name has
	IP4   = endpoint.IP4 // IPv4 only
	IP6   = endpoint.IP6 // IPv6 only
)

// family returns the address families the check's host-name targets
// resolve to: those of ip_family, and only the source address's when one is
// set ([endpoint.Family.ForSource]).
func (c *Check) family() endpoint.Family { return c.IPFamily.ForSource(c.SourceAddress) }

// AuthToken says where the secret of the probe token is (H10): in a file or
// in an environment variable, never in the config itself. The zero AuthToken
// means no token. Reading the secret is the prober's job ([Probe.HTTPOptions]);
// [Parse] only checks that the file exists or the variable is set.
type AuthToken struct {
	SecretFile string `json:"secret_file,omitempty"` // path of a file holding the secret, resolved against the config's directory
	SecretEnv  string `json:"secret_env,omitempty"`  // name of an environment variable holding the secret
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
// the check's own settings on top. They come in two parts, each one struct:
// [Probe], what one probe sends and how its answer is judged, and
// [scheduler.Timing], how often the check probes and how its results decide
// a target's state. For a window check, Rise and Fall hold the equivalent
// consecutive thresholds (k of W2 and of W1).
//
// A Check is read-only once [Parse] returns it and safe for concurrent reads.
type Check struct {
	Name   string     // key under "checks"
	Preset string     // preset name, "" for none
	Spec   *CheckSpec // the check as written in the file
	Port   uint16     // port of targets that give none (of every target with PortWins); 0: see [Check.DefaultPort]
	// PortWins makes Port, when set, the port of every target, over a port
	// the target gives: App Gateway's probe port wins over the backend's.
	// Otherwise a target's own port wins (see [Check.TargetPort]).
	PortWins bool

	Probe
	scheduler.Timing

	// ProbeAccess is what the /probe endpoint may do with the check: which
	// targets it probes, and which receive the check's credentials.
	ProbeAccess ProbeAccess

	// Passive is the rule of the check's passive evidence: what the TCP
	// connections other processes on this host open to its targets may do.
	// nil: they are not watched.
	Passive *passive.Rule

	// Class is the check's probe class: checks with the same Class have the
	// same [Check.ProbeKey], so they send the same probe and judge it the
	// same way, and differ at most in timing and evaluation. Targets with the
	// same address, port and class share one probe stream (see
	// [Target.Leader]).
	Class int
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

// TargetPort returns the port a target entry is probed on, given the port
// the entry names (0 for none): the check's port when it wins
// ([Check.PortWins]), else the entry's, else [Check.DefaultPort].
func (c *Check) TargetPort(entry uint16) uint16 {
	if entry == 0 || c.PortWins && c.Port != 0 {
		return c.DefaultPort()
	}
	return entry
}

// HostNameMatters reports whether a target's host name changes the probe:
// it does for HTTP(S) checks without a Host setting, where it becomes the
// Host header (unless the check has a default host) and, for HTTPS without
// an SNI setting, the TLS server name. Two targets of such a check differ by
// their host names too.
func (c *Check) HostNameMatters() bool {
	switch c.Protocol {
	case HTTP:
		return c.Host == "" && c.DefaultHost == ""
	case HTTPS:
		return c.Host == "" && (c.DefaultHost == "" || c.SNI == "")
	}
	return false
}

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
	if err := c.Timing.Validate(); err != nil {
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
	if c.Host != "" && !httpprobe.ValidHost(c.Host) {
		return fieldErr(c.field("host"), "%q is not a host name or IP address with an optional port", c.Host)
	}
	if c.SNI != "" && c.Protocol != HTTPS {
		return fieldErr(c.field("sni"), "only for protocol https, not %s", c.Protocol)
	}
	if c.SNI != "" && !probe.ValidHostName(c.SNI) {
		return fieldErr(c.field("sni"), "%q is not a host name", c.SNI)
	}
	if !httpprobe.ValidHeaderValue(c.UserAgent) {
		return fieldErr(c.field("user_agent"), "%q contains a control character", c.UserAgent)
	}
	if len(c.UserAgent) > httpprobe.MaxHeaderValueBytes {
		return fieldErr(c.field("user_agent"), "%d bytes, more than %d", len(c.UserAgent), httpprobe.MaxHeaderValueBytes)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Headers)) {
		if err := c.validateHeader(name, c.Headers[name]); err != nil {
			return err
		}
	}
	return nil
}

func (c *Check) validateHeader(name, value string) error {
	f := c.field("headers." + name)
	if !httpprobe.ValidHeaderName(name) {
		return fieldErr(c.field("headers"), "%q is not a valid header name", name)
	}
	if why, ok := httpprobe.ReservedHeader(name); ok {
		return fieldErr(f, "cannot be set here; %s", why)
	}
	if !httpprobe.ValidHeaderValue(value) {
		return fieldErr(f, "%q contains a control character", value)
	}
	if len(value) > httpprobe.MaxHeaderValueBytes {
		return fieldErr(f, "%d bytes, more than %d", len(value), httpprobe.MaxHeaderValueBytes)
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
	if c.Cadence == scheduler.FixedRate {
		return c.validateFixedRate()
	}
	return nil
}

// validateFixedRate checks that a fixed-rate check's probe has always
// completed when the next one leaves: timeout ≤ every gap it uses.
func (c *Check) validateFixedRate() error {
	cadence := "cadence fixed_rate" + forPreset(presetIf(c.Spec == nil || c.Spec.Cadence == nil, c.Preset))
	if c.Timeout > c.Interval {
		return fieldErr(c.field("timeout"), "%s is longer than the interval %s; %s needs timeout ≤ interval (cadence after_completion allows it)",
			formatDuration(c.Timeout), formatDuration(c.Interval), cadence)
	}
	for _, g := range []struct {
		name string
		d    time.Duration
	}{{"fast_recheck_interval", c.FastRecheck}, {"unhealthy_interval", c.UnhealthyInterval}} {
		if g.d > 0 && g.d < c.Timeout {
			return fieldErr(c.field(g.name), "%s is shorter than the timeout %s; %s needs timeout ≤ %s",
				formatDuration(g.d), formatDuration(c.Timeout), cadence, g.name)
		}
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
