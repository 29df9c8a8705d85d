package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/config/discovery"
)

// Targets that come and go while the daemon runs — those of the pools'
// discovery sources and the addresses of the host names their files list —
// are followed by a discovery.Runner. A loaded configuration is kept as its
// files give it (d.static), and every configuration the engine runs is that
// one with what the runner found ([config.Config.WithFound]): a reload
// gives the runner the new pools (unchanged sources keep running and keep
// what they found) and applies the result once; a change the runner finds
// between reloads is applied the same way, as an edit of the running
// engine that keeps the state of every target it does not remove.

// withFound makes cfg, just loaded, the daemon's static configuration and
// returns it with what discovery finds now, and the version of what it
// found. Called with updateMu held.
func (d *Daemon) withFound(cfg *config.Config) (*config.Config, uint64, error) {
	static := cfg.Static()
	r := d.disc.Load()
	if r == nil && !static.Discovers() {
		// Nothing to find: the running generation is all there is, and
		// keeping the loaded configuration too would double its tables
		// after a reload (the generation's are renumbered copies).
		d.static, d.found = nil, 0
		return cfg, 0, nil
	}
	if r == nil {
		r = discovery.NewRunner(discovery.Options{
			Logger:        d.log.With("component", "discovery"),
			Resolver:      d.opt.Resolver,
			Changed:       d.discoveryChanged,
			Debounce:      d.opt.DiscoveryDebounce,
			MaxTargets:    config.DefaultMaxTargets,
			RelabelBudget: d.opt.RelabelBudget,
			ReportApplied: true,
		})
		d.disc.Store(r)
	}
	found, version := r.Update(static.DiscoveryPools())
	eff, err := static.WithFound(found)
	if err != nil {
		return nil, 0, err
	}
	d.static, d.found = static, version
	if !static.Discovers() {
		d.static = nil // as above: nothing more to find
	}
	return eff, version, nil
}

// applied tells the discovery runner, if any, that the engine runs the
// found targets of version. Called with updateMu held, after a load.
func (d *Daemon) applied(version uint64) {
	if r := d.disc.Load(); r != nil {
		r.Applied(version)
	}
}

// discoveryChanged applies what the runner found since the engine's
// configuration was made, if anything. The runner has relabeled it; the
// configuration is built from it without the engine's lock, which only the
// edit of the engine takes, and ctx ends that build when newer targets come
// (they are applied next) or when the daemon stops.
func (d *Daemon) discoveryChanged(ctx context.Context) {
	r := d.disc.Load()
	d.updateMu.Lock()
	static, running := d.static, d.found
	live := d.engine != nil && !d.stopped && r != nil && static != nil
	d.updateMu.Unlock()
	if !live {
		return
	}
	found, version := r.Found()
	if version == running {
		return
	}
	start := time.Now()
	d.mem.beforeLoad() // the edit's garbage, and the new targets' tables, as a reload's
	defer d.mem.afterLoad()
	eff, err := static.WithFoundContext(ctx, found)
	if ctx.Err() != nil {
		return // superseded, or stopping
	}
	d.updateMu.Lock()
	defer d.updateMu.Unlock()
	if d.stopped || d.static != static || d.found != running {
		return // a reload came first, with targets at least as new
	}
	if err == nil {
		var g *generation
		var added, removed int
		if g, added, removed, err = d.apply(eff); err == nil {
			d.found = version
			r.Applied(version)
			if added >= bigUpdate && added > g.targets/2 {
				d.mem.first() // most of the fleet arrived: return its load's garbage, as the first load does
			}
			d.log.Info("discovered targets applied", "added", added, "removed", removed, "targets", g.targets,
				"unresolved", unresolvedCount(g.cfg), "took", time.Since(start).Round(time.Millisecond))
			return
		}
	}
	d.found = version // retried when something changes again
	d.log.Error("discovered targets not applied; the running ones stay", "err", err)
}

