package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// ErrNoAddress is returned (wrapped) by [Resolver.Resolve] when a name has no
// address of the requested family.
var ErrNoAddress = errors.New("no address of the requested family")

// Resolver turns a host name into the one address a probe goes to, honouring
// an IPv4/IPv6 preference. The zero Resolver uses the system resolver. A
// Resolver is safe for concurrent use when its Lookup is.
type Resolver struct {
	// Lookup returns the addresses of host for network "ip", "ip4" or "ip6",
	// like [net.Resolver.LookupNetIP]. Nil means net.DefaultResolver; tests
	// inject a fake.
	Lookup func(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Resolve returns an address of host for family "ip4" (IPv4 only), "ip6"
// (IPv6 only) or "any" (IPv4 when the name has one, else IPv6; "" means
// "any"). Among several addresses of the chosen family it returns the first
// the resolver gave. An IP literal is returned as is when it fits the family,
// without a lookup. IPv4-mapped IPv6 addresses count as IPv4.
func (r Resolver) Resolve(ctx context.Context, host, family string) (netip.Addr, error) {
	want, err := familyFilter(family)
	if err != nil {
		return netip.Addr{}, err
	}
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		if !want(a) {
			return netip.Addr{}, fmt.Errorf("resolve %s: %w (%s)", host, ErrNoAddress, family)
		}
		return a, nil
	}
	lookup := r.Lookup
	if lookup == nil {
		lookup = net.DefaultResolver.LookupNetIP
	}
	network := "ip"
	if family == "ip4" || family == "ip6" {
		network = family
	}
	addrs, err := lookup(ctx, network, host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("resolve %s: %w", host, err)
	}
	if a, ok := pick(addrs, want, family); ok {
		return a, nil
	}
	return netip.Addr{}, fmt.Errorf("resolve %s: %w (%s)", host, ErrNoAddress, family)
}

// familyFilter returns the predicate an address of family must satisfy.
func familyFilter(family string) (func(netip.Addr) bool, error) {
	switch family {
	case "ip4":
		return netip.Addr.Is4, nil
	case "ip6":
		return netip.Addr.Is6, nil
	case "", "any":
		return netip.Addr.IsValid, nil
	}
	return nil, fmt.Errorf("resolve: unknown address family %q (want ip4, ip6 or any)", family)
}

// pick returns the first address satisfying want; for family "any" an IPv4
// address wins over an earlier IPv6 one.
func pick(addrs []netip.Addr, want func(netip.Addr) bool, family string) (netip.Addr, bool) {
	var first netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if !want(a) {
			continue
		}
		if a.Is4() || family == "ip6" {
			return a, true
		}
		if !first.IsValid() {
			first = a
		}
	}
	return first, first.IsValid()
}
