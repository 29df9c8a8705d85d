package config

import (
	"fmt"
	"net/netip"
	"slices"
)

// Endpoint is one target as a source outside the file gives it (service
// discovery): an address and port, and the host name it was found as, if any.
// A zero port means the check's default port.
type Endpoint struct {
	AddrPort netip.AddrPort
	Host     string
}

// WithPoolTargets returns a configuration that is c with targets added to and
// removed from one pool, deduplicated as [Parse] does: the same (address,
// port, check) in several pools is one target, and targets of one probe class
// on one endpoint share a stream (P4, P5). Targets are removed by address and
// port; adding a target the pool has, or removing one it lacks, changes
// nothing; with a shard ([Config.Shard]) only the shard's targets are kept.
// c is left as it is. The ids of the result are its own, dense as
// Parse gives them: a daemon maps them to its running targets as it maps a
// reloaded file's.
func (c *Config) WithPoolTargets(pool string, add, remove []Endpoint) (*Config, error) {
	pi := slices.IndexFunc(c.Pools, func(p *Pool) bool { return p.Name == pool })
	if pi < 0 {
		return nil, fmt.Errorf("pool %q: no such pool", pool)
	}
	ck := c.Checks[c.Pools[pi].CheckIndex]
	endpoint := func(e Endpoint) (netip.AddrPort, error) {
		a := e.AddrPort.Addr()
		if !a.IsValid() || a.IsUnspecified() || a.Zone() != "" {
			return netip.AddrPort{}, fmt.Errorf("pool %q: target %v: want an IP address without zone", pool, e.AddrPort)
		}
		port := e.AddrPort.Port()
		if port == 0 {
			if port = ck.DefaultPort(); port == 0 {
				return netip.AddrPort{}, fmt.Errorf("pool %q: target %v: no port, and check %q has none", pool, e.AddrPort, ck.Name)
			}
		}
		return netip.AddrPortFrom(a.Unmap(), port), nil
	}
	gone := make(map[netip.AddrPort]bool, len(remove))
	for _, e := range remove {
		ap, err := endpoint(e)
		if err != nil {
			return nil, err
		}
		gone[ap] = true
	}
	listed := len(add)
	for _, p := range c.Pools {
		listed += len(p.Members)
	}
	x := &expander{limit: DefaultMaxTargets, shard: c.Shard, entries: make([]entry, 0, listed)}
	cp := *c // checks, remediations, metrics, shard, files: as they are
	out := &cp
	out.Pools = make([]*Pool, len(c.Pools))
	for i, p := range c.Pools {
		np := *p
		out.Pools[i] = &np
		chk := c.Checks[p.CheckIndex]
		start := len(x.entries)
		d := 0
		for _, id := range p.Members {
			for d < len(p.Disabled) && p.Disabled[d] < id {
				d++
			}
			t := c.Targets[id]
			if i == pi && gone[t.AddrPort()] {
				continue
			}
			x.add(t.Addr, t.Port, c.Hostnames[id], uint16(p.CheckIndex), chk)
			if d < len(p.Disabled) && p.Disabled[d] == id {
				x.entries[len(x.entries)-1].flags |= flagDisabled
			}
		}
		if i == pi {
			for _, e := range add {
				ap, err := endpoint(e)
				if err != nil {
					return nil, err
				}
				if x.listed >= x.limit {
					return nil, fmt.Errorf("pool %q: %v brings the number of targets over the limit of %d", pool, ap, x.limit)
				}
				x.add(ap.Addr(), ap.Port(), e.Host, uint16(p.CheckIndex), chk)
			}
		}
		x.pools = append(x.pools, poolRange{start, len(x.entries)})
	}
	out.Targets, out.Hostnames = x.dedup(out.Pools)
	return out, nil
}
