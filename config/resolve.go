package config

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/textproto"
	"slices"
	"strings"
	"time"

	"github.com/sondeprobe/sonde/probe"
	httpprobe "github.com/sondeprobe/sonde/probe/http"
	"github.com/sondeprobe/sonde/scheduler"

	"github.com/sondeprobe/sonde/probe/endpoint"
)

// env looks up environment variables (os.LookupEnv unless a test injects one).
type env func(key string) (string, bool)

// resolveCheck applies the check's preset (or sonde's defaults) and the
// check's own settings on top, and validates the result.
//
// Evaluation rule: a check evaluates either with consecutive rise/fall (E1) or
// with a sliding window (E2). Setting both window and rise or fall in one
// check is an error. A check that sets a window replaces its preset's rise and
// fall; one that sets rise or fall replaces its preset's window, and the
// threshold it does not set is the window's equivalent (rise = required,
// fall = size - required + 1). For a window check, Rise and Fall hold those
// equivalents.
func resolveCheck(name string, s *CheckSpec, files *fileReader, lookupEnv env) (*Check, error) {
	if s == nil {
		s = new(CheckSpec)
	}
	c := &Check{Name: name, Spec: s}
	if !validName(name) {
		return nil, fieldErr("checks."+name, "invalid check name; want %s", nameRule)
	}
	p := defaultPreset
	if s.Preset != nil {
		if err := checkEnum(c.field("preset"), *s.Preset, presetNames, ""); err != nil {
			return nil, err
		}
		p, _ = LookupPreset(*s.Preset)
		c.Preset = p.Name
	}
	if err := c.resolveProtocol(s, p); err != nil {
		return nil, err
	}
	if s.Port != nil {
		if err := checkInt(c.field("port"), *s.Port, portRange, ""); err != nil {
			return nil, err
		}
		c.Port = uint16(*s.Port)
		c.PortWins = p.CheckPortWins
	}
	if err := c.checkApplicable(s); err != nil {
		return nil, err
	}
	if c.Protocol != TCP {
		if err := c.resolveHTTP(s, p, files, lookupEnv); err != nil {
			return nil, err
		}
	}
	if err := c.resolveTiming(s, p); err != nil {
		return nil, err
	}
	if err := c.resolveNetwork(s); err != nil {
		return nil, err
	}
	if err := c.resolveProbeAccess(s); err != nil {
		return nil, err
	}
	if err := c.resolvePassive(s); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Check) resolveProtocol(s *CheckSpec, p Preset) error {
	if s.Protocol == nil {
		if len(p.Protocols) == 0 {
			return fieldErr(c.field("protocol"), "missing; want one of tcp, http, https")
		}
		c.Protocol = p.Protocols[0]
		return nil
	}
	if err := checkEnum(c.field("protocol"), *s.Protocol, []string{"tcp", "http", "https"}, ""); err != nil {
		return err
	}
	c.Protocol = Protocol(slices.Index(protocolNames[:], *s.Protocol))
	return nil
}

// checkApplicable rejects settings that the check's protocol would ignore.
func (c *Check) checkApplicable(s *CheckSpec) error {
	type setting struct {
		name string
		set  bool
		ok   bool
		want string
	}
	httpOnly := c.Protocol != TCP
	for _, x := range []setting{
		{"path", s.Path != nil, httpOnly, "http or https"},
		{"method", s.Method != nil, httpOnly, "http or https"},
		{"healthy_status", s.HealthyStatus != nil, httpOnly, "http or https"},
		{"body_contains", s.BodyContains != nil, httpOnly, "http or https"},
		{"max_body_bytes", s.MaxBodyBytes != nil, httpOnly, "http or https"},
		{"host", s.Host != nil, httpOnly, "http or https"},
		{"sni", s.SNI != nil, c.Protocol == HTTPS, "https"},
		{"user_agent", s.UserAgent != nil, httpOnly, "http or https"},
		{"headers", s.Headers != nil, httpOnly, "http or https"},
		{"auth_token", s.AuthToken != nil, httpOnly, "http or https"},
		{"tls", s.TLS != nil, c.Protocol == HTTPS, "https"},
		{"tcp_mode", s.TCPMode != nil, c.Protocol == TCP, "tcp"},
		{"syn_retransmit", s.SynRetransmit != nil, c.Protocol == TCP, "tcp"},
	} {
		if x.set && !x.ok {
			return fieldErr(c.field(x.name), "only for protocol %s, not %s", x.want, c.Protocol)
		}
	}
	return nil
}

