package server

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/server/remediate"
)

// generation is one loaded configuration at work: its probers, its engine and
// its pools. A reload builds a new generation and retires the old one. The
// fields are read-only once built, except where noted.
type generation struct {
	cfg      *config.Config
	engine   *scheduler.Engine
	router   *scheduler.Router // built by start, after any Restore
	obs      *observer
	launch   *launchers
	pools    []*scheduler.Pool
	poolOf   []uint16            // per target, the first pool that lists it
	morePool map[uint32][]uint16 // targets listed by more than one pool: the others
	members  map[uint32][]uint32 // leaders of shared streams (P4): the other enabled members
	errs     lastErrors          // why each failing stream failed, by leader id, for the API
	oneShots oneShotProbers      // probers of /probe requests
	certs    []atomic.Int64      // per stream leader, Unix time of the earliest certificate expiry seen; nil without HTTPS checks
	remedies *remediate.Plan     // the configuration's remediations, for the daemon's manager
	hist     *histIndex          // which targets have a ring in the daemon's history
	loaded   time.Time

	seq       uint64      // the daemon's count of loads when this one was built: cursors name it
	rankCache []rankCache // per pool, the latest latency ranking for the API

	cancel context.CancelFunc
	done   chan struct{}
}

// sink forwards results to the engine built after the probers that need a
// sink.
type sink struct{ e *scheduler.Engine }

func (s *sink) Deliver(r probe.Result) { s.e.Deliver(r) }

// buildGeneration builds probers, pools and an engine for cfg. obs receives
// the engine's results and transitions.
func buildGeneration(cfg *config.Config, opt *Options, obs *observer) (*generation, error) {
	g := &generation{cfg: cfg, loaded: opt.Clock.Now(), errs: lastErrors{m: map[uint32]string{}}, hist: newHistIndex(len(cfg.Targets))}
	g.indexPools()
	g.rankCache = make([]rankCache, len(g.pools))
	if slices.ContainsFunc(cfg.Checks, func(c *config.Check) bool { return c.Protocol == config.HTTPS }) {
		g.certs = make([]atomic.Int64, len(cfg.Targets))
	}
	ob := obs.forGeneration(g)
	g.obs = ob
	shards := opt.Shards
	if shards <= 0 {
		shards = runtime.GOMAXPROCS(0)
	}
	fwd := &sink{}
	ls, err := buildLaunchers(cfg, opt, fwd, opt.Clock, shards, ob.report)
	if err != nil {
		return nil, err
	}
	g.launch = ls
	checks := make([]scheduler.Check, len(cfg.Checks))
	for ci, c := range cfg.Checks {
		checks[ci] = scheduler.Check{Timing: c.Timing, Launcher: ls.byCheck[ci], FirstProbes: ls.firstProbes[ci]}
	}
	specs := make([]scheduler.TargetSpec, len(cfg.Targets))
	for id, t := range cfg.Targets {
		specs[id] = scheduler.TargetSpec{Check: t.Check, Leader: t.Leader, Disabled: t.Disabled}
	}
	e, err := scheduler.New(checks, specs, scheduler.Options{
		Shards:   shards,
		Clock:    opt.Clock,
		Observer: ob,
		Seed:     opt.Seed,
	})
	if err != nil {
		ls.close()
		return nil, fmt.Errorf("build scheduler: %w", err)
	}
	fwd.e = e
	g.engine = e
	return g, nil
}

// indexPools builds the scheduler pools and the target → pool index.
func (g *generation) indexPools() {
	cfg := g.cfg
	g.poolOf = make([]uint16, len(cfg.Targets))
	seen := make([]bool, len(cfg.Targets))
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
			if !seen[id] {
				seen[id] = true
				g.poolOf[id] = uint16(pi)
				continue
			}
			g.morePool[id] = append(g.morePool[id], uint16(pi))
		}
	}
	g.members = map[uint32][]uint32{}
	for id, t := range cfg.Targets {
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

// certExpiry returns the Unix time at which the earliest certificate that
// target id's stream last presented expires, 0 when none was seen.
func (g *generation) certExpiry(id uint32) int64 {
	if g.certs == nil {
		return 0
	}
	return g.certs[g.cfg.Targets[id].Leader].Load()
}

// poolsOf calls fn for every pool that lists target id.
func (g *generation) poolsOf(id uint32, fn func(pi int)) {
	fn(int(g.poolOf[id]))
	for _, pi := range g.morePool[id] {
		fn(int(pi))
	}
}

// decide takes the pools' decisions from the targets' current states (after
// any Restore), without events: the router that start runs.
func (g *generation) decide() {
	g.router = scheduler.NewRouter(g.engine, g.pools, scheduler.RouterOptions{Observer: g.obs})
}

// start runs the engine, the router and the worker pools until stop. decide
// has run.
func (g *generation) start() {
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	g.done = make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { g.engine.Run(ctx) })
	wg.Go(func() { g.router.Run(ctx) })
	wg.Go(func() { g.launch.run(ctx) })
	go func() {
		wg.Wait()
		close(g.done)
	}()
}

