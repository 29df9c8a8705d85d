package config

import (
	"net/netip"
	"strconv"
)

// ProbeTargets says which targets the /probe endpoint probes with a check,
// and which of them receive the check's credentials (see
// [Probe.HasCredentials]). The zero ProbeTargets is [ProbeTargetsPools].
type ProbeTargets uint8

// The choices of probe_targets.
const (
	// ProbeTargetsPools: only the targets of the check's pools, as the
	// running configuration has them.
	ProbeTargetsPools ProbeTargets = iota
	// ProbeTargetsAny: any target, as blackbox_exporter probes; those
	// outside the check's pools are probed without its credentials.
	ProbeTargetsAny
	// ProbeTargetsAnyWithCredentials: any target, credentials included: the
	// operator trusts every client of /probe with them.
	ProbeTargetsAnyWithCredentials
)

var probeTargetsNames = [...]string{
	ProbeTargetsPools:              "pools",
	ProbeTargetsAny:                "any",
	ProbeTargetsAnyWithCredentials: "any_with_credentials",
}

// String returns "pools", "any" or "any_with_credentials".
func (t ProbeTargets) String() string {
	if int(t) < len(probeTargetsNames) {
		return probeTargetsNames[t]
	}
	return "probetargets(" + strconv.Itoa(int(t)) + ")"
}

// MarshalText encodes the choice as its name.
func (t ProbeTargets) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// ProbeAccess is what the /probe endpoint may do with a check. It changes
// nothing a scheduled probe sends, so it is no part of [Probe] nor of the
// check's probe key: a reload that changes it keeps every target's state.
type ProbeAccess struct {
	Targets ProbeTargets
	// AllowAddresses are the blocks of restricted addresses (see
	// [RestrictedBlock]) that /probe may probe with the check; each lies
	// inside a restricted block.
	AllowAddresses []netip.Prefix
}

// Allows reports whether /probe may send a probe of the check to a: an
// address outside the restricted blocks, or one inside a block of
// AllowAddresses.
func (pa *ProbeAccess) Allows(a netip.Addr) bool {
	a = a.Unmap()
	if _, restricted := RestrictedBlock(a); !restricted {
		return true
	}
	for _, p := range pa.AllowAddresses {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// restrictedBlocks are addresses that reach the host or its platform rather
// than a service: link-local addresses, and the instance metadata and
// platform addresses of cloud providers, where a request can fetch the
// machine's own credentials.
var restrictedBlocks = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),      // IPv4 link-local; the metadata service of most clouds at 169.254.169.254
	netip.MustParsePrefix("fe80::/10"),           // IPv6 link-local
	netip.MustParsePrefix("fd00:ec2::/32"),       // AWS's IPv6 instance services (metadata at fd00:ec2::254)
	netip.MustParsePrefix("100.100.100.200/32"),  // Alibaba Cloud's metadata service
	netip.MustParsePrefix("168.63.129.16/32"),    // Azure's platform address (WireServer)
	netip.MustParsePrefix("64:ff9b::a9fe:0/112"), // 169.254.0.0/16 through the NAT64 well-known prefix
}

// RestrictedBlock returns the restricted block a lies in (link-local, or a
// cloud's metadata or platform address), and whether it lies in one. The
// /probe endpoint probes such an address only with a check whose
// probe_allow_addresses allows it, whatever its probe_targets says.
func RestrictedBlock(a netip.Addr) (netip.Prefix, bool) {
	a = a.Unmap()
	for _, p := range restrictedBlocks {
		if p.Contains(a) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// HasCredentials reports whether the probe carries something a target
// could use to pass as sonde or to reach what it guards: extra headers (any
// of them may be a secret: their values are hidden wherever the check is
// shown), an auth token, or a client certificate.
func (p *Probe) HasCredentials() bool {
	return len(p.Headers) > 0 || p.AuthToken != (AuthToken{}) || p.TLS.CertFile != ""
}

// WithoutCredentials returns p without its extra headers, auth token and
// client certificate.
func (p Probe) WithoutCredentials() Probe {
	p.Headers, p.AuthToken = nil, AuthToken{}
	p.TLS.CertFile, p.TLS.KeyFile = "", ""
	return p
}

// Redacted returns p with every header value replaced by "(set)", for a
// view shown to others. The auth token and the client certificate appear
// only as the names of their files or variable.
func (p Probe) Redacted() Probe {
	if len(p.Headers) > 0 {
		h := make(map[string]string, len(p.Headers))
		for k := range p.Headers {
			h[k] = "(set)"
		}
		p.Headers = h
	}
	return p
}

// resolveProbeAccess fills probe_targets and probe_allow_addresses.
func (c *Check) resolveProbeAccess(s *CheckSpec) error {
	if s.ProbeTargets != nil {
		if err := checkEnum(c.field("probe_targets"), *s.ProbeTargets, probeTargetsNames[:], ""); err != nil {
			return err
		}
		for i, n := range probeTargetsNames {
			if n == *s.ProbeTargets {
				c.ProbeAccess.Targets = ProbeTargets(i)
			}
		}
	}
	for i, v := range s.ProbeAllowAddresses {
		f := c.field("probe_allow_addresses[" + strconv.Itoa(i) + "]")
		e, err := ParseTargetEntry(v)
		switch {
		case err != nil:
			return fieldErr(f, "%v; want an IP address or CIDR block", err)
		case e.Host != "" || e.Port != 0:
			return fieldErr(f, "%q is not an IP address or CIDR block", v)
		}
		p := e.Block
		if !p.IsValid() {
			p = netip.PrefixFrom(e.Addr, e.Addr.BitLen())
		}
		r, ok := RestrictedBlock(p.Addr())
		if !ok || p.Bits() < r.Bits() {
			return fieldErr(f, "%s is not inside a link-local or metadata block (%s); /probe needs no allow for other addresses", p, restrictedList())
		}
		c.ProbeAccess.AllowAddresses = append(c.ProbeAccess.AllowAddresses, p)
	}
	return nil
}

// restrictedList names the restricted blocks, for error messages.
func restrictedList() string {
	s := ""
	for i, p := range restrictedBlocks {
		if i > 0 {
			s += ", "
		}
		s += p.String()
	}
	return s
}