// bigUpdate is the number of targets a discovery update must add, and
// more than half the fleet, for its garbage to be returned to the
// operating system at once (one forced collection), as the first load's
// is: a daemon that starts with its pools empty and finds its fleet a
// moment later would otherwise keep the garbage of reading and building it
// resident.
const bigUpdate = 100_000

// unresolvedCount counts the targets of cfg's pools that have no address.
func unresolvedCount(cfg *config.Config) int {
	n := 0
	for _, p := range cfg.Pools {
		n += len(p.Unresolved)
	}
	return n
}

var (
	descDiscHealthy = desc("sonde_discovery_source_healthy", "1 while a discovery source works, 0 while it fails (it keeps the targets it found last) or has not answered yet.", "pool", "source", "mechanism")
	descDiscTargets = desc("sonde_discovery_targets", "Targets a discovery source gives its pool, after relabeling.", "pool", "source")
	descDiscDropped = desc("sonde_discovery_dropped_targets", "Targets of a discovery source dropped by relabeling or for a bad address or labels.", "pool", "source")
	descDiscUpdates = desc("sonde_discovery_updates_total", "Updates a discovery source sent since it started.", "pool", "source")
	descDiscFails   = desc("sonde_discovery_failures_total", "Failures of a discovery source (refresh, read or watch errors) since it started.", "pool", "source")
	descDiscLast    = desc("sonde_discovery_last_update_timestamp_seconds", "Time of a discovery source's last update.", "pool", "source")
	descDiscRefused = desc("sonde_discovery_refused_updates_total", "Updates of a discovery source whose targets were not used (more than half of them invalid, or relabeling over its time budget): the source kept the targets it gave before.", "pool", "source")
)

// discoveryCollector exports the discovery sources' status at scrape time.
type discoveryCollector struct{ d *Daemon }

// Describe sends the discovery descriptors.
func (c *discoveryCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDiscHealthy, descDiscTargets, descDiscDropped, descDiscUpdates, descDiscFails, descDiscLast, descDiscRefused} {
		ch <- d
	}
}

// Collect reads the runner's status.
func (c *discoveryCollector) Collect(ch chan<- prometheus.Metric) {
	for _, ps := range c.d.discoveryStatus() {
		for _, s := range ps.Sources {
			healthy := 0.0
			if s.State == "ok" {
				healthy = 1
			}
			dropped := 0
			for _, n := range s.Dropped {
				dropped += n
			}
			ch <- prometheus.MustNewConstMetric(descDiscHealthy, prometheus.GaugeValue, healthy, ps.Pool, s.Source, s.Mechanism)
			ch <- prometheus.MustNewConstMetric(descDiscTargets, prometheus.GaugeValue, float64(s.Targets), ps.Pool, s.Source)
			ch <- prometheus.MustNewConstMetric(descDiscDropped, prometheus.GaugeValue, float64(dropped), ps.Pool, s.Source)
			ch <- prometheus.MustNewConstMetric(descDiscUpdates, prometheus.CounterValue, float64(s.Updates), ps.Pool, s.Source)
			ch <- prometheus.MustNewConstMetric(descDiscFails, prometheus.CounterValue, float64(s.Failures), ps.Pool, s.Source)
			ch <- prometheus.MustNewConstMetric(descDiscRefused, prometheus.CounterValue, float64(s.Refused), ps.Pool, s.Source)
			if s.LastUpdate != nil {
				ch <- prometheus.MustNewConstMetric(descDiscLast, prometheus.GaugeValue, float64(s.LastUpdate.UnixMilli())/1e3, ps.Pool, s.Source)
			}
		}
	}
}

// discoveryStatus returns how the pools' discovery is doing; none when no
// pool discovers.
func (d *Daemon) discoveryStatus() []discovery.PoolStatus {
	r := d.disc.Load()
	if r == nil {
		return nil
	}
	return r.Status()
}