// stop ends the generation's engine and probers and waits for them.
func (g *generation) stop() error {
	if g.cancel != nil {
		g.cancel()
		<-g.done
	}
	return g.launch.close()
}

// carryOver gives every target of next that also exists in g — same address,
// port and check name, and the same probe definition — the state it has in
// g, and returns the pairs (id in g, id in next). g must be stopped. Targets
// are matched by sorting both sides, not with a map per target, so a reload
// of a million targets stays cheap.
func (g *generation) carryOver(next *generation) [][2]uint32 {
	key := func(cfg *config.Config, id uint32) (t config.Target, check string) {
		t = cfg.Targets[id]
		return t, cfg.Checks[t.Check].Name
	}
	compare := func(ca *config.Config, a uint32, cb *config.Config, b uint32) int {
		ta, na := key(ca, a)
		tb, nb := key(cb, b)
		return cmp.Or(ta.Addr.Compare(tb.Addr), cmp.Compare(ta.Port, tb.Port), cmp.Compare(na, nb))
	}
	order := func(cfg *config.Config) []uint32 {
		ids := make([]uint32, len(cfg.Targets))
		for i := range ids {
			ids[i] = uint32(i)
		}
		slices.SortFunc(ids, func(a, b uint32) int { return compare(cfg, a, cfg, b) })
		return ids
	}
	old, neu := order(g.cfg), order(next.cfg)
	probeKeys := map[[2]int]bool{} // (old check, new check) → same probe definition
	same := func(oc, nc uint16) bool {
		k := [2]int{int(oc), int(nc)}
		v, ok := probeKeys[k]
		if !ok {
			v = g.cfg.Checks[oc].ProbeKey() == next.cfg.Checks[nc].ProbeKey()
			probeKeys[k] = v
		}
		return v
	}
	var pairs [][2]uint32
	for i, j := 0, 0; i < len(old) && j < len(neu); {
		switch c := compare(g.cfg, old[i], next.cfg, neu[j]); {
		case c < 0:
			i++
		case c > 0:
			j++
		default:
			if same(g.cfg.Targets[old[i]].Check, next.cfg.Targets[neu[j]].Check) {
				next.engine.Restore(neu[j], g.engine.Save(old[i]))
				if exp := g.certExpiry(old[i]); exp != 0 && next.certs != nil {
					next.certs[next.cfg.Targets[neu[j]].Leader].Store(exp)
				}
				pairs = append(pairs, [2]uint32{old[i], neu[j]})
			}
			i++
			j++
		}
	}
	return pairs
}

// routeChanges reports, as events with reason "reload", every decision of
// next's router that differs from g's for the same target in a pool of the
// same name, and every pool that starts or stops failing open: a load
// balancer that follows events learns what a new policy (or a target newly
// disabled) changed. pairs are carryOver's; next has decided and is not
// running yet.
func (g *generation) routeChanges(next *generation, pairs [][2]uint32, add func(Event)) {
	oldPool := make(map[string]int, len(g.pools))
	for pi, p := range g.pools {
		oldPool[p.Name] = pi
	}
	now := next.engine.Clock().Now()
	for _, pr := range pairs {
		o, n := pr[0], pr[1]
		next.poolsOf(n, func(pi int) {
			name := next.pools[pi].Name
			opi, ok := oldPool[name]
			if !ok {
				return
			}
			om, found := slices.BinarySearch(g.pools[opi].Members, o)
			if !found {
				return
			}
			nm, _ := slices.BinarySearch(next.pools[pi].Members, n)
			from, _ := g.router.Route(opi, om)
			to, _ := next.router.Route(pi, nm)
			if from == to {
				return
			}
			add(Event{Kind: KindRoute, Time: now, Target: next.cfg.Targets[n].AddrPort().String(), Host: next.cfg.Hostnames[n],
				Pools: []string{name}, Check: next.checkName(n), From: from.String(), To: to.String(), Reason: "reload"})
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
			add(Event{Kind: KindFailOpen, Time: now, Pools: []string{p.Name}, From: from, To: to, Reason: "reload"})
		}
	}
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
