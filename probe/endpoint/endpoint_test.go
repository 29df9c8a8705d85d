package endpoint

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

// fakeResolver answers from a map, filtered by network as a resolver
// filters, and records the networks it was asked for.
type fakeResolver struct {
	m     map[string][]netip.Addr
	asked []string
}

func (f *fakeResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	f.asked = append(f.asked, network+" "+host)
	as, ok := f.m[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	var out []netip.Addr
	for _, a := range as {
		if network == "ip" || network == "ip4" && a.Unmap().Is4() || network == "ip6" && !a.Unmap().Is4() {
			out = append(out, a)
		}
	}
	return out, nil
}

func TestParseEntry(t *testing.T) {
	tests := []struct {
		in, want, wantErr string // want: addr, block or host, then "|port"
	}{
		{in: "10.0.0.7", want: "10.0.0.7|0"},
		{in: "10.0.0.7:8080", want: "10.0.0.7|8080"},
		{in: "2001:db8::1", want: "2001:db8::1|0"},
		{in: "[2001:db8::1]", want: "2001:db8::1|0"},
		{in: "[2001:db8::1]:443", want: "2001:db8::1|443"},
		{in: "::ffff:10.0.0.7", want: "10.0.0.7|0"},
		{in: "198.18.0.0/24", want: "198.18.0.0/24|0"},
		{in: "::ffff:198.18.0.0/120", want: "198.18.0.0/24|0"},
		{in: "API-1.Internal.", want: "api-1.internal|0"},
		{in: "api-1.internal:80", want: "api-1.internal|80"},
		{in: "", wantErr: `"" is not an IP address, CIDR block or host name`},
		{in: "[10.0.0.1]", wantErr: `"[10.0.0.1]" is not an IP address, CIDR block or host name`},
		{in: "[10.0.0.1]:80", wantErr: `"[10.0.0.1]:80" is not an IP address, CIDR block or host name`},
		{in: "fe80::1%eth0", wantErr: `"fe80::1%eth0" has an IPv6 zone; zones are not supported`},
		{in: "[fe80::1%eth0]:80", wantErr: `"[fe80::1%eth0]:80" has an IPv6 zone; zones are not supported`},
		{in: "10.0.0.1:0", wantErr: `"10.0.0.1:0" has port 0, out of range 1..65535`},
		{in: "h.example:", wantErr: `"h.example:" has a bad port ""`},
		{in: "a:b:c", wantErr: `"a:b:c" is not an IP address, CIDR block or host name (write an IPv6 address with a port as [addr]:port)`},
		{in: "http://h.example/", wantErr: `"http://h.example/" is not an IP address, CIDR block or host name (targets take no URL scheme)`},
		{in: "10.0.0.1/24", wantErr: `"10.0.0.1/24" has host bits set; did you mean 10.0.0.0/24?`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			e, err := ParseEntry(tt.in)
			if tt.wantErr != "" {
				var ee *EntryError
				if !errors.As(err, &ee) || err.Error() != tt.wantErr || ee.Entry != tt.in {
					t.Fatalf("ParseEntry(%q) error = %v, want *EntryError %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseEntry(%q): %v", tt.in, err)
			}
			got := e.Host
			switch {
			case e.Addr.IsValid():
				got = e.Addr.String()
			case e.Block.IsValid():
				got = e.Block.String()
			}
			if got += "|" + strconv.Itoa(int(e.Port)); got != tt.want {
				t.Errorf("ParseEntry(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestFamily(t *testing.T) {
	for _, n := range FamilyNames() {
		f, err := ParseFamily(n)
		if err != nil || f.String() != n {
			t.Errorf("ParseFamily(%q) = %v, %v", n, f, err)
		}
	}
	if _, err := ParseFamily("ipv4"); err == nil || !strings.Contains(err.Error(), "want any, ip4 or ip6") {
		t.Errorf("ParseFamily(ipv4): %v", err)
	}
	v4, v6 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("2001:db8::1")
	for _, c := range []struct {
		f    Family
		src  netip.Addr
		want Family
	}{
		{Any, netip.Addr{}, Any}, {Any, v4, IP4}, {Any, v6, IP6},
		{IP4, netip.Addr{}, IP4}, {IP6, v6, IP6}, {IP4, v4, IP4},
	} {
		if got := c.f.ForSource(c.src); got != c.want {
			t.Errorf("%v.ForSource(%v) = %v, want %v", c.f, c.src, got, c.want)
		}
	}
	if !Reachable(netip.Addr{}, v6) || !Reachable(v4, netip.MustParseAddr("::ffff:10.0.0.9")) || Reachable(v4, v6) {
		t.Error("Reachable: wrong source rule")
	}
	var se *SourceError
	if err := CheckSource(v4, v6); !errors.As(err, &se) || err.Error() != "2001:db8::1 is IPv6 but the source address 10.0.0.1 is IPv4" {
		t.Errorf("CheckSource: %v", err)
	}
}

func TestPick(t *testing.T) {
	mixed := addrs("2001:db8::9", "10.0.0.9", "::ffff:10.0.0.2", "2001:db8::3", "10.0.0.5")
	for _, c := range []struct {
		fam  Family
		want []netip.Addr
	}{
		{Any, addrs("10.0.0.2", "2001:db8::3")},
		{IP4, addrs("10.0.0.2")},
		{IP6, addrs("2001:db8::3")},
	} {
		if diff := cmp.Diff(c.want, Pick(mixed, c.fam), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("Pick(%v) (-want +got):\n%s", c.fam, diff)
		}
	}
	// The order of the answer changes nothing.
	rev := slices.Clone(mixed)
	slices.Reverse(rev)
	if !slices.Equal(Pick(rev, Any), Pick(mixed, Any)) {
		t.Error("Pick depends on the order of the answer")
	}
}

func TestOneShot(t *testing.T) {
	r := &fakeResolver{m: map[string][]netip.Addr{
		"dual.test": addrs("2001:db8::2", "10.0.0.9", "10.0.0.3"),
		"v6.test":   addrs("2001:db8::6"),
	}}
	v4 := netip.MustParseAddr("192.0.2.1")
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		e       Entry
		fam     Family
		src     netip.Addr
		want    string
		wantErr string
	}{
		{"dual any", Entry{Host: "dual.test"}, Any, netip.Addr{}, "10.0.0.3", ""},
		{"dual ip6", Entry{Host: "dual.test"}, IP6, netip.Addr{}, "2001:db8::2", ""},
		{"v6 any", Entry{Host: "v6.test"}, Any, netip.Addr{}, "2001:db8::6", ""},
		{"v6 ip4", Entry{Host: "v6.test"}, IP4, netip.Addr{}, "", `"v6.test" has no IPv4 address`},
		{"v6 from an IPv4 source", Entry{Host: "v6.test"}, Any, v4, "", `"v6.test" has no IPv4 address`},
		{"missing", Entry{Host: "gone.test"}, Any, netip.Addr{}, "", `cannot resolve "gone.test": no such host`},
		{"literal", Entry{Addr: netip.MustParseAddr("2001:db8::1")}, IP4, netip.Addr{}, "2001:db8::1", ""},
		{"literal from the other family", Entry{Addr: netip.MustParseAddr("2001:db8::1")}, Any, v4, "", "2001:db8::1 is IPv6 but the source address 192.0.2.1 is IPv4"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, err := OneShot(ctx, r, c.e, c.fam, c.src, 0)
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Fatalf("OneShot = %v, %v; want error %q", a, err, c.wantErr)
				}
				return
			}
			if err != nil || a.String() != c.want {
				t.Fatalf("OneShot = %v, %v; want %s", a, err, c.want)
			}
		})
	}
	// With an IPv4 source, only IPv4 is asked for.
	r.asked = nil
	if _, err := OneShot(ctx, r, Entry{Host: "dual.test"}, Any, v4, 0); err != nil || !slices.Equal(r.asked, []string{"ip4 dual.test"}) {
		t.Errorf("lookup with an IPv4 source asked %v (%v), want ip4 only", r.asked, err)
	}
}
