package config

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/model/labels"

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
	x := &expander{limit: s.maxTargets, shard: s.Shard, entries: make([]entry, 0, len(s.Targets)+extra)}
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
		start := len(x.entries)
		d := 0
		for pos, id := range p.Members {
			for d < len(p.Disabled) && p.Disabled[d] < id {
				d++
			}
			t := s.Targets[id]
			x.labels = x.intern(p.MemberLabels(pos))
			if x.add(t.Addr(), t.Port, s.Hostnames[id], uint16(p.CheckIndex), chk) && d < len(p.Disabled) && p.Disabled[d] == id {
				x.entries[len(x.entries)-1].flags |= flagDisabled
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
			x.labels = x.intern(t.Labels)
			if x.add(t.Addr, port, t.Host, uint16(p.CheckIndex), chk) && p.disables(t.Addr, port, t.Host) {
				x.entries[len(x.entries)-1].flags |= flagDisabled
			}
		}
		x.pools = append(x.pools, poolRange{start, len(x.entries)})
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out.Targets, out.Hostnames = x.dedup(out.Pools)
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

// HasMember reports whether target id is a member of the pool.
func (p *Pool) HasMember(id uint32) bool {
	_, ok := slices.BinarySearch(p.Members, id)
	return ok
}

// disables reports whether the pool's disabled list names a found target.
func (p *Pool) disables(a netip.Addr, port uint16, host string) bool {
	if _, ok := slices.BinarySearchFunc(p.disabledEPs, netip.AddrPortFrom(a, port), netip.AddrPort.Compare); ok {
		return true
	}
	return host != "" && slices.Contains(p.disabledHosts, host)
}

// intern returns the index of label set ls among the expander's label sets,
// adding it when new; the empty set is 0. Sets are found by their hash: a
// collision of two different sets only keeps them apart.
func (x *expander) intern(ls labels.Labels) uint32 {
	if ls.IsEmpty() {
		return 0
	}
	h := ls.Hash()
	if i, ok := x.labelIdx[h]; ok && labels.Equal(x.labelSets[i], ls) {
		return i
	}
	if x.labelIdx == nil {
		x.labelIdx = map[uint64]uint32{}
		x.labelSets = []labels.Labels{labels.EmptyLabels()}
	}
	i := uint32(len(x.labelSets))
	x.labelSets = append(x.labelSets, ls)
	if _, ok := x.labelIdx[h]; !ok {
		x.labelIdx[h] = i
	}
	return i
}

// setPoolLabels gives a deduplicated pool its members' labels: the labels of
// each member's first listing in the pool (pairs of target id and label set,
// in listing order).
func (x *expander) setPoolLabels(p *Pool, pairs [][2]uint32) {
	p.labelOf, p.labelSets = nil, nil
	if len(x.labelSets) == 0 || len(pairs) == 0 {
		return
	}
	slices.SortStableFunc(pairs, func(a, b [2]uint32) int { return int(a[0]) - int(b[0]) })
	pairs = slices.CompactFunc(pairs, func(a, b [2]uint32) bool { return a[0] == b[0] })
	same := true
	for _, pr := range pairs {
		same = same && pr[1] == pairs[0][1]
	}
	if same {
		if pairs[0][1] != 0 {
			p.labelSets = []labels.Labels{x.labelSets[pairs[0][1]]}
		}
		return
	}
	p.labelSets = x.labelSets
	p.labelOf = make([]uint32, len(pairs))
	if x.setsSeen == nil {
		x.setsSeen = newBitset(len(x.labelSets))
	}
	names := map[string]bool{}
	for i, pr := range pairs {
		p.labelOf[i] = pr[1]
		if !x.setsSeen.has(pr[1]) {
			x.setsSeen.set(pr[1])
			x.labelSets[pr[1]].Range(func(l labels.Label) { names[l.Name] = true })
		}
	}
	for _, pr := range pairs {
		x.setsSeen.clear(pr[1])
	}
	p.labelNames = sortedKeys(names)
}

// LabelNames returns the names of the labels of the pool's members and
// unresolved targets, sorted, each once.
func (p *Pool) LabelNames() []string {
	seen := map[string]bool{}
	add := func(ls labels.Labels) {
		ls.Range(func(l labels.Label) { seen[l.Name] = true })
	}
	if p.labelOf != nil {
		for _, n := range p.labelNames {
			seen[n] = true
		}
	} else {
		for _, ls := range p.labelSets {
			add(ls)
		}
	}
	for _, u := range p.Unresolved {
		add(u.Labels)
	}
	return sortedKeys(seen)
}

// sortedKeys returns the keys of m, sorted.
func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
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