// resolveHTTP fills the settings of an HTTP or HTTPS probe.
func (c *Check) resolveHTTP(s *CheckSpec, p Preset, files *fileReader, lookupEnv env) error {
	c.Method = pick(s.Method, p.Method)
	c.Path = pick(s.Path, p.Path)
	c.HealthyStatus = p.Healthy
	if s.HealthyStatus != nil {
		set, err := httpprobe.ParseStatusCodes(*s.HealthyStatus)
		var se *httpprobe.StatusCodesError
		if errors.As(err, &se) {
			return fieldErr(c.field("healthy_status"), "%q: %s", *s.HealthyStatus, se.Reason)
		}
		c.HealthyStatus = set
	}
	c.BodyContains = pick(s.BodyContains, "")
	c.MaxBodyBytes = pick(s.MaxBodyBytes, DefaultMaxBodyBytes)
	c.Host = pick(s.Host, "")
	if s.Host == nil {
		c.DefaultHost = p.DefaultHost
	}
	c.UserAgent = pick(s.UserAgent, p.UserAgent)
	if len(s.Headers) > 0 {
		c.Headers = make(map[string]string, len(s.Headers))
		for _, name := range slices.Sorted(maps.Keys(s.Headers)) {
			canon := textproto.CanonicalMIMEHeaderKey(name)
			if _, dup := c.Headers[canon]; dup {
				return fieldErr(c.field("headers."+name), "repeats header %s", canon)
			}
			c.Headers[canon] = s.Headers[name]
		}
	}
	if s.AuthToken != nil {
		t, err := c.resolveAuthToken(s.AuthToken, files, lookupEnv)
		if err != nil {
			return err
		}
		c.AuthToken = t
	}
	var serverName string
	if s.TLS != nil {
		var err error
		if c.TLS, serverName, err = c.resolveTLS(s.TLS, files); err != nil {
			return err
		}
	}
	if c.Protocol == HTTPS {
		c.SNI = pick(s.SNI, "")
		if serverName != "" {
			if c.SNI != "" && c.SNI != serverName {
				return fieldErr(c.field("tls.server_name"), "%q differs from sni %q; set one of them", serverName, c.SNI)
			}
			c.SNI = serverName
		}
		if c.SNI == "" && c.Host != "" {
			// H6: the host is used for both the Host header and the SNI.
			if name := httpprobe.HostName(c.Host); probe.ValidHostName(name) {
				c.SNI = name
			}
		}
	}
	return nil
}

func (c *Check) resolveAuthToken(s *AuthTokenSpec, files *fileReader, lookupEnv env) (AuthToken, error) {
	f := c.field("auth_token")
	switch {
	case s.SecretFile != nil && s.SecretEnv != nil:
		return AuthToken{}, fieldErr(f, "set exactly one of secret_file and secret_env, not both")
	case s.SecretFile != nil:
		abs, err := files.secret(f+".secret_file", *s.SecretFile)
		if err != nil {
			return AuthToken{}, err
		}
		return AuthToken{SecretFile: abs}, nil
	case s.SecretEnv != nil:
		name := *s.SecretEnv
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return AuthToken{}, fieldErr(f+".secret_env", "%q is not an environment variable name", name)
		}
		v, ok := lookupEnv(name)
		if !ok {
			return AuthToken{}, fieldErr(f+".secret_env", "environment variable %s is not set", name)
		}
		if v == "" {
			return AuthToken{}, fieldErr(f+".secret_env", "environment variable %s is empty", name)
		}
		return AuthToken{SecretEnv: name}, nil
	}
	return AuthToken{}, fieldErr(f, "set exactly one of secret_file and secret_env")
}

