package config

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/sondeprobe/sonde/config/discovery"
	"github.com/sondeprobe/sonde/config/fleet"
)

// Pool is a group of targets judged together (P1–P3) with one check.
type Pool struct {
	Name       string
	Check      string // name of the pool's check
	CheckIndex int    // index of the check in Config.Checks
	// Membership holds the ids of the pool's targets (Members) and of
	// those it disables (Disabled, E6), and each member's labels.
	fleet.Membership
	// MaxUnhealthyPercent is the largest share of members the pool removes
	// at once (P1), 1..100. Default 50 with preset appservice, else 100.
	MaxUnhealthyPercent int
	// FailOpen keeps every member in service when all are unhealthy (P2).
	// Default true for presets appservice and frontdoor and for checks
	// without a preset, false for appgateway and globalaccelerator.
	FailOpen bool
	// LatencyMargin is the extra latency over the fastest healthy member
	// within which members are preferred (E7), 0 by default.
	LatencyMargin time.Duration
	// HealthChecks is false for a pool whose members are routed but never
	// probed: Front Door's origin group with health probes disabled, Global
	// Accelerator's endpoint group with health checks off. Default true.
	// Such a pool's enabled members are always routed; they do not count
	// for remediation (R2).
	HealthChecks bool
	// Labels are the pool's own labels: those of every target its files
	// list, and under those of every target it discovers.
	Labels labels.Labels
	// MetricLabels are the target labels exported on the pool's per-target
	// series, in the order given.
	MetricLabels []string
	// Discovery is where the pool's targets come from besides the
	// addresses its files list: its discovery sources and their relabeling,
	// and the host names its files list. See [Config.WithFound].
	Discovery discovery.Pool
	// Unresolved are targets the pool lists or discovers that it cannot
	// probe yet: host names without an address, and discovered targets its
	// check cannot probe (no port, another address family). They are shown
	// as unknown, never probed.
	Unresolved []discovery.Unresolved

	// The pool's disabled entries, to match the targets it discovers
	// against: endpoints, sorted, and host names.
	disabledEPs   []netip.AddrPort
	disabledHosts []string

	index int // position in the file, for error messages
}

// Renumbered returns a copy of p whose members and disabled members are
// those of p with their ids mapped by idOf (which must be one to one),
// each member keeping its labels.
func (p *Pool) Renumbered(idOf func(uint32) uint32) *Pool {
	np := *p
	np.Membership = p.Membership.Renumbered(idOf)
	return &np
}

// LabelNames returns the names of the labels of the pool's members and
// unresolved targets, sorted, each once.
func (p *Pool) LabelNames() []string {
	more := make([]labels.Labels, len(p.Unresolved))
	for i, u := range p.Unresolved {
		more[i] = u.Labels
	}
	return p.Membership.LabelNames(more...)
}

// Validate reports the first pool setting out of its range.
func (p *Pool) Validate() error {
	field := fmt.Sprintf("pools[%d]", p.index)
	if !validName(p.Name) {
		return fieldErr(field+".name", "%q is not a valid name; want %s", p.Name, nameRule)
	}
	if err := checkInt(field+".max_unhealthy_percent", p.MaxUnhealthyPercent, intRange{1, 100}, ""); err != nil {
		return err
	}
	return checkDur(field+".latency_margin", p.LatencyMargin, gapRange, "")
}

// expander expands the target entries of the pools into entries.
//
// With a shard, only the shard's targets become entries; every target is
// still counted against the limit and checked, so a file is valid or not
// alike in every shard. A pool's other targets are kept while its disabled
// entries are checked (each must be a member), in foreign, and only for a
// pool that has any.
type expander struct {
	dir         string
	ctx         context.Context // bounds the reading of targets files
	limit       int
	shard       Shard
	dns         resolver
	kinds       kindLookup                   // the discovery kinds built in
	adding      bool                         // expanding targets (not disabled entries): count them against limit
	listed      int                          // targets listed so far, in every shard
	b           fleet.Builder                // the shard's targets
	foreign     []netip.AddrPort             // the current pool's targets of other shards, when it has disabled entries
	keepForeign bool                         // the current pool has disabled entries: keep foreign
	files       []string                     // targets files read
	sums        map[string][sha256.Size]byte // digests of what was read of them (Config.Sums)
}

