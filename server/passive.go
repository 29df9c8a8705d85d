package server

import (
	"fmt"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/passive"
	"github.com/sondeprobe/sonde/server/passivewatch"
	"github.com/sondeprobe/sonde/server/web/api"
)

// newPassiveWatch returns the daemon's passive evidence (package
// passivewatch), acting on the running engine and reporting its triggers.
func newPassiveWatch(d *Daemon) *passivewatch.Watch {
	return passivewatch.New(passivewatch.Options{
		Engine:    passiveEngine{d},
		OnTrigger: d.passiveTrigger,
		Logger:    d.log,
	})
}

// passiveEngine is the running engine, for the watch, which is made before
// it.
type passiveEngine struct{ d *Daemon }

func (e passiveEngine) Recheck(id uint32, gap time.Duration) bool {
	g := e.d.cur.Load()
	return g != nil && g.engine.Recheck(id, gap)
}

func (e passiveEngine) Evidence(id uint32, o probe.Outcome, at int64) bool {
	g := e.d.cur.Load()
	return g != nil && g.engine.Evidence(id, o, at)
}

// Config and PoolsOf make a generation the watch's passivewatch.Fleet.
func (g *generation) Config() *config.Config             { return g.cfg }
func (g *generation) PoolsOf(id uint32, fn func(pi int)) { g.poolsOf(id, fn) }

// passiveTrigger makes a trigger an event, marks it in the target's history
// and logs it at debug level. It runs on the watch's reading goroutine.
func (d *Daemon) passiveTrigger(tr passivewatch.Trigger) {
	g, ok := tr.Fleet.(*generation)
	if !ok || !g.has(tr.Target) {
		return
	}
	t := g.cfg.Targets[tr.Target]
	ev := api.Event{
		Kind:    api.KindPassive,
		Time:    scheduler.WallTime(g.engine.Clock(), tr.At),
		Target:  t.AddrPort().String(),
		Host:    g.cfg.Hostnames[tr.Target],
		Check:   g.checkName(tr.Target),
		To:      tr.Rule.Action.String(),
		Reason:  passiveReason(tr.Outcome),
		Streak:  tr.Rule.Failures,
		Message: passiveMessage(tr.Rule.Failures, tr.Span),
	}
	g.poolsOf(tr.Target, func(pi int) { ev.Pools = append(ev.Pools, g.cfg.Pools[pi].Name) })
	if tr.Rule.Action != passive.Eject {
		// Evidence the engine applies reaches the history through the
		// observer; a recheck or an observation is marked here.
		r := probe.Result{ID: tr.Target, Outcome: tr.Outcome, Done: tr.At, Passive: true}
		d.hist.Record(g.hist, tr.Target, &r, g.engine)
	}
	d.events.Add(ev)
	d.log.Debug("passive trigger", "target", ev.Target, "pool", ev.Pools, "check", ev.Check, "action", ev.To,
		"reason", ev.Reason, "failures", tr.Rule.Failures, "span", tr.Span, "accepted", tr.Accepted)
}

// passiveMessage says what made a trigger.
func passiveMessage(failures int, span time.Duration) string {
	if failures == 1 {
		return "a failed connection from this host"
	}
	return fmt.Sprintf("%d failed connections in a row from this host within %v", failures, span.Round(time.Millisecond))
}

// passiveReason names a failure as the observer does.
func passiveReason(o probe.Outcome) string {
	if o == probe.Timeout {
		return "timed_out"
	}
	return o.String()
}

// PassiveRuns reports whether the passive observer runs: a check asks for
// passive evidence and the observer could be opened.
func (d *Daemon) PassiveRuns() bool { return d.passive.Runs() }
