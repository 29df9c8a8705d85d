package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// Resolver looks up the addresses of a host name for network "ip", "ip4"
// or "ip6". *net.Resolver implements it, [DNSResolver] also tells how long
// each answer holds; tests inject a fake so that no test touches the
// network.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// ResolverFunc is a Resolver made of a function, such as a fake in a test.
type ResolverFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

// LookupNetIP implements Resolver.
func (f ResolverFunc) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return f(ctx, network, host)
}

// TTLResolver is a Resolver that also tells how long its answer holds.
type TTLResolver interface {
	Resolver
	LookupTTL(ctx context.Context, network, host string) ([]netip.Addr, time.Duration, error)
}

// Resolution is the outcome of one lookup of a host name.
type Resolution struct {
	// Addrs are the addresses sonde probes for the name ([Pick]): of each
	// family wanted, the lowest address in the answer, IPv4 first.
	Addrs []netip.Addr
	// TTL is how long the answer holds; 0 when the resolver does not say.
	TTL time.Duration
	// Err is why the lookup failed; Addrs is then empty.
	Err error
	// At is when the lookup was made.
	At time.Time
}

// Lookup resolves host for the families fam with r, bounded by timeout
// (by ctx alone when timeout is 0 or less). host is a host name, as
// [ParseEntry] returns one.
func Lookup(ctx context.Context, r Resolver, host string, fam Family, timeout time.Duration) Resolution {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	res := Resolution{At: time.Now()}
	var addrs []netip.Addr
	var err error
	if tr, ok := r.(TTLResolver); ok {
		addrs, res.TTL, err = tr.LookupTTL(ctx, fam.Network(), host)
	} else {
		addrs, err = r.LookupNetIP(ctx, fam.Network(), host)
	}
	if err != nil {
		res.Err = lookupError(host, err)
		return res
	}
	if res.Addrs = Pick(addrs, fam); len(res.Addrs) == 0 {
		res.Err = fmt.Errorf("%q has no %s address", host, fam.Noun())
	}
	return res
}

// Pick returns the addresses sonde probes among addrs, a name's answer, for
// the families fam: of each family fam allows, the lowest address (the same
// one whatever order the server answers in), IPv4 first. IPv4-mapped
// addresses count as IPv4; zones are dropped.
func Pick(addrs []netip.Addr, fam Family) []netip.Addr {
	var v4, v6 netip.Addr
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		switch {
		case a.Is4() && (!v4.IsValid() || a.Less(v4)):
			v4 = a
		case a.Is6() && (!v6.IsValid() || a.Less(v6)):
			v6 = a
		}
	}
	var out []netip.Addr
	if fam != IP6 && v4.IsValid() {
		out = append(out, v4)
	}
	if fam != IP4 && v6.IsValid() {
		out = append(out, v6)
	}
	return out
}

// OneShot returns the address a single probe of e goes to, for probes of
// family fam leaving from src (src may be unset): e's address when the
// source can reach it (else a *SourceError), or the first address [Lookup]
// gives e's host name for fam.ForSource(src) — the lowest IPv4 address
// where the families allow IPv4 and the name has one, else the lowest IPv6
// address. The daemon probes every address Lookup gives; a single probe
// goes to the first. e must not be a CIDR block.
func OneShot(ctx context.Context, r Resolver, e Entry, fam Family, src netip.Addr, timeout time.Duration) (netip.Addr, error) {
	switch {
	case e.Block.IsValid():
		return netip.Addr{}, fmt.Errorf("%s is a CIDR block; a single probe goes to one address", e.Block)
	case e.Host == "":
		return e.Addr, CheckSource(src, e.Addr)
	}
	res := Lookup(ctx, r, e.Host, fam.ForSource(src), timeout)
	if res.Err != nil {
		return netip.Addr{}, res.Err
	}
	return res.Addrs[0], nil
}

// lookupError says why a lookup of host failed, without repeating the name
// where the resolver's error already has it.
func lookupError(host string, err error) error {
	var de *net.DNSError
	if errors.As(err, &de) {
		switch {
		case de.IsNotFound:
			return fmt.Errorf("cannot resolve %q: no such host", host)
		case de.IsTimeout:
			return fmt.Errorf("cannot resolve %q: lookup timed out", host)
		}
		return fmt.Errorf("cannot resolve %q: %s", host, de.Err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("cannot resolve %q: lookup timed out", host)
	}
	return fmt.Errorf("cannot resolve %q: %w", host, err)
}