// resolveTLS returns the TLS settings of s and its server name, which
// becomes the check's SNI.
func (c *Check) resolveTLS(s *TLSSpec, files *fileReader) (httpprobe.TLSOptions, string, error) {
	f := c.field("tls")
	t := httpprobe.TLSOptions{InsecureSkipVerify: pick(s.InsecureSkipVerify, false)}
	serverName := pick(s.ServerName, "")
	if (s.CertFile == nil) != (s.KeyFile == nil) {
		if s.CertFile == nil {
			return t, "", fieldErr(f+".key_file", "set without cert_file; set both or neither")
		}
		return t, "", fieldErr(f+".cert_file", "set without key_file; set both or neither")
	}
	if s.CAFile != nil && t.InsecureSkipVerify {
		return t, "", fieldErr(f+".ca_file", "has no effect with insecure_skip_verify")
	}
	for _, x := range []struct {
		name    string
		p       *string
		dst     *string
		private bool
	}{{"ca_file", s.CAFile, &t.CAFile, false}, {"cert_file", s.CertFile, &t.CertFile, false}, {"key_file", s.KeyFile, &t.KeyFile, true}} {
		if x.p == nil {
			continue
		}
		*x.dst = files.path(*x.p)
		var err error
		if x.private {
			err = files.private(f+"."+x.name, *x.p, *x.dst)
		} else {
			_, err = files.stat(f+"."+x.name, *x.p, *x.dst)
		}
		if err != nil {
			return t, "", err
		}
	}
	// Read the files as the prober will, so that a file it would refuse
	// fails here, naming the field.
	if s.CAFile != nil {
		if _, err := httpprobe.ReadCAFile(files.ctx, t.CAFile); err != nil {
			return t, "", files.readErr(f+".ca_file", *s.CAFile, err)
		}
	}
	if s.CertFile != nil {
		if _, err := httpprobe.LoadClientCert(files.ctx, t.CertFile, t.KeyFile); err != nil {
			return t, "", &FieldError{Field: f + ".cert_file", Msg: fmt.Sprintf("%q with key_file %q: %s", *s.CertFile, *s.KeyFile, errText(err)), Err: err}
		}
	}
	if serverName != "" && !probe.ValidHostName(serverName) {
		return t, "", fieldErr(f+".server_name", "%q is not a host name", serverName)
	}
	return t, serverName, nil
}

// resolveTiming fills cadence, intervals, timeout, evaluation and initial
// state. A fixed-rate check that does not set its timeout gets the preset's,
// shortened to its shortest gap, so that timeout ≤ interval holds.
func (c *Check) resolveTiming(s *CheckSpec, p Preset) error {
	c.Cadence = p.Cadence
	if s.Cadence != nil {
		cd, err := scheduler.ParseCadence(*s.Cadence)
		if err != nil {
			return checkEnum(c.field("cadence"), *s.Cadence, []string{scheduler.FixedRate.String(), scheduler.AfterCompletion.String()}, "")
		}
		c.Cadence = cd
	}
	c.Interval = pickDur(s.Interval, p.Interval)
	c.FastRecheck = pickDur(s.FastRecheckInterval, 0)
	c.UnhealthyInterval = pickDur(s.UnhealthyInterval, 0)
	c.Jitter = pickDur(s.Jitter, 0)
	c.Timeout = pickDur(s.Timeout, p.Timeout)
	if s.Timeout == nil && c.Cadence == scheduler.FixedRate {
		for _, gap := range []time.Duration{c.Interval, c.FastRecheck, c.UnhealthyInterval} {
			if gap > 0 {
				c.Timeout = min(c.Timeout, gap)
			}
		}
	}
	userRF := s.Rise != nil || s.Fall != nil
	switch {
	case s.Window != nil && userRF:
		return fieldErr(c.field("window"), "cannot be set together with rise or fall; use one evaluation")
	case s.Window != nil:
		if s.Window.Size == nil {
			return fieldErr(c.field("window.size"), "missing; want %d..%d", 1, scheduler.MaxWindow)
		}
		if s.Window.Required == nil {
			return fieldErr(c.field("window.required"), "missing; want 1..size")
		}
		c.Window = scheduler.Window{Size: *s.Window.Size, Required: *s.Window.Required}
	default:
		c.Window = p.Window
		if userRF {
			c.Window = scheduler.Window{}
		}
	}
	if c.Window.Size > 0 {
		c.Rise, c.Fall = c.Window.Required, c.Window.Size-c.Window.Required+1
	} else {
		rise, fall := p.Rise, p.Fall
		if p.Window.Size > 0 {
			rise, fall = p.Window.Required, p.Window.Size-p.Window.Required+1
		}
		c.Rise, c.Fall = pick(s.Rise, rise), pick(s.Fall, fall)
	}
	c.Initial = p.Initial
	if s.InitialState != nil {
		st, err := scheduler.ParseState(*s.InitialState)
		if err != nil {
			return checkEnum(c.field("initial_state"), *s.InitialState, []string{"unknown", "unhealthy", "healthy"}, "")
		}
		c.Initial = st
	}
	return nil
}

