package config

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseTargetEntry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    TargetEntry
		wantErr string
	}{
		{in: "198.18.0.7", want: TargetEntry{Addr: netip.MustParseAddr("198.18.0.7")}},
		{in: "2001:db8::1", want: TargetEntry{Addr: netip.MustParseAddr("2001:db8::1")}},
		{in: "::ffff:198.18.0.7", want: TargetEntry{Addr: netip.MustParseAddr("198.18.0.7")}},
		{in: "127.0.0.1:8080", want: TargetEntry{Addr: netip.MustParseAddr("127.0.0.1"), Port: 8080}},
		{in: "[2001:db8::1]:443", want: TargetEntry{Addr: netip.MustParseAddr("2001:db8::1"), Port: 443}},
		{in: "198.18.0.0/24", want: TargetEntry{Block: netip.MustParsePrefix("198.18.0.0/24")}},
		{in: "2001:db8::/120", want: TargetEntry{Block: netip.MustParsePrefix("2001:db8::/120")}},
		{in: "::ffff:10.0.0.0/120", want: TargetEntry{Block: netip.MustParsePrefix("10.0.0.0/24")}},
		{in: "api-1.internal", want: TargetEntry{Host: "api-1.internal"}},
		{in: "API-1.Internal.:8443", want: TargetEntry{Host: "api-1.internal", Port: 8443}},
		{in: "localhost", want: TargetEntry{Host: "localhost"}},
		{in: "10.0.0.300", wantErr: `"10.0.0.300" is not an IP address, CIDR block or host name`},
		{in: "10.0.0.1:http", wantErr: `"10.0.0.1:http" has a bad port "http"`},
		{in: "10.0.0.1:65536", wantErr: `"10.0.0.1:65536" has port 65536, out of range 1..65535`},
		{in: "[::1]", want: TargetEntry{Addr: netip.MustParseAddr("::1")}},
		{in: "[10.0.0.1]", wantErr: `"[10.0.0.1]" is not an IP address, CIDR block or host name`},
		{in: "[10.0.0.1]:80", wantErr: `"[10.0.0.1]:80" is not an IP address, CIDR block or host name`},
		{in: "fe80::1%eth0", wantErr: `"fe80::1%eth0" has an IPv6 zone; zones are not supported`},
		{in: "10.0.0.1/24", wantErr: `"10.0.0.1/24" has host bits set; did you mean 10.0.0.0/24?`},
		{in: "10.0.0.0/33", wantErr: `"10.0.0.0/33" is not a valid CIDR block`},
		{in: "http://example.com", wantErr: `"http://example.com" is not an IP address, CIDR block or host name (targets take no URL scheme)`},
		{in: "my host", wantErr: `"my host" is not an IP address, CIDR block or host name`},
		{in: "-bad.internal", wantErr: `"-bad.internal" is not an IP address, CIDR block or host name`},
		{in: "", wantErr: `"" is not an IP address, CIDR block or host name`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTargetEntry(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("ParseTargetEntry(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTargetEntry(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("ParseTargetEntry(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

// endpoints lists the endpoints of a pool's members, with the host name of
// targets that have one.
func endpoints(cfg *Config, pool int) []string {
	var out []string
	for _, id := range cfg.Pools[pool].Members {
		s := cfg.Targets[id].AddrPort().String()
		if h, ok := cfg.Hostnames[id]; ok {
			s = h + "=" + s
		}
		out = append(out, s)
	}
	return out
}

func TestTargetExpansion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		check   string
		targets string
		want    []string
	}{
		{name: "ipv4 block includes network and broadcast", check: "{protocol: tcp, port: 22}", targets: `["198.18.0.0/30"]`,
			want: []string{"198.18.0.0:22", "198.18.0.1:22", "198.18.0.2:22", "198.18.0.3:22"}},
		{name: "ipv6 block", check: "{protocol: tcp, port: 22}", targets: `["2001:db8::/126"]`,
			want: []string{"[2001:db8::]:22", "[2001:db8::1]:22", "[2001:db8::2]:22", "[2001:db8::3]:22"}},
		{name: "single address block", check: "{protocol: tcp, port: 22}", targets: `["198.18.0.9/32"]`, want: []string{"198.18.0.9:22"}},
		{name: "explicit port wins over check port", check: "{protocol: http, port: 8080}", targets: `["127.0.0.1", "127.0.0.2:9090"]`,
			want: []string{"127.0.0.1:8080", "127.0.0.2:9090"}},
		{name: "http default port", check: "{protocol: http}", targets: `["127.0.0.1"]`, want: []string{"127.0.0.1:80"}},
		{name: "https default port", check: "{protocol: https}", targets: `["[::1]"]`, want: []string{"[::1]:443"}},
		{name: "tcp target ports", check: "{protocol: tcp}", targets: `["127.0.0.1:22", "[::1]:23"]`, want: []string{"127.0.0.1:22", "[::1]:23"}},
		{name: "host name dual stack", check: "{protocol: http}", targets: `["api-1.internal"]`, want: []string{"api-1.internal=198.18.1.10:80", "api-1.internal=[2001:db8::10]:80"}},
		{name: "host name any address of a family is its lowest", check: "{protocol: http, ip_family: ip4}", targets: `["api-1.internal"]`, want: []string{"api-1.internal=198.18.1.10:80"}},
		{name: "host name ip6", check: "{protocol: http, ip_family: ip6}", targets: `["api-1.internal:8080"]`, want: []string{"api-1.internal=[2001:db8::10]:8080"}},
		{name: "host name ip4", check: "{protocol: http, ip_family: ip4}", targets: `["api-1.internal"]`, want: []string{"api-1.internal=198.18.1.10:80"}},
		{name: "host name with one family", check: "{protocol: http}", targets: `["v6only.test"]`, want: []string{"v6only.test=[2001:db8::6]:80"}},
		{name: "host name family follows source address", check: `{protocol: http, source_address: "::1"}`, targets: `["api-1.internal"]`, want: []string{"api-1.internal=[2001:db8::10]:80"}},
		{name: "repeats within a pool are one member", check: "{protocol: tcp, port: 22}", targets: `["198.18.0.1", "198.18.0.0/31", "198.18.0.1:22"]`,
			want: []string{"198.18.0.1:22", "198.18.0.0:22"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, "checks: {c: "+tt.check+"}\npools: [{name: p, check: c, targets: "+tt.targets+"}]\n", "")
			if diff := cmp.Diff(tt.want, endpoints(cfg, 0)); diff != "" {
				t.Errorf("members (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMaxTargets(t *testing.T) {
	t.Parallel()
	yaml := "checks: {c: {protocol: tcp, port: 22}}\npools: [{name: p, check: c, targets: [127.0.0.0/29, 127.0.1.0/29, 127.0.2.1]}]\n"
	opt := testOptions()
	opt.MaxTargets = 17
	if _, err := Parse([]byte(yaml), "", opt); err != nil {
		t.Fatalf("17 targets with limit 17: %v", err)
	}
	opt.MaxTargets = 16
	_, err := Parse([]byte(yaml), "", opt)
	want := `pools[0].targets[2]: "127.0.2.1" brings the number of targets over the limit of 16`
	if err == nil || err.Error() != want {
		t.Errorf("limit 16: error %v, want %q", err, want)
	}
	opt.MaxTargets = 10
	_, err = Parse([]byte(yaml), "", opt)
	want = `pools[0].targets[1]: block 127.0.1.0/29 brings the number of targets to 16, more than the limit of 10`
	if err == nil || err.Error() != want {
		t.Errorf("limit 10: error %v, want %q", err, want)
	}
}

func TestDisabledEntries(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, `checks: {c: {protocol: http}}
pools:
  - name: p
    check: c
    targets: ["198.18.0.0/29", "api-2.internal"]
    disabled: ["198.18.0.0/30", "198.18.0.7:80", "alias.internal"]
`, "")
	var got []string
	for _, id := range cfg.Pools[0].Disabled {
		got = append(got, cfg.Targets[id].AddrPort().String())
	}
	want := []string{"198.18.0.0:80", "198.18.0.1:80", "198.18.0.2:80", "198.18.0.3:80", "198.18.0.7:80", "198.18.1.20:80"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("disabled (-want +got):\n%s", diff)
	}
}

func TestTargetsFileLimits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	long := strings.Repeat("a", 70000)
	writeFile(t, dir, "t.txt", "127.0.0.1\n"+long+"\n")
	_, err := Parse([]byte("checks: {c: {protocol: http}}\npools: [{name: p, check: c, targets_file: t.txt}]\n"), dir, testOptions())
	want := "pools[0].targets_file: t.txt:2: line too long"
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	writeFile(t, dir, "empty.txt", "# nothing\n\n")
	_, err = Parse([]byte("checks: {c: {protocol: http}}\npools: [{name: p, check: c, targets_file: empty.txt}]\n"), dir, testOptions())
	want = `pools[0].targets_file: "empty.txt" lists no targets`
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

// TestPortPrecedence checks which port a target is probed on: its own,
// over the check's, for every preset but App Gateway, whose probe port wins
// over the backend's when the check sets one.
func TestPortPrecedence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		check string
		want  []string
	}{
		{"preset: appgateway\n    port: 8080", []string{"127.0.0.1:8080", "127.0.0.2:8080"}},
		{"preset: appgateway", []string{"127.0.0.1:9000", "127.0.0.2:80"}},
		{"preset: frontdoor\n    port: 8080", []string{"127.0.0.1:9000", "127.0.0.2:8080"}},
		{"preset: appservice\n    path: /h\n    port: 8080", []string{"127.0.0.1:9000", "127.0.0.2:8080"}},
		{"preset: globalaccelerator\n    port: 8080", []string{"127.0.0.1:9000", "127.0.0.2:8080"}},
		{"protocol: http\n    port: 8080", []string{"127.0.0.1:9000", "127.0.0.2:8080"}},
	}
	for _, tt := range tests {
		cfg := mustParse(t, "checks:\n  c:\n    "+tt.check+"\npools:\n  - {name: p, check: c, targets: [\"127.0.0.1:9000\", \"127.0.0.2\"], disabled: [\"127.0.0.1:9000\"]}\n", "")
		var got []string
		for _, tg := range cfg.Targets {
			got = append(got, tg.AddrPort().String())
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: targets (-want +got):\n%s", tt.check, diff)
		}
		if len(cfg.Pools[0].Disabled) != 1 {
			t.Errorf("%s: the disabled entry names the same target: disabled %v", tt.check, cfg.Pools[0].Disabled)
		}
	}
}

// TestParseTargetArgs reads command-line targets: entries and @FILE, with
// every error placed as a config file places it (FILE:LINE for a file's
// lines, fn's own errors included).
func TestParseTargetArgs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "fleet.txt", "# fleet\n198.18.0.0/30\n\n  [2001:db8::1]:443  # with a port\n")
	fleet := filepath.Join(dir, "fleet.txt")
	var got []TargetEntry
	collect := func(e TargetEntry) error { got = append(got, e); return nil }
	if err := ParseTargetArgs([]string{"10.0.0.1:22", "@" + fleet, " api-1.internal "}, collect); err != nil {
		t.Fatal(err)
	}
	want := []TargetEntry{
		{Addr: netip.MustParseAddr("10.0.0.1"), Port: 22},
		{Block: netip.MustParsePrefix("198.18.0.0/30")},
		{Addr: netip.MustParseAddr("2001:db8::1"), Port: 443},
		{Host: "api-1.internal"},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}

	writeFile(t, dir, "long.txt", "127.0.0.1\n"+strings.Repeat("a", 70000)+"\n")
	refuse := func(e TargetEntry) error {
		if e.Host != "" {
			return errors.New("no host names here")
		}
		return nil
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"10.0.0.1/24"}, `"10.0.0.1/24" has host bits set; did you mean 10.0.0.0/24?`},
		{[]string{"api-1.internal"}, "no host names here"},
		{[]string{"@" + fleet, "@" + filepath.Join(dir, "missing.txt")}, fmt.Sprintf("%q: no such file or directory", filepath.Join(dir, "missing.txt"))},
		{[]string{"@" + filepath.Join(dir, "long.txt")}, filepath.Join(dir, "long.txt") + ":2: line too long"},
	} {
		if err := ParseTargetArgs(tt.args, refuse); err == nil || err.Error() != tt.want {
			t.Errorf("ParseTargetArgs(%q) = %v, want %q", tt.args, err, tt.want)
		}
	}
	writeFile(t, dir, "bad.txt", "198.18.0.1\n\nweb-1.internal\n")
	err := ParseTargetArgs([]string{"@" + filepath.Join(dir, "bad.txt")}, refuse)
	if want := filepath.Join(dir, "bad.txt") + ":3: no host names here"; err == nil || err.Error() != want {
		t.Errorf("a refused line: %v, want %q", err, want)
	}
}