// addPool resolves pool i, expands its targets and marks its disabled ones.
func (x *expander) addPool(i int, s *PoolSpec, checks []*Check, prev []*Pool) (*Pool, error) {
	field := fmt.Sprintf("pools[%d]", i)
	if s == nil {
		return nil, fieldErr(field, "empty entry")
	}
	if s.Name == nil {
		return nil, fieldErr(field+".name", "missing")
	}
	for j, q := range prev {
		if q.Name == *s.Name {
			return nil, fieldErr(field+".name", "%q is already the name of pools[%d]", *s.Name, j)
		}
	}
	if s.Check == nil {
		return nil, fieldErr(field+".check", "missing")
	}
	ci := slices.IndexFunc(checks, func(c *Check) bool { return c.Name == *s.Check })
	if ci < 0 {
		return nil, fieldErr(field+".check", "%q is not a defined check", *s.Check)
	}
	c := checks[ci]
	preset := defaultPreset
	if c.Preset != "" {
		preset, _ = LookupPreset(c.Preset)
	}
	p := &Pool{
		Name:                *s.Name,
		Check:               c.Name,
		CheckIndex:          ci,
		MaxUnhealthyPercent: pick(s.MaxUnhealthyPercent, preset.MaxUnhealthyPercent),
		FailOpen:            pick(s.FailOpen, preset.FailOpen),
		LatencyMargin:       pickDur(s.LatencyMargin, 0),
		HealthChecks:        pick(s.HealthChecks, true),
		index:               i,
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := x.discoveryOf(p, s, c, field); err != nil {
		return nil, err
	}
	if len(s.Targets) == 0 && s.TargetsFile == nil && len(p.Discovery.Sources) == 0 {
		return nil, fieldErr(field, "no targets; set targets, targets_file or a discovery list (%s)", sdKeyList())
	}

	start, listed := x.b.Len(), x.listed
	x.keepForeign = len(s.Disabled) > 0 && x.shard.Shards() > 1
	x.b.SetLabels(p.Labels)
	defer x.b.SetLabels(labels.EmptyLabels())
	add := func(l loc, raw string) endpointFunc {
		return func(a netip.Addr, port uint16, name string) error {
			if x.listed >= x.limit {
				return l.errorf("%q brings the number of targets over the limit of %d", raw, x.limit)
			}
			x.add(a, port, name, uint16(ci), c)
			return nil
		}
	}
	named := func(l loc, raw string) nameFunc {
		return func(host string, port uint16) error {
			if x.listed >= x.limit {
				return l.errorf("%q brings the number of targets over the limit of %d", raw, x.limit)
			}
			x.listed++
			res := x.dns.lookup(host, p.Discovery.Family)
			p.Discovery.Names = append(p.Discovery.Names, discovery.Name{Host: host, Port: port, Seed: &res})
			return nil
		}
	}
	x.adding = true
	for j, raw := range s.Targets {
		l := loc{field: fmt.Sprintf("%s.targets[%d]", field, j)}
		if err := x.expandSpec(l, raw, c, add(l, raw), named(l, raw)); err != nil {
			return nil, err
		}
	}
	if s.TargetsFile != nil {
		l := loc{field: field + ".targets_file"}
		if err := x.expandFile(l.field, *s.TargetsFile, c, func(a netip.Addr, port uint16, name string) error {
			return add(l, netip.AddrPortFrom(a, port).String())(a, port, name)
		}, func(host string, port uint16) error {
			return named(l, host)(host, port)
		}); err != nil {
			return nil, err
		}
	}
	x.adding = false
	if x.listed == listed && s.TargetsFile != nil && len(s.Targets) == 0 && len(p.Discovery.Sources) == 0 {
		return nil, fieldErr(field+".targets_file", "%q lists no targets", *s.TargetsFile)
	}
	x.b.EndPool(start)
	err := x.disable(field, s.Disabled, p, c, start)
	x.foreign, x.keepForeign = nil, false
	if err != nil {
		return nil, err
	}
	return p, nil
}

// discoveryOf reads the pool's labels, metric labels, discovery sources and
// relabeling, and the families its host names resolve to.
func (x *expander) discoveryOf(p *Pool, s *PoolSpec, c *Check, field string) error {
	var err error
	if p.Labels, err = poolLabels(s.Labels, field+".labels"); err != nil {
		return err
	}
	if p.MetricLabels, err = metricLabels(s.MetricLabels, field+".metric_labels"); err != nil {
		return err
	}
	d := discovery.Pool{Name: p.Name, Labels: p.Labels, Family: c.family()}
	if d.Sources, err = decodeSources(s, field, x.dir, x.kinds); err != nil {
		return err
	}
	if d.Relabel, err = decodeRelabel(s.RelabelConfigs, field+".relabel_configs"); err != nil {
		return err
	}
	if len(d.Relabel) > 0 && len(d.Sources) == 0 {
		return fieldErr(field+".relabel_configs", "set without a discovery list; relabeling applies to discovered targets (%s)", sdKeyList())
	}
	p.Discovery = d
	return nil
}

// add appends one entry, with the current labels, when the shard owns it,
// and counts it. It reports whether it appended one.
func (x *expander) add(a netip.Addr, port uint16, name string, ci uint16, c *Check) bool {
	x.listed++
	ep := netip.AddrPortFrom(a, port)
	if !x.shard.Owns(ep) {
		if x.keepForeign {
			x.foreign = append(x.foreign, ep)
		}
		return false
	}
	x.b.Add(a, port, name, ci, uint16(c.Class), c.HostNameMatters())
	return true
}

// disable marks the pool's entries named by its disabled list, and keeps
// the list for the targets the pool will discover ([Config.WithFound]).
// Every disabled entry must name a member of the pool, or one of its host
// names; in a pool with discovery sources it may name targets not found
// yet.
func (x *expander) disable(field string, disabled []string, p *Pool, c *Check, start int) error {
	if len(disabled) == 0 {
		return nil
	}
	idx := x.b.ByEndpoint(start)
	slices.SortFunc(x.foreign, netip.AddrPort.Compare)
	discovers := len(p.Discovery.Sources) > 0
	for j, raw := range disabled {
		l := loc{field: fmt.Sprintf("%s.disabled[%d]", field, j)}
		err := x.expandSpec(l, raw, c, func(a netip.Addr, port uint16, _ string) error {
			ap := netip.AddrPortFrom(a, port)
			p.disabledEPs = append(p.disabledEPs, ap)
			if x.shard.Owns(ap) && x.b.MarkDisabled(idx, a, port) || x.isForeign(a, port) || discovers {
				return nil
			}
			if slices.ContainsFunc(p.Discovery.Names, func(n discovery.Name) bool {
				return n.Seed != nil && slices.Contains(n.Seed.Addrs, a) && n.Port == port
			}) {
				return nil
			}
			ep := ap.String()
			if ep != raw {
				ep += fmt.Sprintf(" (from %q)", raw)
			}
			return l.errorf("%s is not a member of pool %q", ep, p.Name)
		}, func(host string, port uint16) error {
			// A name disables its own targets and those of its addresses.
			p.disabledHosts = append(p.disabledHosts, host)
			res := x.dns.lookup(host, p.Discovery.Family)
			member := discovers || res.Err != nil || slices.ContainsFunc(p.Discovery.Names, func(n discovery.Name) bool { return n.Host == host })
			for _, a := range res.Addrs {
				ap := netip.AddrPortFrom(a, port)
				p.disabledEPs = append(p.disabledEPs, ap)
				member = member || x.shard.Owns(ap) && x.b.MarkDisabled(idx, a, port) || x.isForeign(a, port) ||
					slices.ContainsFunc(p.Discovery.Names, func(n discovery.Name) bool {
						return n.Seed != nil && slices.Contains(n.Seed.Addrs, a) && n.Port == port
					})
			}
			if member {
				return nil
			}
			return l.errorf("%s is not a member of pool %q", raw, p.Name)
		})
		if err != nil {
			return err
		}
	}
	slices.SortFunc(p.disabledEPs, netip.AddrPort.Compare)
	return nil
}

// isForeign reports whether the current pool lists the endpoint (a, port) in
// another shard.
func (x *expander) isForeign(a netip.Addr, port uint16) bool {
	_, found := slices.BinarySearchFunc(x.foreign, netip.AddrPortFrom(a, port), netip.AddrPort.Compare)
	return found
}

// build deduplicates the entries into the table ([fleet.Builder.Build]),
// giving pools their members.
func (x *expander) build(pools []*Pool) ([]Target, map[uint32]string) {
	ms := make([]*fleet.Membership, len(pools))
	for i, p := range pools {
		ms[i] = &p.Membership
	}
	return x.b.Build(ms, func(i int) bool { return pools[i].HealthChecks })
}
