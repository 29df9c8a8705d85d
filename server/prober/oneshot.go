package prober

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/endpoint"
	"github.com/sondeprobe/sonde/probe/syn"
)

// CheckTarget refuses a target entry that check c cannot probe once, as a
// configuration refuses it for a target of c's pools: a CIDR block, or an
// address that c's source address cannot reach (the error then wraps an
// *endpoint.SourceError). A host name is checked when it is looked up
// ([Address]).
func CheckTarget(c *config.Check, e config.TargetEntry) error {
	if e.Block.IsValid() {
		return fmt.Errorf("%s is a CIDR block; a single probe goes to one address", e.Block)
	}
	if e.Host != "" {
		return nil
	}
	if err := endpoint.CheckSource(c.SourceAddress, e.Addr); err != nil {
		return fmt.Errorf("check %s: %w", c.Name, err)
	}
	return nil
}

// Address returns the address a one-shot probe of e with check c goes to:
// e's own address, or, for a host name, the address [endpoint.OneShot]
// picks with r for c's ip_family and source_address — the first of those
// the daemon would probe for the name. timeout bounds the lookup (0: ctx
// alone).
func Address(ctx context.Context, r endpoint.Resolver, c *config.Check, e config.TargetEntry, timeout time.Duration) (netip.Addr, error) {
	if err := CheckTarget(c, e); err != nil {
		return netip.Addr{}, err
	}
	return endpoint.OneShot(ctx, r, e, c.IPFamily, c.SourceAddress, timeout)
}

// Target is what a one-shot probe of e at addr and port is given: a host
// name is the probe's Host header and TLS server name by default.
func Target(e config.TargetEntry, addr netip.Addr, port uint16) probe.Target {
	return probe.Target{Addr: addr, Port: port, Host: e.Host}
}

// Probers holds the probers of a set of one-shot probes, chosen as the
// daemon chooses ([New]): one per distinct probe (config.Check.ProbeKey),
// and, when it was started for endpoints, one SYN prober shared by the TCP
// checks that run on it. It is used by one goroutine; the probers it
// returns are safe for concurrent use.
type Probers struct {
	syn   *syn.OneShot
	byKey map[string]probe.Reporter
}

// NewProbers returns the probers of a set of one-shot probes. With
// synEndpoints, it starts a SYN prober for them (raw sockets: the error
// wraps syn.ErrNoRawSocket without CAP_NET_RAW); without, TCP checks probe
// with connect() and a check in tcp_mode syn is an error ([ErrNoSyn]).
func NewProbers(synEndpoints []netip.AddrPort) (*Probers, error) {
	ps := &Probers{byKey: map[string]probe.Reporter{}}
	if len(synEndpoints) > 0 {
		s, err := syn.NewOneShot(synEndpoints, syn.Config{})
		if err != nil {
			return nil, fmt.Errorf("start the SYN prober: %w", err)
		}
		ps.syn = s
	}
	return ps, nil
}

// For returns the prober of check c; ctx bounds the reading of c's files.
func (ps *Probers) For(ctx context.Context, c *config.Check) (probe.Reporter, error) {
	key := c.ProbeKey()
	if p, ok := ps.byKey[key]; ok {
		return p, nil
	}
	p, useSyn, err := New(ctx, c, ps.syn != nil)
	if err != nil {
		return nil, err
	}
	if useSyn {
		p = ps.syn.Retransmitting(c.SynRetransmit.D())
	}
	ps.byKey[key] = p
	return p, nil
}

// Close stops the SYN prober, if one was started.
func (ps *Probers) Close() error {
	if ps.syn == nil {
		return nil
	}
	return ps.syn.Close()
}
