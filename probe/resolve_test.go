package probe

import (
	"context"
	"errors"
	"net/netip"
	"testing"
)

func TestResolve(t *testing.T) {
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	zone := map[string][]netip.Addr{
		"dual.test":   addrs("2001:db8::1", "192.0.2.1", "192.0.2.2"),
		"v6.test":     addrs("2001:db8::2", "2001:db8::3"),
		"v4.test":     addrs("192.0.2.3"),
		"mapped.test": addrs("::ffff:192.0.2.4"),
	}
	var networks []string
	r := Resolver{Lookup: func(_ context.Context, network, host string) ([]netip.Addr, error) {
		networks = append(networks, network)
		a, ok := zone[host]
		if !ok {
			return nil, errors.New("no such host")
		}
		return a, nil
	}}
	tests := []struct {
		host, family string
		want         string // "" = error
		network      string // network asked of Lookup; "" = no lookup
	}{
		{"dual.test", "any", "192.0.2.1", "ip"},
		{"dual.test", "", "192.0.2.1", "ip"},
		{"dual.test", "ip4", "192.0.2.1", "ip4"},
		{"dual.test", "ip6", "2001:db8::1", "ip6"},
		{"v6.test", "any", "2001:db8::2", "ip"},
		{"v6.test", "ip4", "", "ip4"},
		{"v4.test", "ip6", "", "ip6"},
		{"mapped.test", "ip4", "192.0.2.4", "ip4"},
		{"missing.test", "any", "", "ip"},
		{"192.0.2.9", "any", "192.0.2.9", ""},
		{"192.0.2.9", "ip6", "", ""},
		{"2001:db8::9", "ip6", "2001:db8::9", ""},
		{"dual.test", "ipx", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.host+"/"+tt.family, func(t *testing.T) {
			networks = nil
			got, err := r.Resolve(context.Background(), tt.host, tt.family)
			if tt.want == "" {
				if err == nil {
					t.Errorf("Resolve = %v, want an error", got)
				}
			} else if err != nil || got != netip.MustParseAddr(tt.want) {
				t.Errorf("Resolve = %v, %v; want %s", got, err, tt.want)
			}
			if tt.network == "" && len(networks) > 0 || tt.network != "" && (len(networks) != 1 || networks[0] != tt.network) {
				t.Errorf("lookups %q, want %q", networks, tt.network)
			}
		})
	}
	if _, err := r.Resolve(context.Background(), "v6.test", "ip4"); !errors.Is(err, ErrNoAddress) {
		t.Errorf("no IPv4 address: %v, want ErrNoAddress", err)
	}
}
