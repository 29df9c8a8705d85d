package endpoint

import (
	"fmt"
	"net/netip"
	"strconv"
)

// Family is the address families a target given as a host name is probed
// over: ip_family in a config file, -ip-family of `sonde probe`. The zero
// Family is Any.
type Family uint8

// The address families.
const (
	Any Family = iota // dual stack: one endpoint per family the name has
	IP4               // IPv4 only
	IP6               // IPv6 only
)

var familyNames = [...]string{Any: "any", IP4: "ip4", IP6: "ip6"}

// FamilyNames returns the names a Family is written as, Any first.
func FamilyNames() []string { return familyNames[:] }

// ParseFamily returns the Family named s: "any", "ip4" or "ip6".
func ParseFamily(s string) (Family, error) {
	for i, n := range familyNames {
		if n == s {
			return Family(i), nil
		}
	}
	return Any, fmt.Errorf("%q is not an address family; want any, ip4 or ip6", s)
}

// String returns "any", "ip4" or "ip6".
func (f Family) String() string {
	if int(f) < len(familyNames) {
		return familyNames[f]
	}
	return "family(" + strconv.Itoa(int(f)) + ")"
}

// MarshalText encodes the family as its name.
func (f Family) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// Noun names the family in messages: "IPv4", "IPv6", or "IP" for Any.
func (f Family) Noun() string {
	switch f {
	case IP4:
		return "IPv4"
	case IP6:
		return "IPv6"
	}
	return "IP"
}

// Network is the network of a lookup for f, as [Resolver] takes it: "ip4",
// "ip6" or "ip".
func (f Family) Network() string {
	switch f {
	case IP4:
		return "ip4"
	case IP6:
		return "ip6"
	}
	return "ip"
}

// Has reports whether a is of a family f allows. IPv4-mapped IPv6 addresses
// count as IPv4.
func (f Family) Has(a netip.Addr) bool {
	a = a.Unmap()
	switch f {
	case IP4:
		return a.Is4()
	case IP6:
		return a.Is6()
	}
	return a.IsValid()
}

// Of returns the family of a: IP4 or IP6 (IP4 for an IPv4-mapped address).
func Of(a netip.Addr) Family {
	if a.Unmap().Is4() {
		return IP4
	}
	return IP6
}

// ForSource returns the families a host name is looked up for, for probes
// of family f leaving from src: f itself, or, when f is Any and src is set,
// src's family alone — a probe leaving from src reaches only addresses of
// its family. An f that src does not fit is refused where the two are set
// (a check's ip_family and source_address), so f wins here.
func (f Family) ForSource(src netip.Addr) Family {
	if f != Any || !src.IsValid() {
		return f
	}
	return Of(src)
}

// Reachable reports whether a probe leaving from src can reach a: src is
// unset, or both are of one family. It is the rule for targets given as
// addresses; ip_family does not apply to them.
func Reachable(src, a netip.Addr) bool {
	return !src.IsValid() || Of(src) == Of(a)
}

// SourceError is a target address that the source address cannot reach
// ([Reachable] is false).
type SourceError struct {
	Addr, Source netip.Addr
}

// Error says which address and source differ, and how.
func (e *SourceError) Error() string {
	return fmt.Sprintf("%s is %s but the source address %s is %s", e.Addr, Of(e.Addr).Noun(), e.Source, Of(e.Source).Noun())
}

// CheckSource returns a *SourceError when a probe leaving from src cannot
// reach a, else nil.
func CheckSource(src, a netip.Addr) error {
	if Reachable(src, a) {
		return nil
	}
	return &SourceError{Addr: a, Source: src}
}
