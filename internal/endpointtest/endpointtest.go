// Package endpointtest holds the inputs that every entry point from a name
// or address to an endpoint is tested with — a config's targets, a
// discovered __address__, `sonde probe`, `sonde scan` and /probe — and the
// resolver they are resolved with, so that each entry point's test runs the
// same table and must give the same endpoints or the same error. Only
// tests import it.
package endpointtest

import (
	"context"
	"net"
	"net/netip"
	"strings"

	"github.com/sondeprobe/sonde/probe/endpoint"
)

// Port is the port of an entry that gives none: the default port of the
// HTTP check every entry point is tested with.
const Port = 80

// names are the answers of [Resolver]: a name with both families, in no
// order, and names with one.
var names = map[string][]string{
	"dual.test": {"198.18.0.9", "2001:db8::9", "::ffff:198.18.0.3", "2001:db8::3"},
	"v4.test":   {"198.18.4.4"},
	"v6.test":   {"2001:db8::6"},
}

// Resolver answers for dual.test, v4.test and v6.test, filtered by the
// network asked for as a resolver filters them, and "no such host" for any
// other name. Nothing leaves the process.
var Resolver = endpoint.ResolverFunc(func(_ context.Context, network, host string) ([]netip.Addr, error) {
	as, ok := names[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, s := range as {
		a := netip.MustParseAddr(s)
		if network == "ip" || (network == "ip4") == a.Unmap().Is4() {
			out = append(out, a)
		}
	}
	return out, nil
})

// ErrKind is which error an entry point must give for a case.
type ErrKind int

// The kinds of error.
const (
	NoError      ErrKind = iota
	EntryErr             // the *endpoint.EntryError of endpoint.ParseEntry, wrapped
	SourceErr            // the *endpoint.SourceError of the check's source address, wrapped
	LookupErr            // the lookup's error: a failed probe in one-shots, an unresolved name in the daemon
	BlockRefused         // a CIDR block, which discovery and one-shot probes refuse with their own words
)

// Case is one input and what every entry point must make of it.
type Case struct {
	Name   string
	Entry  string          // the target entry as given
	Family endpoint.Family // the check's ip_family
	Source string          // the check's source_address; "" for none
	// Want are the endpoints the daemon probes for the entry, in the order
	// endpoint.Pick gives; a one-shot probe goes to the first.
	Want []string
	Kind ErrKind
	Err  string // the text of the error of Kind EntryErr, SourceErr or LookupErr
}

// IsName reports whether the entry is a host name, which `sonde scan`
// refuses.
func (c *Case) IsName() bool { return strings.Contains(c.Entry, ".test") }

// Cases are the inputs of every entry point.
var Cases = []Case{
	{Name: "name any", Entry: "dual.test", Want: []string{"198.18.0.3:80", "[2001:db8::3]:80"}},
	{Name: "name any with port", Entry: "dual.test:8080", Want: []string{"198.18.0.3:8080", "[2001:db8::3]:8080"}},
	{Name: "name ip4", Entry: "dual.test", Family: endpoint.IP4, Want: []string{"198.18.0.3:80"}},
	{Name: "name ip6", Entry: "dual.test", Family: endpoint.IP6, Want: []string{"[2001:db8::3]:80"}},
	{Name: "name any from an IPv6 source", Entry: "dual.test", Source: "::1", Want: []string{"[2001:db8::3]:80"}},
	{Name: "name any from an IPv4 source", Entry: "DUAL.test.", Source: "127.0.0.1", Want: []string{"198.18.0.3:80"}},
	{Name: "IPv6-only name any", Entry: "v6.test:443", Want: []string{"[2001:db8::6]:443"}},
	{Name: "IPv6-only name ip4", Entry: "v6.test", Family: endpoint.IP4, Kind: LookupErr, Err: `"v6.test" has no IPv4 address`},
	{Name: "IPv4-only name from an IPv6 source", Entry: "v4.test", Source: "::1", Kind: LookupErr, Err: `"v4.test" has no IPv6 address`},
	{Name: "unknown name", Entry: "gone.test", Kind: LookupErr, Err: `cannot resolve "gone.test": no such host`},
	{Name: "IPv4", Entry: "198.18.1.1", Want: []string{"198.18.1.1:80"}},
	{Name: "IPv4 with port", Entry: "198.18.1.1:8080", Want: []string{"198.18.1.1:8080"}},
	{Name: "IPv4-mapped IPv6", Entry: "::ffff:198.18.1.1", Want: []string{"198.18.1.1:80"}},
	{Name: "IPv6", Entry: "2001:db8::1", Want: []string{"[2001:db8::1]:80"}},
	{Name: "bracketed IPv6", Entry: "[2001:db8::1]", Want: []string{"[2001:db8::1]:80"}},
	{Name: "bracketed IPv6 with port", Entry: "[2001:db8::1]:8443", Want: []string{"[2001:db8::1]:8443"}},
	{Name: "ip_family leaves addresses alone", Entry: "2001:db8::1", Family: endpoint.IP4, Want: []string{"[2001:db8::1]:80"}},
	{Name: "IPv6 from an IPv4 source", Entry: "[2001:db8::1]:80", Source: "127.0.0.1", Kind: SourceErr, Err: "2001:db8::1 is IPv6 but the source address 127.0.0.1 is IPv4"},
	{Name: "IPv4 from an IPv6 source", Entry: "198.18.1.1", Source: "::1", Kind: SourceErr, Err: "198.18.1.1 is IPv4 but the source address ::1 is IPv6"},
	{Name: "bracketed IPv4", Entry: "[198.18.1.1]:80", Kind: EntryErr, Err: `"[198.18.1.1]:80" is not an IP address, CIDR block or host name`},
	{Name: "zone", Entry: "fe80::1%eth0", Kind: EntryErr, Err: `"fe80::1%eth0" has an IPv6 zone; zones are not supported`},
	{Name: "bracketed zone with port", Entry: "[fe80::1%eth0]:80", Kind: EntryErr, Err: `"[fe80::1%eth0]:80" has an IPv6 zone; zones are not supported`},
	{Name: "port 0", Entry: "198.18.1.1:0", Kind: EntryErr, Err: `"198.18.1.1:0" has port 0, out of range 1..65535`},
	{Name: "port too high", Entry: "dual.test:65536", Kind: EntryErr, Err: `"dual.test:65536" has port 65536, out of range 1..65535`},
	{Name: "port not a number", Entry: "dual.test:http", Kind: EntryErr, Err: `"dual.test:http" has a bad port "http"`},
	{Name: "IPv6 with port unbracketed", Entry: "2001:db8::1:80:x", Kind: EntryErr, Err: `"2001:db8::1:80:x" is not an IP address, CIDR block or host name (write an IPv6 address with a port as [addr]:port)`},
	{Name: "bad name", Entry: "-bad-.test", Kind: EntryErr, Err: `"-bad-.test" is not an IP address, CIDR block or host name`},
	{Name: "empty", Entry: "", Kind: EntryErr, Err: `"" is not an IP address, CIDR block or host name`},
	{Name: "block", Entry: "198.18.2.0/31", Kind: BlockRefused, Want: []string{"198.18.2.0:80", "198.18.2.1:80"}},
}
