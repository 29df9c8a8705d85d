package server

import (
	"runtime"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/policy"
	"github.com/sondeprobe/sonde/server/events"
)

// durationBuckets suit probe times from sub-millisecond SYN round trips on a
// LAN to multi-second HTTP timeouts.
var durationBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// metrics are the daemon's instruments that live across reloads. Per-result
// instruments are resolved once per generation (see observer), never looked
// up by label on the probe path. Everything read from the engine (pool and
// target state, windows, scheduler and prober counters) is produced at scrape
// time by stateCollector, so removed targets and pools simply stop appearing.
type metrics struct {
	reg        *prometheus.Registry
	probes     *prometheus.CounterVec   // pool, protocol, outcome
	duration   *prometheus.HistogramVec // pool, protocol
	phases     *prometheus.HistogramVec // pool, phase
	changes    *prometheus.CounterVec   // pool, to
	routes     *prometheus.CounterVec   // pool, to
	reloads    *prometheus.CounterVec   // result
	reloadOK   prometheus.Gauge
	reloadTime prometheus.Gauge
	warnings   prometheus.Gauge

	local [probe.NumLocalCauses]prometheus.Counter // sonde_probe_local_errors_total by cause
}

// newMetrics creates the instruments and registers them, with the state
// collector and the Go and process collectors, on a new registry.
func newMetrics(d *Daemon) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sonde_probes_total",
			Help: "Probe outcomes applied to targets, by pool, protocol and outcome (success or the reason of the failure).",
		}, []string{"pool", "protocol", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sonde_probe_duration_seconds",
			Help:    "Probe latency: SYN round trip, connect time, or HTTP request to last byte; timeouts count as the timeout.",
			Buckets: durationBuckets,
		}, []string{"pool", "protocol"}),
		phases: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sonde_http_phase_duration_seconds",
			Help:    "Duration of the phases of HTTP probes: connect, tls, first_byte (request written to first response byte), last_byte (first to last byte).",
			Buckets: durationBuckets,
		}, []string{"pool", "phase"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sonde_state_changes_total",
			Help: "Target state changes, by pool and new state.",
		}, []string{"pool", "to"}),
		routes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sonde_route_changes_total",
			Help: "Route changes of pool members decided by the pool policy, by pool and new route: routed, removed, pending.",
		}, []string{"pool", "to"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sonde_config_reloads_total",
			Help: "Configuration reloads, by result (success or failure).",
		}, []string{"result"}),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sonde_config_last_reload_successful",
			Help: "1 when the last configuration load or reload succeeded, 0 when it was rejected and the previous configuration kept running.",
		}),
		reloadTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sonde_config_last_reload_success_timestamp_seconds",
			Help: "Time of the last successful configuration load.",
		}),
		warnings: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sonde_config_warnings",
			Help: "Warnings about the running configuration, logged at its load and shown on the status page: secret files and TLS keys other users can read.",
		}),
	}
	local := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sonde_probe_local_errors_total",
		Help: "Probes this host could not run or could not judge, by cause: descriptors, ports, buffers, permissions, capture (a reply may have been lost to a full capture ring), late (sent or watched too late by a busy host). They are no verdict on their targets.",
	}, []string{"cause"})
	for c := probe.CauseNone + 1; c < probe.NumLocalCauses; c++ {
		m.local[c] = local.WithLabelValues(c.String())
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sonde_build_info",
		Help: "sonde's version, the commit it was built from and its Go version; the value is 1.",
	}, []string{"version", "revision", "goversion"})
	build.WithLabelValues(d.opt.Version, d.opt.Revision, runtime.Version()).Set(1)
	shard := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sonde_shard_info",
		Help: "The slice of the targets this process probes: shard i of N (sonde run -shard i/N; 0 of 1 without it); the value is 1.",
	}, []string{"shard", "shards"})
	shard.WithLabelValues(strconv.Itoa(d.opt.Shard.Index), strconv.Itoa(d.opt.Shard.Shards())).Set(1)
	m.reg.MustRegister(m.probes, m.duration, m.phases, m.changes, local, m.routes, m.reloads, m.reloadOK, m.reloadTime, m.warnings, build, shard,
		&stateCollector{d: d},
		&targetCollector{d: d},
		&discoveryCollector{d: d},
		events.NewCollector(d.hooks, d.streams),
		d.adm.Collector(),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// poolProtocol names a pool's series of one protocol.
type poolProtocol struct{ pool, protocol string }

// forget deletes the series of pools that no longer exist, and those of the
// protocols pools no longer probe with.
func (m *metrics) forget(gone []string, moved []poolProtocol) {
	for _, name := range gone {
		l := prometheus.Labels{"pool": name}
		m.probes.DeletePartialMatch(l)
		m.duration.DeletePartialMatch(l)
		m.phases.DeletePartialMatch(l)
		m.changes.DeletePartialMatch(l)
		m.routes.DeletePartialMatch(l)
	}
	for _, pp := range moved {
		l := prometheus.Labels{"pool": pp.pool, "protocol": pp.protocol}
		m.probes.DeletePartialMatch(l)
		m.duration.DeletePartialMatch(l)
	}
}

// phaseNames are the label values of sonde_http_phase_duration_seconds, in
// the order of probe.Phases.
var phaseNames = [...]string{"connect", "tls", "first_byte", "last_byte"}

// poolInstruments are one pool's per-result instruments, resolved once.
type poolInstruments struct {
	probes   [probe.NumOutcomes]prometheus.Counter
	duration prometheus.Observer
	phases   [len(phaseNames)]prometheus.Observer
	changes  [3]prometheus.Counter // by scheduler.State
	routes   [3]prometheus.Counter // by policy.Route, up to Pending
}

// instruments resolves the per-result instruments of pool with protocol.
func (m *metrics) instruments(pool, protocol string) *poolInstruments {
	pi := &poolInstruments{duration: m.duration.WithLabelValues(pool, protocol)}
	for o := range probe.NumOutcomes {
		pi.probes[o] = m.probes.WithLabelValues(pool, protocol, o.String())
	}
	for i, ph := range phaseNames {
		pi.phases[i] = m.phases.WithLabelValues(pool, ph)
	}
	for st := scheduler.Unknown; st <= scheduler.Unhealthy; st++ {
		pi.changes[st] = m.changes.WithLabelValues(pool, st.String())
	}
	for r := policy.Routed; r <= policy.Pending; r++ {
		pi.routes[r] = m.routes.WithLabelValues(pool, r.String())
	}
	return pi
}
