package discovery

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

// Resolver looks up the addresses of a host name. *net.Resolver implements
// it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// TTLResolver is a Resolver that also tells how long its answer holds.
type TTLResolver interface {
	Resolver
	LookupTTL(ctx context.Context, network, host string) ([]netip.Addr, time.Duration, error)
}

// Family is the address families a host name is resolved to.
type Family uint8

const (
	IP4  Family      = 1 << iota // IPv4 only
	IP6                          // IPv6 only
	Dual = IP4 | IP6             // both: one target per family the name has
)

// network is the network name of a lookup for f.
func (f Family) network() string {
	switch f {
	case IP4:
		return "ip4"
	case IP6:
		return "ip6"
	}
	return "ip"
}

func (f Family) String() string {
	switch f {
	case IP4:
		return "IPv4"
	case IP6:
		return "IPv6"
	}
	return "IP"
}

// Resolution is the outcome of one lookup of a host name.
type Resolution struct {
	// Addrs are the addresses sonde probes for the name: of each family it
	// wants, the lowest address in the answer (the same one whatever order
	// the server gives), IPv4 first.
	Addrs []netip.Addr
	// TTL is how long the answer holds; 0 when the resolver does not say.
	TTL time.Duration
	// Err is why the lookup failed; Addrs is then empty.
	Err error
	// At is when the lookup was made.
	At time.Time
}

// Lookup resolves host for the families fam with r, bounded by timeout.
func Lookup(ctx context.Context, r Resolver, host string, fam Family, timeout time.Duration) Resolution {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res := Resolution{At: time.Now()}
	var addrs []netip.Addr
	var err error
	if tr, ok := r.(TTLResolver); ok {
		addrs, res.TTL, err = tr.LookupTTL(ctx, fam.network(), host)
	} else {
		addrs, err = r.LookupNetIP(ctx, fam.network(), host)
	}
	if err != nil {
		res.Err = lookupError(host, err)
		return res
	}
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
	if fam&IP4 != 0 && v4.IsValid() {
		res.Addrs = append(res.Addrs, v4)
	}
	if fam&IP6 != 0 && v6.IsValid() {
		res.Addrs = append(res.Addrs, v6)
	}
	if len(res.Addrs) == 0 {
		res.Err = fmt.Errorf("%q has no %s address", host, fam)
	}
	return res
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
