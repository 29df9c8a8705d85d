package endpoint

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/sondeprobe/sonde/probe"
)

// Entry is one parsed target entry: exactly one of Addr, Block and Host is
// set.
type Entry struct {
	Addr  netip.Addr   // one IP address; IPv4-mapped IPv6 addresses are taken as IPv4
	Block netip.Prefix // a CIDR block: every address in it
	Host  string       // a host name, lower case and without a trailing dot
	Port  uint16       // the entry's own port, 0 when it gives none
}

// EntryError is a target entry [ParseEntry] refuses. Its text quotes the
// entry and says what is wrong with it; every caller prints it as it is,
// after where the entry came from.
type EntryError struct {
	Entry  string // the entry as given
	Reason string // what is wrong with it: "has port 0, out of range 1..65535"
}

// Error returns the quoted entry and the reason.
func (e *EntryError) Error() string { return strconv.Quote(e.Entry) + " " + e.Reason }

func entryErr(s, format string, args ...any) error {
	return &EntryError{Entry: s, Reason: fmt.Sprintf(format, args...)}
}

// notEntry is the reason for text that is no target entry at all.
const notEntry = "is not an IP address, CIDR block or host name"

// ParseEntry parses one target entry, the grammar of every target sonde
// reads (a config's targets, a targets file, a discovered __address__, the
// host of a `sonde probe` URL, a /probe target, `sonde scan`'s arguments):
//
//	198.18.0.7          IPv4 or IPv6 address ("[2001:db8::1]" too)
//	198.18.0.7:8080     address and port ("[2001:db8::1]:8080" for IPv6)
//	198.18.0.0/24       CIDR block, every address in it (no host bits set)
//	api-1.internal      host name
//	api-1.internal:8080 host name and port
//
// A URL scheme, an IPv6 zone, a bracketed IPv4 address, a port outside
// 1..65535 and an empty port are refused. Callers that take no CIDR block
// or no host name refuse those themselves. The error is an *EntryError.
func ParseEntry(s string) (Entry, error) {
	if strings.Contains(s, "://") {
		return Entry{}, entryErr(s, notEntry+" (targets take no URL scheme)")
	}
	if strings.Contains(s, "/") {
		return parseBlock(s)
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return Entry{}, entryErr(s, "has an IPv6 zone; zones are not supported")
		}
		return Entry{Addr: a.Unmap()}, nil
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		a, err := netip.ParseAddr(s[1 : len(s)-1])
		switch {
		case err != nil || !a.Is6():
			return Entry{}, entryErr(s, notEntry)
		case a.Zone() != "":
			return Entry{}, entryErr(s, "has an IPv6 zone; zones are not supported")
		}
		return Entry{Addr: a.Unmap()}, nil
	}
	host, portText, hasPort := s, "", false
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host, portText, hasPort = s[:i], s[i+1:], true
		if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
			host = host[1 : len(host)-1]
		} else if strings.Contains(host, ":") {
			return Entry{}, entryErr(s, notEntry+" (write an IPv6 address with a port as [addr]:port)")
		}
	}
	var port uint16
	if hasPort {
		n, err := strconv.ParseUint(portText, 10, 64)
		if err != nil {
			return Entry{}, entryErr(s, "has a bad port %q", portText)
		}
		if n < 1 || n > 65535 {
			return Entry{}, entryErr(s, "has port %d, out of range 1..65535", n)
		}
		port = uint16(n)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return Entry{}, entryErr(s, "has an IPv6 zone; zones are not supported")
		}
		if a.Is4() && strings.HasPrefix(s, "[") {
			return Entry{}, entryErr(s, notEntry)
		}
		return Entry{Addr: a.Unmap(), Port: port}, nil
	}
	if !probe.ValidHostName(host) {
		return Entry{}, entryErr(s, notEntry)
	}
	return Entry{Host: strings.ToLower(strings.TrimSuffix(host, ".")), Port: port}, nil
}

// parseBlock parses a CIDR block without host bits; an IPv4-mapped block
// is taken as IPv4.
func parseBlock(s string) (Entry, error) {
	pfx, err := netip.ParsePrefix(s)
	if err != nil || pfx.Addr().Zone() != "" {
		return Entry{}, entryErr(s, "is not a valid CIDR block")
	}
	if pfx.Addr().Is4In6() {
		if pfx.Bits() < 96 {
			return Entry{}, entryErr(s, "is not a valid CIDR block")
		}
		pfx = netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-96)
	}
	if m := pfx.Masked(); m != pfx {
		return Entry{}, entryErr(s, "has host bits set; did you mean %s?", m)
	}
	return Entry{Block: pfx}, nil
}
