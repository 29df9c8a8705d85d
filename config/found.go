package config

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/sondeprobe/sonde/config/discovery"

	"github.com/sondeprobe/sonde/probe/endpoint"
)

// Static returns the configuration as its files give it: c without the
// targets that discovery and host-name lookups added ([Config.WithFound]).
func (c *Config) Static() *Config {
	if c.static != nil {
		return c.static
	}
	return c
}

// DiscoveryPools returns what the pools' targets come from besides the
// addresses their files list, for a [discovery.Runner]: every pool, in
// file order.
func (c *Config) DiscoveryPools() []discovery.Pool {
	s := c.Static()
	out := make([]discovery.Pool, len(s.Pools))
	for i, p := range s.Pools {
		out[i] = p.Discovery
	}
	return out
}

// Discovers reports whether some pool has discovery sources or host names:
// then its targets change while the daemon runs.
func (c *Config) Discovers() bool {
	return slices.ContainsFunc(c.Static().Pools, func(p *Pool) bool {
		return len(p.Discovery.Sources) > 0 || len(p.Discovery.Names) > 0
	})
}

// WithFound returns the configuration with the targets that discovery and
// host-name lookups found, by pool name: each pool has the targets its
// files list by address and those of found, deduplicated as [Parse] does
// (the same address, port and check in several pools is one target;
// targets of one probe class on one endpoint share a stream, P4, P5). A
// found target gets the port rule of the pool's check, the shard's filter
// and the pool's disabled list; one the check cannot probe (no port, an
// address family its source address cannot reach) is listed among the
// pool's Unresolved instead. The ids of the result are its own, dense as
// Parse gives them.
//
// The configuration WithFound starts from is always c's [Config.Static]:
// targets found earlier are replaced, not added to. c is left as it is.
func (c *Config) WithFound(found map[string]discovery.Found) (*Config, error) {
	return c.WithFoundContext(context.Background(), found)
}

// WithFoundContext is [Config.WithFound] that gives up, with ctx's error,
// once ctx ends: the daemon builds a discovery update's configuration
// without holding its engine, and drops it when a newer update or a stop
// comes first.
func (c *Config) WithFoundContext(ctx context.Context, found map[string]discovery.Found) (*Config, error) {
	s := c.Static()
	extra := 0
	for _, p := range s.Pools {
		f := found[p.Name]
		extra += f.Len() + len(f.Unresolved)
	}
	if extra == 0 {
		return s, nil
	}
	listed := s.listed + extra
	x := &expander{limit: s.maxTargets, shard: s.Shard}
	x.b.Grow(len(s.Targets) + extra)
	x.listed = s.listed
	cp := *s // checks, remediations, metrics, shard, files: as they are
	out := &cp
	out.static = s
	out.listed = listed
	out.Pools = make([]*Pool, len(s.Pools))
	for i, p := range s.Pools {
		np := *p
		out.Pools[i] = &np
		chk := s.Checks[p.CheckIndex]
		start := x.b.Len()
		d := 0
		for pos, id := range p.Members {
			for d < len(p.Disabled) && p.Disabled[d] < id {
				d++
			}
			t := s.Targets[id]
			x.b.SetLabels(p.MemberLabels(pos))
			if x.add(t.Addr(), t.Port, s.Hostnames[id], uint16(p.CheckIndex), chk) && d < len(p.Disabled) && p.Disabled[d] == id {
				x.b.DisableLast()
			}
		}
		f := found[p.Name]
		np.Unresolved = f.Unresolved
		n := 0
		for t := range f.All() {
			if n++; n%checkEvery == 0 && ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if why := probeable(t, chk); why != "" {
				np.Unresolved = append(np.Unresolved, discovery.Unresolved{Host: hostOrAddr(t), Port: t.Port, Labels: t.Labels, Err: why})
				continue
			}
			if x.listed >= x.limit {
				return nil, fmt.Errorf("pool %q: %s brings the number of targets over the limit of %d", p.Name, hostOrAddr(t), x.limit)
			}
			port := chk.TargetPort(t.Port)
			x.b.SetLabels(t.Labels)
			if x.add(t.Addr, port, t.Host, uint16(p.CheckIndex), chk) && p.disables(t.Addr, port, t.Host) {
				x.b.DisableLast()
			}
		}
		x.b.EndPool(start)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out.Targets, out.Hostnames = x.build(out.Pools)
	return out, nil
}

// checkEvery is how many found targets WithFoundContext adds between two
// looks at its context.
const checkEvery = 1 << 14

// probeable says why check c cannot probe a found target, "" when it can.
func probeable(t *discovery.Target, c *Check) string {
	switch {
	case !t.Addr.IsValid() || t.Addr.IsUnspecified() || t.Addr.IsMulticast():
		return fmt.Sprintf("%s is not an address to probe", t.Addr)
	case c.TargetPort(t.Port) == 0:
		return fmt.Sprintf("no port, and check %q has none (protocol tcp has no default port)", c.Name)
	case !endpoint.Reachable(c.SourceAddress, t.Addr):
		return sourceMismatch(t.Addr.String(), t.Addr, c)
	}
	return ""
}

func hostOrAddr(t *discovery.Target) string {
	if t.Host != "" {
		return t.Host
	}
	return t.Addr.String()
}

// disables reports whether the pool's disabled list names a found target.
func (p *Pool) disables(a netip.Addr, port uint16, host string) bool {
	if _, ok := slices.BinarySearchFunc(p.disabledEPs, netip.AddrPortFrom(a, port), netip.AddrPort.Compare); ok {
		return true
	}
	return host != "" && slices.Contains(p.disabledHosts, host)
}

// ParseLabelMatch reads a label filter "NAME=VALUE" (or "NAME!=VALUE").
func ParseLabelMatch(s string) (name, value string, equal bool, err error) {
	if i := strings.Index(s, "!="); i > 0 {
		return s[:i], s[i+2:], false, nil
	}
	if i := strings.IndexByte(s, '='); i > 0 {
		return s[:i], s[i+1:], true, nil
	}
	return "", "", false, fmt.Errorf("%q: want NAME=VALUE or NAME!=VALUE", s)
}
