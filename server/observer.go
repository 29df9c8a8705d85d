package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/policy"
	"github.com/sondeprobe/sonde/server/web/api"
)

// observer turns engine results and transitions into metrics, events and log
// lines. It reads the running generation, whose pools' instruments are
// resolved in advance: the probe path does no label lookup and no
// allocation. An id the generation does not have (a target an edit removes,
// whose last results the engine may still apply) is not counted.
type observer struct {
	d     *Daemon
	debug bool
	// info is whether state, route and preference changes are logged.
	// Checked before the call,
	// so a daemon logging at warn does not box the arguments of a million
	// state changes at start-up (about 100 bytes of garbage each).
	info bool
}

// newObserver returns the observer of daemon d.
func newObserver(d *Daemon) observer {
	ctx := context.Background()
	return observer{d: d, debug: d.log.Enabled(ctx, slog.LevelDebug), info: d.log.Enabled(ctx, slog.LevelInfo)}
}

// Result counts a probe outcome for every pool of the target and keeps it
// in the target's history when it has one.
func (o *observer) Result(id uint32, r probe.Result) {
	g := o.d.cur.Load()
	if !g.has(id) {
		return
	}
	o.d.hist.Record(g.hist, id, &r, g.engine)
	if r.Passive {
		// Passive evidence the engine applied (the eject action): no
		// probe, so not counted as one; its trigger is counted and
		// reported where it was made.
		return
	}
	if r.Outcome == probe.LocalError {
		o.localError(g, id, &r)
	}
	if pi := g.router.FirstPool(id); pi >= 0 {
		o.count(g, pi, &r)
	}
	for _, pi := range g.router.MorePools(id) {
		o.count(g, int(pi), &r)
	}
	if o.debug {
		o.d.log.Debug("probe", "target", g.cfg.Targets[id].AddrPort(), "check", g.checkName(id),
			"outcome", r.Outcome, "cause", r.Cause, "latency", r.Latency, "status", r.Status, "retransmits", r.Retransmits)
	}
}

func (o *observer) count(g *generation, pi int, r *probe.Result) {
	in := g.inst[pi]
	in.probes[r.Outcome].Inc()
	in.duration.Observe(r.Latency.Seconds())
}

// localError counts a probe this host could not run and logs it, at most
// once every localLogEvery with the number of others since.
func (o *observer) localError(g *generation, id uint32, r *probe.Result) {
	if r.Cause < probe.NumLocalCauses {
		if c := o.d.metrics.local[r.Cause]; c != nil {
			c.Inc()
		}
	}
	skipped, ok := o.d.local.Allow(time.Now())
	if !ok {
		return
	}
	o.d.log.Warn("probe could not run on this host; the target keeps its state", "cause", r.Cause,
		"target", g.cfg.Targets[id].AddrPort(), "check", g.checkName(id), "err", g.lastError(id),
		"not_logged_since", skipped)
}

// localLogEvery is how often local errors are logged at most.
const localLogEvery = 10 * time.Second

// report records the detail of a one-shot probe of the stream led by id: the
// last error for the API, the earliest certificate expiry, and the HTTP
// phase timings of every pool that lists a member of the stream.
func (o *observer) report(id uint32, r *probe.Report) {
	g := o.d.cur.Load()
	if !g.has(id) {
		return
	}
	g.errs.record(id, r)
	if g.certs != nil && !r.CertExpiry.IsZero() {
		g.certs[id].Store(r.CertExpiry.Unix())
	}
	if r.Phases == (probe.Phases{}) {
		return
	}
	ph := [len(phaseNames)]float64{r.Phases.Connect.Seconds(), r.Phases.TLS.Seconds(), r.Phases.FirstByte.Seconds(), r.Phases.LastByte.Seconds()}
	g.streamPoolsOf(id, func(pi int) {
		for i, v := range ph {
			if v > 0 {
				g.inst[pi].phases[i].Observe(v)
			}
		}
	})
}

