package http

import (
	"net"
	"strconv"
	"strings"

	"github.com/sondeprobe/sonde/probe"
)

// hostHeader returns the Host header for t (H6): Options.Host as written,
// else the target's host name, else its address; a derived host carries
// ":port" unless the port is the scheme's default, as in a URL.
func (p *Prober) hostHeader(t probe.Target) string {
	if p.opts.Host != "" {
		return p.opts.Host
	}
	h := t.Host
	if h == "" {
		h = t.Addr.Unmap().WithZone("").String()
	}
	if t.Port == p.defaultPort {
		if strings.Contains(h, ":") { // IPv6 literal
			return "[" + h + "]"
		}
		return h
	}
	return net.JoinHostPort(h, strconv.Itoa(int(t.Port)))
}

// serverName returns the TLS server name for a probe whose Host header is
// host: Options.SNI, else host without its port. When that is an IP address,
// crypto/tls sends no SNI and verifies the address instead.
func (p *Prober) serverName(host string) string {
	if p.opts.SNI != "" {
		return p.opts.SNI
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
}
