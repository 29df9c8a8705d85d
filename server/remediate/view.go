package remediate

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/scheduler"
)

// View is what one configuration generation shows the manager: the targets
// of each remediation's pools by address, and how to read their state. It is
// read-only once built.
type View struct {
	cfg    *config.Config
	status func(id uint32) scheduler.TargetStatus
	errs   func(id uint32) string
	clock  scheduler.Clock
	byName map[string][]entry
}

// entry is one target of a remediation's pool: a health-checked pool that
// lists it and does not disable it.
type entry struct {
	addr netip.Addr
	pool int // position in the remediation's Pools
	id   uint32
}

// NewView indexes cfg's remediations. status reads a target's state (the
// engine's Status), lastError why its last probe failed ("" when unknown);
// clock is the engine's, whose Nanotime the states' times are in.
func NewView(cfg *config.Config, clock scheduler.Clock, status func(id uint32) scheduler.TargetStatus, lastError func(id uint32) string) *View {
	v := &View{cfg: cfg, status: status, errs: lastError, clock: clock, byName: map[string][]entry{}}
	for _, r := range cfg.Remediations {
		v.byName[r.Name] = indexRemediation(cfg, r)
	}
	return v
}

// indexRemediation lists the targets r may act on, sorted by address and
// pool.
func indexRemediation(cfg *config.Config, r *config.Remediation) []entry {
	var out []entry
	for i, pi := range r.PoolIndex {
		p := cfg.Pools[pi]
		if !p.HealthChecks {
			continue // apps without health checks don't count (R2)
		}
		d := 0
		for _, id := range p.Members {
			for d < len(p.Disabled) && p.Disabled[d] < id {
				d++
			}
			if d < len(p.Disabled) && p.Disabled[d] == id {
				continue
			}
			out = append(out, entry{addr: cfg.Targets[id].Addr(), pool: i, id: id})
		}
	}
	slices.SortFunc(out, func(a, b entry) int {
		return cmp.Or(a.addr.Compare(b.addr), cmp.Compare(a.pool, b.pool), cmp.Compare(a.id, b.id))
	})
	return out
}

// Coverage is how many instances a remediation may act on.
type Coverage struct {
	Instances int `json:"instances"`            // addresses in its health-checked pools
	MultiPool int `json:"multi_pool_instances"` // of them, those in more than one of its pools: the multi-pool rule applies
}

// CoverageOf counts the instances r covers in cfg, for `sonde config check`.
func CoverageOf(cfg *config.Config, r *config.Remediation) Coverage {
	var c Coverage
	eachInstance(indexRemediation(cfg, r), func(group []entry) {
		c.Instances++
		if group[0].pool != group[len(group)-1].pool {
			c.MultiPool++
		}
	})
	return c
}

// eachInstance calls fn with the entries of each address in turn.
func eachInstance(entries []entry, fn func(group []entry)) {
	for i := 0; i < len(entries); {
		j := i + 1
		for j < len(entries) && entries[j].addr == entries[i].addr {
			j++
		}
		fn(entries[i:j])
		i = j
	}
}