// Transition records a state change: a counter per pool, an event for the
// API and an info log line; and it tells the router, whose decisions follow.
func (o *observer) Transition(e scheduler.Event) {
	g := o.d.cur.Load()
	if !g.has(e.Target) {
		return
	}
	t := g.cfg.Targets[e.Target]
	ev := api.Event{
		Kind:    api.KindState,
		Time:    scheduler.WallTime(g.engine.Clock(), e.At),
		Target:  t.AddrPort().String(),
		Host:    g.cfg.Hostnames[e.Target],
		Check:   g.checkName(e.Target),
		From:    e.From.String(),
		To:      e.To.String(),
		Reason:  e.Outcome.String(),
		Status:  int(e.Status),
		Streak:  e.Streak,
		Message: g.lastError(e.Target),
		Passive: e.Passive,
	}
	switch {
	case e.Outcome == probe.Success:
		ev.Message = ""
	case e.Passive:
		ev.Message = "failed connections of this host to the target (passive evidence)"
	}
	g.poolsOf(e.Target, func(pi int) {
		ev.Pools = append(ev.Pools, g.cfg.Pools[pi].Name)
		g.inst[pi].changes[e.To].Inc()
	})
	o.d.events.Add(ev)
	if r := g.router; r != nil {
		r.Notify(e.Target)
	}
	switch {
	case o.info && e.Passive:
		o.d.log.Info("state change", "target", ev.Target, "pool", ev.Pools, "check", ev.Check,
			"from", ev.From, "to", ev.To, "reason", ev.Reason, "consecutive", ev.Streak, "passive", true)
	case o.info:
		o.d.log.Info("state change", "target", ev.Target, "pool", ev.Pools, "check", ev.Check,
			"from", ev.From, "to", ev.To, "reason", ev.Reason, "consecutive", ev.Streak)
	}
}

// The From and To of "preferred" and "fail_open" events.
var (
	preferredNames = [2]string{"not_preferred", "preferred"}
	failOpenNames  = [2]string{"normal", "failing_open"}
)

func pick2(names [2]string, on bool) (from, to string) {
	if on {
		return names[0], names[1]
	}
	return names[1], names[0]
}

// routeObserver reports the route decisions of one generation's router,
// whose pool and target numbers are that generation's.
type routeObserver struct {
	o *observer
	g *generation
}

// Route records a decision of the pool policy: an event for the API, a
// counter and a log line. It runs on the router's goroutine.
func (ro *routeObserver) Route(e policy.RouteEvent) {
	o, g := ro.o, ro.g
	pool := g.cfg.Pools[e.Pool].Name
	ev := api.Event{
		Kind:   e.Kind.String(),
		Time:   scheduler.WallTime(g.engine.Clock(), e.At),
		Target: g.cfg.Targets[e.Target].AddrPort().String(),
		Host:   g.cfg.Hostnames[e.Target],
		Pools:  []string{pool},
		Check:  g.checkName(e.Target),
		Reason: e.Cause.String(),
	}
	switch e.Kind {
	case policy.RouteChanged:
		ev.From, ev.To = e.From.String(), e.To.String()
		if e.Cause == policy.CauseState {
			ev.Reason = e.State.String()
		}
		if int(e.To) < len(g.inst[e.Pool].routes) { // the router never routes to Excluded
			g.inst[e.Pool].routes[e.To].Inc()
		}
	case policy.PreferredChanged:
		ev.From, ev.To = pick2(preferredNames, e.On)
		if e.Cause == policy.CauseState {
			ev.Reason = e.State.String()
		}
	case policy.FailOpenChanged:
		ev.From, ev.To = pick2(failOpenNames, e.On)
		ev.Reason = e.State.String()
	}
	o.d.events.Add(ev)
	switch {
	case e.Kind == policy.FailOpenChanged && e.On:
		o.d.log.Warn("pool fails open: no target is healthy, every one stays in rotation", "pool", pool, "target", ev.Target, "reason", ev.Reason)
	case e.Kind == policy.FailOpenChanged:
		o.d.log.Info("pool no longer fails open", "pool", pool, "target", ev.Target, "reason", ev.Reason)
	case o.info && e.Kind == policy.RouteChanged:
		o.d.log.Info("route change", "pool", pool, "target", ev.Target, "from", ev.From, "to", ev.To, "reason", ev.Reason)
	case o.info && e.Kind == policy.PreferredChanged:
		o.d.log.Info("preference change", "pool", pool, "target", ev.Target, "from", ev.From, "to", ev.To, "reason", ev.Reason)
	}
}

// checkName returns the name of target id's check.
func (g *generation) checkName(id uint32) string { return g.cfg.Checks[g.cfg.Targets[id].Check].Name }
