package config

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestProbeAccess reads probe_targets and probe_allow_addresses: the
// default is pools with no allowed restricted block, and a single address
// is a block of one.
func TestProbeAccess(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, `
checks:
  plain: {protocol: http}
  open: {protocol: http, probe_targets: any}
  trusted:
    protocol: tcp
    port: 80
    probe_targets: any_with_credentials
    probe_allow_addresses: ["169.254.169.254", "fe80::/64", "::ffff:169.254.170.0/120"]
pools:
  - {name: a, check: plain, targets: ["127.0.0.1"]}
  - {name: b, check: open, targets: ["127.0.0.1"]}
  - {name: c, check: trusted, targets: ["127.0.0.1"]}
`, t.TempDir())
	want := map[string]ProbeAccess{
		"plain": {},
		"open":  {Targets: ProbeTargetsAny},
		"trusted": {Targets: ProbeTargetsAnyWithCredentials, AllowAddresses: []netip.Prefix{
			netip.MustParsePrefix("169.254.169.254/32"), netip.MustParsePrefix("fe80::/64"), netip.MustParsePrefix("169.254.170.0/24")}},
	}
	for name, w := range want {
		got := cfg.CheckByName(name).ProbeAccess
		if diff := cmp.Diff(w, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
			t.Errorf("%s: ProbeAccess (-want +got):\n%s", name, diff)
		}
	}
}

// TestProbeAccessAllows checks the restricted blocks (link-local and cloud
// metadata, in every spelling of an address) and what an allow lets through.
func TestProbeAccessAllows(t *testing.T) {
	t.Parallel()
	none := ProbeAccess{}
	meta := ProbeAccess{AllowAddresses: []netip.Prefix{netip.MustParsePrefix("169.254.169.254/32")}}
	for _, tt := range []struct {
		addr       string
		restricted bool
		meta       bool // allowed by meta
	}{
		{"169.254.169.254", true, true},
		{"::ffff:169.254.169.254", true, true},
		{"169.254.0.1", true, false},
		{"fe80::1", true, false},
		{"fd00:ec2::254", true, false},
		{"100.100.100.200", true, false},
		{"168.63.129.16", true, false},
		{"64:ff9b::a9fe:a9fe", true, false},
		{"127.0.0.1", false, true},
		{"10.0.0.1", false, true},
		{"fd00::1", false, true},
		{"2001:db8::1", false, true},
	} {
		a := netip.MustParseAddr(tt.addr)
		if _, got := RestrictedBlock(a); got != tt.restricted {
			t.Errorf("RestrictedBlock(%s) = %v, want %v", tt.addr, got, tt.restricted)
		}
		if got := none.Allows(a); got != !tt.restricted {
			t.Errorf("no allow: Allows(%s) = %v, want %v", tt.addr, got, !tt.restricted)
		}
		if got := meta.Allows(a); got != tt.meta {
			t.Errorf("allow 169.254.169.254: Allows(%s) = %v, want %v", tt.addr, got, tt.meta)
		}
	}
}

// TestProbeCredentials checks what counts as a credential, and that a probe
// without them, or redacted, keeps everything else.
func TestProbeCredentials(t *testing.T) {
	t.Parallel()
	p := Probe{Protocol: HTTPS, Path: "/h", Host: "api", Headers: map[string]string{"Authorization": "Bearer x"},
		AuthToken: AuthToken{SecretFile: "/s"}}
	p.TLS.CAFile, p.TLS.CertFile, p.TLS.KeyFile = "/ca", "/c", "/k"
	if !p.HasCredentials() {
		t.Error("HasCredentials = false with headers, token and client certificate")
	}
	bare := p.WithoutCredentials()
	if bare.HasCredentials() || bare.Path != "/h" || bare.Host != "api" || bare.TLS.CAFile != "/ca" {
		t.Errorf("WithoutCredentials = %+v", bare)
	}
	if p.Headers["Authorization"] != "Bearer x" || p.TLS.CertFile != "/c" {
		t.Error("WithoutCredentials changed its receiver")
	}
	for _, one := range []Probe{{Headers: map[string]string{"X-A": "b"}}, {AuthToken: AuthToken{SecretEnv: "E"}}, p} {
		if !one.HasCredentials() {
			t.Errorf("HasCredentials(%+v) = false", one)
		}
	}
	r := p.Redacted()
	if r.Headers["Authorization"] != "(set)" || p.Headers["Authorization"] != "Bearer x" {
		t.Errorf("Redacted headers %v, original %v", r.Headers, p.Headers)
	}
}
