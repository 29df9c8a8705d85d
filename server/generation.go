package server

import (
	"sync"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/server/remediate"
)

// generation is one configuration as the daemon runs it: the configuration,
// its pools and the launchers of its checks over the daemon's one engine.
// Every reload (and every pool update) makes a new generation and publishes
// it for readers at once; the engine and the probers carry on underneath.
// A generation is read-only once published.
//
// Its cfg is the configuration as the engine runs it: Targets and Hostnames
// are indexed by engine id, each target's Leader is the engine's leader of
// its stream, and pool members are engine ids. An id the engine has free is
// a placeholder in no pool: the zero address, disabled, leading itself.
type generation struct {
	cfg      *config.Config
	engine   *scheduler.Engine
	launch   *launchers
	pools    []*scheduler.Pool
	poolOf   []uint16            // per target, the first pool that lists it; noPool for none
	morePool map[uint32][]uint16 // targets listed by more than one pool: the others
	members  map[uint32][]uint32 // leaders of shared streams (P4): the other enabled members
	errs     *lastErrors         // why each failing stream failed, by leader id, for the API
	slots    []uint16            // per check, its index in the engine's checks
	targets  int                 // targets in use (cfg.Targets less the placeholders)
	obs      []*poolInstruments  // per pool, its per-result instruments
	remedies *remediate.Plan     // the configuration's remediations, for the daemon's manager
	loaded   time.Time
}

// noPool in generation.poolOf marks an id no pool lists.
const noPool = ^uint16(0)

// indexPools builds the scheduler pools and the target → pool index.
func (g *generation) indexPools() {
	cfg := g.cfg
	g.poolOf = make([]uint16, len(cfg.Targets))
	for i := range g.poolOf {
		g.poolOf[i] = noPool
	}
	g.morePool = map[uint32][]uint16{}
	for pi, p := range cfg.Pools {
		g.pools = append(g.pools, &scheduler.Pool{
			Name: p.Name,
			Policy: scheduler.PoolPolicy{
				MaxUnhealthyPercent: p.MaxUnhealthyPercent,
				FailOpen:            p.FailOpen,
				LatencyMargin:       p.LatencyMargin,
			},
			Members:  p.Members,
			Disabled: p.Disabled,
			Unprobed: !p.HealthChecks,
		})
		for _, id := range p.Members {
			if g.poolOf[id] == noPool {
				g.poolOf[id] = uint16(pi)
				continue
			}
			g.morePool[id] = append(g.morePool[id], uint16(pi))
		}
	}
	g.members = map[uint32][]uint32{}
	for id, t := range cfg.Targets {
		if !t.Addr.IsValid() {
			continue
		}
		g.targets++
		if t.Leader != uint32(id) && !t.Disabled {
			g.members[t.Leader] = append(g.members[t.Leader], uint32(id))
		}
	}
}

// streamPoolsOf calls fn for every pool that lists a member of the probe
// stream led by leader: the pools that see each of its probes.
func (g *generation) streamPoolsOf(leader uint32, fn func(pi int)) {
	g.poolsOf(leader, fn)
	for _, id := range g.members[leader] {
		g.poolsOf(id, fn)
	}
}

// lastError returns why the last probe of target id's stream failed, "" when
// it did not or nobody said. Probes run once per stream, so the error is
// kept under the stream's leader.
func (g *generation) lastError(id uint32) string {
	return g.errs.get(g.cfg.Targets[id].Leader)
}

// poolsOf calls fn for every pool that lists target id; none for an id the
// generation does not have.
func (g *generation) poolsOf(id uint32, fn func(pi int)) {
	if int(id) >= len(g.poolOf) || g.poolOf[id] == noPool {
		return
	}
	fn(int(g.poolOf[id]))
	for _, pi := range g.morePool[id] {
		fn(int(pi))
	}
}

// has reports whether the generation has a target with id.
func (g *generation) has(id uint32) bool {
	return int(id) < len(g.cfg.Targets) && g.cfg.Targets[id].Addr.IsValid()
}

// target returns the destination of target id for a one-shot prober, or
// the zero Target for an id the generation does not have.
func (g *generation) target(id uint32) probe.Target {
	if !g.has(id) {
		return probe.Target{}
	}
	t := g.cfg.Targets[id]
	return probe.Target{Addr: t.Addr, Port: t.Port, Host: g.cfg.Hostnames[id]}
}

// lastErrors keeps the most recent failure of each failing target, for the
// API. Probes of healthy targets cost one read lock.
type lastErrors struct {
	mu sync.RWMutex
	m  map[uint32]string
}

func (l *lastErrors) record(id uint32, r *probe.Report) {
	if r.Outcome == probe.Success {
		l.mu.RLock()
		_, had := l.m[id]
		l.mu.RUnlock()
		if had {
			l.mu.Lock()
			delete(l.m, id)
			l.mu.Unlock()
		}
		return
	}
	msg := r.Outcome.String()
	if r.Err != nil {
		msg = r.Err.Error()
	}
	l.mu.Lock()
	l.m[id] = msg
	l.mu.Unlock()
}

func (l *lastErrors) get(id uint32) string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.m[id]
}

// forget drops what is kept of removed targets, whose ids may be reused.
func (l *lastErrors) forget(ids []uint32) {
	if len(ids) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		delete(l.m, id)
	}
}
