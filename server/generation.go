package server

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/policy"
	"github.com/sondeprobe/sonde/server/apiv1"
	"github.com/sondeprobe/sonde/server/history"
	"github.com/sondeprobe/sonde/server/remediate"
	"github.com/sondeprobe/sonde/server/web/api"
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
	router   *policy.Router // the pools' decisions; built by decide
	launch   *launchers
	pools    []*policy.Pool
	members  map[uint32][]uint32 // leaders of shared streams (P4): the other enabled members
	errs     *lastErrors         // why each failing stream failed, by leader id, for the API
	slots    []uint16            // per check, its index in the engine's checks
	targets  int                 // targets in use (cfg.Targets less the placeholders)
	inst     []*poolInstruments  // per pool, its per-result instruments
	oneShots oneShotProbers      // probers of /probe requests
	certs    []atomic.Int64      // per stream leader, Unix time of the earliest certificate expiry seen; nil without HTTPS checks
	remedies *remediate.Plan     // the configuration's remediations, for the daemon's manager
	hist     *history.Index      // which targets have a ring in the daemon's history
	loaded   time.Time
	// targetDescs are the descriptors of the per-target series, with the
	// pools' metric_labels.
	targetDescs *targetDescs

	layout    uint32            // the pools' layout: the same while their names and order are (see cursor)
	rankCache []apiv1.RankCache // per pool, the latest latency ranking for the API

	cancel context.CancelFunc // stops the router
	done   chan struct{}      // closed when the router stopped
}

