package server

import (
	"context"
	"log/slog"

	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
)

// observer turns engine results and transitions into metrics, events and log
// lines. It reads the running generation, whose pools' instruments are
// resolved in advance: the probe path does no label lookup and no
// allocation. An id the generation does not have (a target an edit removes,
// whose last results the engine may still apply) is not counted.
type observer struct {
	d     *Daemon
	debug bool
	// info is whether state changes are logged. Checked before the call,
	// so a daemon logging at warn does not box the arguments of a million
	// state changes at start-up (about 100 bytes of garbage each).
	info bool
}

// newObserver returns the observer of daemon d.
func newObserver(d *Daemon) observer {
	ctx := context.Background()
	return observer{d: d, debug: d.log.Enabled(ctx, slog.LevelDebug), info: d.log.Enabled(ctx, slog.LevelInfo)}
}

// Result counts a probe outcome for every pool of the target.
func (o *observer) Result(id uint32, r probe.Result) {
	g := o.d.cur.Load()
	if !g.has(id) {
		return
	}
	if pi := g.poolOf[id]; pi != noPool {
		o.count(g, int(pi), &r)
	}
	if len(g.morePool) > 0 {
		for _, pi := range g.morePool[id] {
			o.count(g, int(pi), &r)
		}
	}
	if o.debug {
		o.d.log.Debug("probe", "target", g.cfg.Targets[id].AddrPort(), "check", g.checkName(id),
			"outcome", r.Outcome, "latency", r.Latency, "status", r.Status)
	}
}

func (o *observer) count(g *generation, pi int, r *probe.Result) {
	in := g.obs[pi]
	in.probes[r.Outcome].Inc()
	in.duration.Observe(r.Latency.Seconds())
}

// report records the detail of a one-shot probe of the stream led by id: the
// last error for the API and the HTTP phase timings of every pool that lists
// a member of the stream.
func (o *observer) report(id uint32, r *probe.Report) {
	g := o.d.cur.Load()
	if !g.has(id) {
		return
	}
	g.errs.record(id, r)
	if r.Phases == (probe.Phases{}) {
		return
	}
	ph := [len(phaseNames)]float64{r.Phases.Connect.Seconds(), r.Phases.TLS.Seconds(), r.Phases.FirstByte.Seconds(), r.Phases.LastByte.Seconds()}
	g.streamPoolsOf(id, func(pi int) {
		for i, v := range ph {
			if v > 0 {
				g.obs[pi].phases[i].Observe(v)
			}
		}
	})
}

// Transition records a state change: a counter per pool, an event for the
// API and an info log line.
func (o *observer) Transition(e scheduler.Event) {
	g := o.d.cur.Load()
	if !g.has(e.Target) {
		return
	}
	t := g.cfg.Targets[e.Target]
	ev := Event{
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
	}
	if e.Outcome == probe.Success {
		ev.Message = ""
	}
	g.poolsOf(e.Target, func(pi int) {
		ev.Pools = append(ev.Pools, g.cfg.Pools[pi].Name)
		g.obs[pi].changes[e.To].Inc()
	})
	o.d.events.add(ev)
	if o.info {
		o.d.log.Info("state change", "target", ev.Target, "pool", ev.Pools, "check", ev.Check,
			"from", ev.From, "to", ev.To, "reason", ev.Reason, "consecutive", ev.Streak)
	}
}

// checkName returns the name of target id's check.
func (g *generation) checkName(id uint32) string { return g.cfg.Checks[g.cfg.Targets[id].Check].Name }