// resolveNetwork fills tcp_mode, source_address and ip_family.
func (c *Check) resolveNetwork(s *CheckSpec) error {
	if c.Protocol == TCP {
		c.TCPMode = TCPAuto
	}
	if s.TCPMode != nil {
		if err := checkEnum(c.field("tcp_mode"), *s.TCPMode, tcpModeNames[TCPAuto:], ""); err != nil {
			return err
		}
		c.TCPMode = TCPMode(slices.Index(tcpModeNames[:], *s.TCPMode))
	}
	if err := c.resolveRetransmit(s); err != nil {
		return err
	}
	if s.IPFamily != nil {
		if err := checkEnum(c.field("ip_family"), *s.IPFamily, endpoint.FamilyNames(), ""); err != nil {
			return err
		}
		c.IPFamily, _ = endpoint.ParseFamily(*s.IPFamily) // checked above
	}
	if s.SourceAddress != nil {
		a, err := ParseSourceAddress(*s.SourceAddress)
		if err != nil {
			return fieldErr(c.field("source_address"), "%v", err)
		}
		if !c.IPFamily.Has(a) {
			return fieldErr(c.field("source_address"), "%s does not match ip_family %s", a, c.IPFamily)
		}
		c.SourceAddress = a
	}
	return nil
}

// resolveRetransmit fills syn_retransmit: the kernel's by default for a
// TCP check that may run on the SYN prober, none for the others. A
// retransmission timeout that is not shorter than the timeout would never
// fire, which is an error when set by hand.
func (c *Check) resolveRetransmit(s *CheckSpec) error {
	if c.Protocol != TCP || c.TCPMode == TCPConnect {
		if s.SynRetransmit != nil && c.Protocol == TCP {
			return fieldErr(c.field("syn_retransmit"), "only for tcp_mode syn or auto: connect() retransmits in the kernel")
		}
		return nil
	}
	c.SynRetransmit = KernelRetransmit
	if s.SynRetransmit == nil {
		return nil
	}
	r, err := ParseRetransmit(*s.SynRetransmit)
	if err != nil {
		return fieldErr(c.field("syn_retransmit"), "%v", err)
	}
	if r != 0 && r.D() >= c.Timeout {
		return fieldErr(c.field("syn_retransmit"), "%s is not shorter than timeout %s: it would never fire; want a shorter one, or \"off\"", r, formatDuration(c.Timeout))
	}
	c.SynRetransmit = r
	return nil
}

// ParseSourceAddress parses a local address probes leave from: a check's
// source_address and the -source flag of every command. It is an IP
// address without an IPv6 zone; an IPv4-mapped IPv6 address is taken as
// IPv4.
func ParseSourceAddress(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	return a.Unmap(), nil
}

// pick returns *p, or def when p is nil.
func pick[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func pickDur(p *Duration, def time.Duration) time.Duration {
	if p == nil {
		return def
	}
	return p.D()
}