// indexPools builds the scheduler pools. Which pools list a target the
// generation's router tells (policy.Router.FirstPool, MorePools).
func (g *generation) indexPools() {
	cfg := g.cfg
	for _, p := range cfg.Pools {
		g.pools = append(g.pools, &policy.Pool{
			Name: p.Name,
			Policy: policy.PoolPolicy{
				MaxUnhealthyPercent: p.MaxUnhealthyPercent,
				FailOpen:            p.FailOpen,
				LatencyMargin:       p.LatencyMargin,
			},
			Members:  p.Members,
			Disabled: p.Disabled,
			Unprobed: !p.HealthChecks,
		})
	}
	g.members = map[uint32][]uint32{}
	for id, t := range cfg.Targets {
		if !t.Valid() {
			continue
		}
		g.targets++
		if t.Leader() != uint32(id) && !t.Disabled() {
			g.members[t.Leader()] = append(g.members[t.Leader()], uint32(id))
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
	return g.errs.get(g.cfg.Targets[id].Leader())
}

// certExpiry returns the Unix time at which the earliest certificate that
// target id's stream last presented expires, 0 when none was seen.
func (g *generation) certExpiry(id uint32) int64 {
	if g.certs == nil {
		return 0
	}
	return g.certs[g.cfg.Targets[id].Leader()].Load()
}

// keepCerts carries over the certificate expiries old saw, but those of
// removed, whose ids may be given to new targets.
func (g *generation) keepCerts(old *generation, removed []uint32) {
	if g.certs == nil || old == nil || old.certs == nil {
		return
	}
	for id := range min(len(g.certs), len(old.certs)) {
		g.certs[id].Store(old.certs[id].Load())
	}
	for _, id := range removed {
		if int(id) < len(g.certs) {
			g.certs[id].Store(0)
		}
	}
}

// decide takes the pools' decisions from the targets' current states,
// without events: the router that runRouter runs.
func (g *generation) decide(d *Daemon) {
	g.router = policy.NewRouter(g.engine, g.pools, policy.RouterOptions{Observer: &routeObserver{o: &d.obs, g: g}})
}

// runRouter runs the generation's router until stopRouter.
func (g *generation) runRouter() {
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel, g.done = cancel, make(chan struct{})
	go func() {
		defer close(g.done)
		g.router.Run(ctx)
	}()
}

// stopRouter stops the router and waits for it.
func (g *generation) stopRouter() {
	if g.cancel != nil {
		g.cancel()
		<-g.done
	}
}

// routeChanges reports, as events with reason "reload", every decision of
// next's router that differs from g's for a target both have (kept, the same
// engine id) in a pool of the same name, and every pool that starts or stops
// failing open: a load balancer that follows events learns what a new
// policy (or a target newly disabled) changed. next has decided.
func (g *generation) routeChanges(next *generation, kept []uint32, add func(api.Event)) {
	oldPool := make(map[string]int, len(g.pools))
	for pi, p := range g.pools {
		oldPool[p.Name] = pi
	}
	clock := next.engine.Clock()
	now := scheduler.WallTime(clock, clock.Nanotime()) // as the other events' times
	for _, id := range kept {
		next.poolsOf(id, func(pi int) {
			name := next.pools[pi].Name
			opi, ok := oldPool[name]
			if !ok {
				return
			}
			om, found := slices.BinarySearch(g.pools[opi].Members, id)
			if !found {
				return
			}
			nm, _ := slices.BinarySearch(next.pools[pi].Members, id)
			from, _ := g.router.Route(opi, om)
			to, _ := next.router.Route(pi, nm)
			if from == to {
				return
			}
			add(api.Event{Kind: api.KindRoute, Time: now, Target: next.cfg.Targets[id].AddrPort().String(), Host: next.cfg.Hostnames[id],
				Pools: []string{name}, Check: next.checkName(id), From: from.String(), To: to.String(), Reason: "reload"})
		})
	}
	for pi, p := range next.pools {
		opi, ok := oldPool[p.Name]
		if !ok {
			continue
		}
		was, is := g.router.Summary(opi).FailingOpen, next.router.Summary(pi).FailingOpen
		if was != is {
			from, to := pick2(failOpenNames, is)
			add(api.Event{Kind: api.KindFailOpen, Time: now, Pools: []string{p.Name}, From: from, To: to, Reason: "reload"})
		}
	}
}

// poolsOf calls fn for every pool that lists target id; none for an id the
// generation does not have.
func (g *generation) poolsOf(id uint32, fn func(pi int)) {
	pi := g.router.FirstPool(id)
	if pi < 0 {
		return
	}
	fn(pi)
	for _, pi := range g.router.MorePools(id) {
		fn(int(pi))
	}
}

// has reports whether the generation has a target with id.
func (g *generation) has(id uint32) bool {
	return int(id) < len(g.cfg.Targets) && g.cfg.Targets[id].Valid()
}

// target returns the destination of target id for a one-shot prober, or
// the zero Target for an id the generation does not have.
func (g *generation) target(id uint32) probe.Target {
	if !g.has(id) {
		return probe.Target{}
	}
	t := g.cfg.Targets[id]
	return probe.Target{Addr: t.Addr(), Port: t.Port, Host: g.cfg.Hostnames[id]}
}

// lastErrors keeps the most recent failure of each failing target, for the
// API. A probe of a target with no failure kept (most probes of a healthy
// fleet) reads one bit and takes no lock: failing marks the target's bit
// in failing, under mu, as the map changes.
type lastErrors struct {
	mu sync.RWMutex
	m  map[uint32]string // guarded by mu
	// failing has a bit set for each id with an entry in m; it is replaced
	// by a longer copy, under mu, when an id does not fit.
	failing atomic.Pointer[[]atomic.Uint64]
}

func (l *lastErrors) record(id uint32, r *probe.Report) {
	if r.Outcome == probe.Success {
		if !l.marked(id) {
			return
		}
		l.mu.Lock()
		delete(l.m, id)
		l.mark(id, false)
		l.mu.Unlock()
		return
	}
	msg := r.Outcome.String()
	if r.Err != nil {
		msg = r.Err.Error()
	}
	l.mu.Lock()
	l.m[id] = msg
	l.mark(id, true)
	l.mu.Unlock()
}

// marked reports whether id has its failing bit set. The results of one
// stream are recorded one after the other, so the bit of id is not
// changing while its own result reads it.
func (l *lastErrors) marked(id uint32) bool {
	bits := l.failing.Load()
	if bits == nil || int(id/64) >= len(*bits) {
		return false
	}
	return (*bits)[id/64].Load()&(1<<(id%64)) != 0
}

// mark sets or clears id's failing bit; l.mu is held.
func (l *lastErrors) mark(id uint32, on bool) {
	bits := l.failing.Load()
	w := int(id / 64)
	if bits == nil || w >= len(*bits) {
		if !on {
			return
		}
		n := w + 1
		if bits != nil {
			n = max(n, 2*len(*bits))
		}
		grown := make([]atomic.Uint64, n)
		if bits != nil {
			for i := range *bits {
				grown[i].Store((*bits)[i].Load())
			}
		}
		l.failing.Store(&grown)
		bits = &grown
	}
	if on {
		(*bits)[w].Or(1 << (id % 64))
	} else {
		(*bits)[w].And(^uint64(1 << (id % 64)))
	}
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
		l.mark(id, false)
	}
}

// daemonEndpoints gives the SYN prober the endpoints of the running
// generation's targets, by engine id, from the generation's own table: the
// prober keeps no copy. A generation is published before the engine probes
// the targets it adds, and the ids it frees are given out again only after
// the engine stopped probing them, so an id the prober is handed has its
// endpoint (or none, for a target just removed).
type daemonEndpoints struct{ d *Daemon }

// Len returns the number of ids of the running generation.
func (e daemonEndpoints) Len() int {
	g := e.d.cur.Load()
	if g == nil {
		return 0
	}
	return len(g.cfg.Targets)
}

// Endpoint16 returns the address and port of target id.
func (e daemonEndpoints) Endpoint16(id uint32) (*[16]byte, uint16) {
	g := e.d.cur.Load()
	if g == nil || int(id) >= len(g.cfg.Targets) {
		return nil, 0
	}
	t := &g.cfg.Targets[id]
	return t.IP16(), t.Port
}
