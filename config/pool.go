package config

import (
	"crypto/sha256"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// Pool is a group of targets judged together (P1–P3) with one check.
type Pool struct {
	Name       string
	Check      string // name of the pool's check
	CheckIndex int    // index of the check in Config.Checks
	// Members are the ids of the pool's targets, ascending.
	Members []uint32
	// Disabled are the members the pool excludes from evaluation and from
	// its decisions (E6), ascending.
	Disabled []uint32
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

	index int // position in the file, for error messages
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
	limit       int
	shard       Shard
	dns         resolver
	adding      bool                         // expanding targets (not disabled entries): count them against limit
	listed      int                          // targets listed so far, in every shard
	entries     []entry                      // the shard's targets
	foreign     []entry                      // the current pool's targets of other shards, when it has disabled entries
	keepForeign bool                         // the current pool has disabled entries: keep foreign
	files       []string                     // targets files read
	sums        map[string][sha256.Size]byte // digests of what was read of them (Config.Sums)
	names       []string                     // host names, hostRef.name-1 indexes it
	nameIdx     map[string]uint32            // host name → index+1
	hostRefs    []hostRef
	pools       []poolRange
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
	if len(s.Targets) == 0 && s.TargetsFile == nil {
		return nil, fieldErr(field, "no targets; set targets or targets_file")
	}

	start, listed := len(x.entries), x.listed
	x.keepForeign = len(s.Disabled) > 0 && x.shard.Shards() > 1
	add := func(l loc, raw string) endpointFunc {
		return func(a netip.Addr, port uint16, name string) error {
			if x.listed >= x.limit {
				return l.errorf("%q brings the number of targets over the limit of %d", raw, x.limit)
			}
			x.add(a, port, name, uint16(ci), c)
			return nil
		}
	}
	x.adding = true
	for j, raw := range s.Targets {
		l := loc{field: fmt.Sprintf("%s.targets[%d]", field, j)}
		if err := x.expandSpec(l, raw, c, add(l, raw)); err != nil {
			return nil, err
		}
	}
	if s.TargetsFile != nil {
		l := loc{field: field + ".targets_file"}
		if err := x.expandFile(l.field, *s.TargetsFile, c, func(a netip.Addr, port uint16, name string) error {
			return add(l, netip.AddrPortFrom(a, port).String())(a, port, name)
		}); err != nil {
			return nil, err
		}
	}
	x.adding = false
	if x.listed == listed {
		return nil, fieldErr(field+".targets_file", "%q lists no targets", *s.TargetsFile)
	}
	x.pools = append(x.pools, poolRange{start, len(x.entries)})
	err := x.disable(field, s.Disabled, p, c, start)
	x.foreign, x.keepForeign = nil, false
	if err != nil {
		return nil, err
	}
	return p, nil
}

// add appends one entry when the shard owns it, and counts it.
func (x *expander) add(a netip.Addr, port uint16, name string, ci uint16, c *Check) {
	x.listed++
	hi, lo := addrHalves(a)
	if !x.shard.Owns(netip.AddrPortFrom(a, port)) {
		if x.keepForeign {
			x.foreign = append(x.foreign, entry{hi: hi, lo: lo, port: port})
		}
		return
	}
	e := entry{hi: hi, lo: lo, port: port, check: ci, class: uint16(c.Class), seq: uint32(len(x.entries))}
	if name != "" {
		idx, ok := x.nameIdx[name]
		if !ok {
			if x.nameIdx == nil {
				x.nameIdx = make(map[string]uint32)
			}
			x.names = append(x.names, name)
			idx = uint32(len(x.names))
			x.nameIdx[name] = idx
		}
		x.hostRefs = append(x.hostRefs, hostRef{seq: e.seq, name: idx})
		if c.HostNameMatters() {
			e.hkey = idx
		}
	}
	x.entries = append(x.entries, e)
}

// disable marks the pool's entries named by its disabled list. Every
// disabled endpoint must be a member of the pool.
func (x *expander) disable(field string, disabled []string, p *Pool, c *Check, start int) error {
	if len(disabled) == 0 {
		return nil
	}
	idx := make([]uint32, len(x.entries)-start)
	for i := range idx {
		idx[i] = uint32(start + i)
	}
	slices.SortFunc(idx, func(a, b uint32) int { return cmpEndpoint(&x.entries[a], &x.entries[b]) })
	slices.SortFunc(x.foreign, func(a, b entry) int { return cmpEndpoint(&a, &b) })
	for j, raw := range disabled {
		l := loc{field: fmt.Sprintf("%s.disabled[%d]", field, j)}
		err := x.expandSpec(l, raw, c, func(a netip.Addr, port uint16, _ string) error {
			if x.shard.Owns(netip.AddrPortFrom(a, port)) && x.markDisabled(idx, a, port) || x.isForeign(a, port) {
				return nil
			}
			ep := netip.AddrPortFrom(a, port).String()
			if ep != raw {
				ep += fmt.Sprintf(" (from %q)", raw)
			}
			return l.errorf("%s is not a member of pool %q", ep, p.Name)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// isForeign reports whether the current pool lists the endpoint (a, port) in
// another shard.
func (x *expander) isForeign(a netip.Addr, port uint16) bool {
	hi, lo := addrHalves(a)
	key := entry{hi: hi, lo: lo, port: port}
	_, found := slices.BinarySearchFunc(x.foreign, &key, func(e entry, k *entry) int { return cmpEndpoint(&e, k) })
	return found
}
