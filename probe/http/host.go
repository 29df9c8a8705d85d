package http

import (
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/sondeprobe/sonde/probe"
)

// ValidHost reports whether h can be the Host header of a probe (H6): a host
// name ([probe.ValidHostName]) or an IP address, with an optional port
// 1..65535. An IPv6 address with a port is written in brackets
// ("[2001:db8::1]:8443"); without one, the brackets are optional.
func ValidHost(h string) bool {
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Zone() == ""
	}
	if rest, ok := strings.CutPrefix(h, "["); ok {
		v6, port, ok := strings.Cut(rest, "]")
		a, err := netip.ParseAddr(v6)
		if !ok || err != nil || !a.Is6() || a.Zone() != "" {
			return false
		}
		return port == "" || strings.HasPrefix(port, ":") && validPort(port[1:])
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		if !validPort(h[i+1:]) {
			return false
		}
		h = h[:i]
	}
	a, err := netip.ParseAddr(h)
	return probe.ValidHostName(h) || err == nil && a.Is4()
}

// validPort reports whether s is a port number 1..65535 in decimal digits.
func validPort(s string) bool {
	n, err := strconv.ParseUint(s, 10, 16)
	return err == nil && n > 0
}

// HostName returns the host of Host header h without its port and brackets:
// the TLS server name the header implies.
func HostName(h string) string {
	if name, _, err := net.SplitHostPort(h); err == nil {
		return name
	}
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}

// validBareHost reports whether h is a host name or an IP address without
// a port or brackets.
func validBareHost(h string) bool {
	a, err := netip.ParseAddr(h)
	return err == nil && a.Zone() == "" || probe.ValidHostName(h)
}

// targetHost returns t's host name, else its address.
func targetHost(t probe.Target) string {
	if t.Host != "" {
		return t.Host
	}
	return t.Addr.Unmap().WithZone("").String()
}

// hostHeader returns the Host header for t (H6): Options.Host as written,
// else Options.DefaultHost, else the target's host name, else its address; a
// derived host carries ":port" unless the port is the scheme's default, as
// in a URL.
func (p *Prober) hostHeader(t probe.Target) string {
	if p.opts.Host != "" {
		return p.opts.Host
	}
	return string(p.appendHost(nil, t))
}

// appendHost appends the Host header value for t to dst ([Prober.hostHeader])
// without allocating beyond dst's growth.
func (p *Prober) appendHost(dst []byte, t probe.Target) []byte {
	if p.opts.Host != "" {
		return append(dst, p.opts.Host...)
	}
	var name string
	var addr netip.Addr
	switch {
	case p.opts.DefaultHost != "":
		name = p.opts.DefaultHost
	case t.Host != "":
		name = t.Host
	default:
		addr = t.Addr.Unmap().WithZone("")
	}
	if addr.Is6() || strings.Contains(name, ":") { // an IPv6 literal
		dst = append(dst, '[')
		if name != "" {
			dst = append(dst, name...)
		} else {
			dst = addr.AppendTo(dst)
		}
		dst = append(dst, ']')
	} else if name != "" {
		dst = append(dst, name...)
	} else {
		dst = addr.AppendTo(dst)
	}
	if t.Port != p.defaultPort {
		dst = append(dst, ':')
		dst = strconv.AppendUint(dst, uint64(t.Port), 10)
	}
	return dst
}

// serverName returns the TLS server name for a probe of t whose Host header
// is host: Options.SNI, else host without its port, else (when host is
// Options.DefaultHost) t's host name or address. When that is an IP
// address, crypto/tls sends no SNI and verifies the address instead.
func (p *Prober) serverName(t probe.Target, host string) string {
	switch {
	case p.opts.SNI != "":
		return p.opts.SNI
	case p.opts.Host == "" && p.opts.DefaultHost != "":
		return targetHost(t)
	}
	return HostName(host)
}
