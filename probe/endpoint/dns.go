package endpoint

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// DNSResolver resolves host names as the system does, and tells the TTL of
// each answer: names in the hosts file first (their answers hold for
// HostsTTL), then the name servers and search domains of resolv.conf, asked
// with the DNS protocol. Where resolv.conf cannot be read, it falls back to
// Go's resolver, whose answers carry no TTL.
type DNSResolver struct {
	// ResolvConf is the resolver configuration; default /etc/resolv.conf.
	ResolvConf string
	// Hosts is the hosts file; default /etc/hosts. "-" reads none.
	Hosts string
	// Servers, when set, replaces resolv.conf's name servers
	// ("127.0.0.1:5353"); the search domains of resolv.conf stay.
	Servers []string
}

// HostsTTL is how long an answer from the hosts file holds.
const HostsTTL = time.Minute

var _ TTLResolver = (*DNSResolver)(nil)

// LookupNetIP implements Resolver.
func (r *DNSResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	addrs, _, err := r.LookupTTL(ctx, network, host)
	return addrs, err
}

// LookupTTL implements TTLResolver.
func (r *DNSResolver) LookupTTL(ctx context.Context, network, host string) ([]netip.Addr, time.Duration, error) {
	want4, want6 := network != "ip6", network != "ip4"
	if addrs := r.fromHosts(host, want4, want6); len(addrs) > 0 {
		return addrs, HostsTTL, nil
	}
	conf, err := r.clientConfig()
	if err != nil {
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, network, host)
		return addrs, 0, err
	}
	var qtypes []uint16
	if want4 {
		qtypes = append(qtypes, dns.TypeA)
	}
	if want6 {
		qtypes = append(qtypes, dns.TypeAAAA)
	}
	notFound, noData := 0, false
	var lastErr error
	for _, name := range conf.NameList(host) {
		var addrs []netip.Addr
		ttl := time.Duration(-1)
		answered := false
		for _, qt := range qtypes {
			msg, err := exchange(ctx, conf, name, qt)
			if err != nil {
				lastErr = err
				continue
			}
			answered = true
			if msg.Rcode == dns.RcodeNameError {
				continue
			}
			noData = true // the name exists; it may have no record of this type
			for _, rr := range msg.Answer {
				var a netip.Addr
				switch rr := rr.(type) {
				case *dns.A:
					a, _ = netip.AddrFromSlice(rr.A.To4())
				case *dns.AAAA:
					a, _ = netip.AddrFromSlice(rr.AAAA)
				default:
					continue
				}
				if !a.IsValid() {
					continue
				}
				addrs = append(addrs, a)
				if t := time.Duration(rr.Header().Ttl) * time.Second; ttl < 0 || t < ttl {
					ttl = t
				}
			}
		}
		if len(addrs) > 0 {
			return addrs, max(ttl, 0), nil
		}
		if answered {
			notFound++
		}
	}
	switch {
	case noData:
		return nil, 0, nil // the name has no address of the families asked for
	case notFound > 0 || lastErr == nil:
		return nil, 0, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return nil, 0, &net.DNSError{Err: lastErr.Error(), Name: host, IsTimeout: errors.Is(lastErr, context.DeadlineExceeded) || isTimeout(lastErr)}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (r *DNSResolver) clientConfig() (*dns.ClientConfig, error) {
	path := r.ResolvConf
	if path == "" {
		path = "/etc/resolv.conf"
	}
	conf, err := dns.ClientConfigFromFile(path)
	if err != nil {
		if len(r.Servers) == 0 {
			return nil, err
		}
		conf = &dns.ClientConfig{Ndots: 1, Timeout: 5, Attempts: 2}
	}
	if len(r.Servers) > 0 {
		conf.Servers, conf.Port = append([]string(nil), r.Servers...), ""
	}
	if len(conf.Servers) == 0 {
		return nil, errors.New("no name server")
	}
	return conf, nil
}

// exchange asks the servers of conf for name's records of type qt, over
// UDP and, for a truncated answer, TCP. A server's failure moves to the
// next.
func exchange(ctx context.Context, conf *dns.ClientConfig, name string, qt uint16) (*dns.Msg, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qt)
	q.RecursionDesired = true
	var lastErr error
	for _, s := range conf.Servers {
		addr := s
		if conf.Port != "" {
			addr = net.JoinHostPort(s, conf.Port)
		}
		for _, netw := range []string{"udp", "tcp"} {
			c := &dns.Client{Net: netw, Timeout: time.Duration(max(conf.Timeout, 1)) * time.Second}
			msg, _, err := c.ExchangeContext(ctx, q, addr)
			if err != nil {
				lastErr = err
				break
			}
			if msg.Truncated && netw == "udp" {
				continue
			}
			if msg.Rcode != dns.RcodeSuccess && msg.Rcode != dns.RcodeNameError {
				lastErr = fmt.Errorf("server %s answered %s", addr, dns.RcodeToString[msg.Rcode])
				break
			}
			return msg, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return nil, lastErr
}

// fromHosts returns the addresses the hosts file gives name.
func (r *DNSResolver) fromHosts(name string, want4, want6 bool) []netip.Addr {
	path := r.Hosts
	switch path {
	case "-":
		return nil
	case "":
		path = "/etc/hosts"
	}
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	var out []netip.Addr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		a, err := netip.ParseAddr(fields[0])
		if err != nil {
			continue
		}
		a = a.Unmap().WithZone("")
		if a.Is4() && !want4 || a.Is6() && !want6 {
			continue
		}
		if slices.ContainsFunc(fields[1:], func(h string) bool { return strings.ToLower(strings.TrimSuffix(h, ".")) == name }) {
			out = append(out, a)
		}
	}
	return out
}
