package server

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/syn"
	"github.com/sondeprobe/sonde/scheduler"
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descPoolTargets  = desc("sonde_pool_targets", "Targets of a pool by state: healthy, unhealthy, unknown (not yet decided), disabled, unprobed (health checks off: routed, never probed).", "pool", "state")
	descPoolRoutable = desc("sonde_pool_routable_targets", "Targets of a pool that receive traffic after the pool policy: healthy ones and unhealthy ones kept by max_unhealthy_percent or fail-open.", "pool")
	descPoolRemoved  = desc("sonde_pool_removed_targets", "Unhealthy targets of a pool taken out of rotation by the pool policy.", "pool")
	descPoolOpen     = desc("sonde_pool_failing_open", "1 while a pool has no healthy target and keeps all of them in rotation (fail open).", "pool")
	descFailWin      = desc("sonde_check_failure_window_seconds", "W1: longest time from the send of the first failing probe to unhealthy, t*k + i*(k-1) after completion, i*(k-1) + t at a fixed rate.", "check")
	descSuccessWin   = desc("sonde_check_success_window_seconds", "W2: longest time from the send of the first successful probe to healthy, with r = timeout.", "check")
	descOnsetWin     = desc("sonde_check_failure_window_from_onset_seconds", "W3: longest time from the onset of a failure to unhealthy, W1 plus one interval.", "check")
	descTargets      = desc("sonde_targets", "Targets: unique (address, port, check) after deduplication.")
	descStreams      = desc("sonde_probe_streams", "Probe streams after deduplication: targets sharing a probe count once.")
	descDispatched   = desc("sonde_scheduler_probes_dispatched_total", "Probes handed to probers.")
	descResults      = desc("sonde_scheduler_results_total", "Probe outcomes applied to targets (answers, timeouts, local errors): at most one per probe dispatched.")
	descTimeouts     = desc("sonde_scheduler_timeouts_total", "Probes that reached their timeout without an answer.")
	descStale        = desc("sonde_scheduler_stale_answers_total", "Answers dropped because their probe was no longer in flight.")
	descLate         = desc("sonde_scheduler_late_answers_total", "Answers dropped because they completed after the probe's timeout.")
	descOverflow     = desc("sonde_scheduler_ring_overflows_total", "Answers that found their shard's lock-free ring full and took the slower overflow path (never dropped).")
	descLateness     = desc("sonde_scheduler_lateness_seconds", "How long after its due time each probe was handed to its prober.")
	descWorkPending  = desc("sonde_workers_pending_probes", "One-shot probes (HTTP, connect) queued for a worker.", "check")
	descWorkFlight   = desc("sonde_workers_in_flight_probes", "One-shot probes running.", "check")
	descWorkLate     = desc("sonde_workers_skipped_late_total", "One-shot probes skipped because their deadline passed while queued (workers too few).")
	descTCPPath      = desc("sonde_tcp_probe_path", "1 for the prober that runs TCP checks: syn-bpf, syn-packet or connect.", "path")
	descSynSent      = desc("sonde_syn_packets_sent_total", "SYN probes handed to the kernel.")
	descSynErrors    = desc("sonde_syn_send_errors_total", "SYN probes the kernel refused or that could not be built.")
	descSynRetrans   = desc("sonde_syn_retransmits_total", "SYNs sent again for a probe without an answer after its retransmission timeout (syn_retransmit), included in sonde_syn_packets_sent_total.")
	descSynReplies   = desc("sonde_syn_replies_total", "Valid replies to SYN probes by kind: synack, rst, unreachable.", "kind")
	descSynInvalid   = desc("sonde_syn_invalid_cookies_total", "Replies whose cookie names no probe of ours (stray or forged), dropped.")
	descSynStale     = desc("sonde_syn_stale_replies_total", "Replies to an older probe of a target, dropped.")
	descSynDup       = desc("sonde_syn_duplicate_replies_total", "Second replies to an answered probe, dropped.")
	descSynDrops     = desc("sonde_syn_ring_drops_total", "Replies lost because the capture ring was full.")
	descSynAnswered  = desc("sonde_syn_rsts_answered_total", "SYN-ACKs the eBPF capture program answered with an RST itself (the others the kernel answered).")
	descHTTPConns    = desc("sonde_http_connections", "Open connections to the HTTP server.")
	descHTTPMax      = desc("sonde_http_connections_max", "Most connections the HTTP server keeps open (-web.max-connections, at most a quarter of the file descriptor limit).")
	descHTTPEvicted  = desc("sonde_http_connections_evicted_total", "Connections waiting for a request (idle, or still sending one) closed to make room for new ones at the connection limit.")
	descHTTPShed     = desc("sonde_http_connections_shed_total", "Connections busy in a request other than /metrics and the /-/ endpoints closed to make room for new ones at the connection limit.")
	descHTTPRefused  = desc("sonde_http_connections_refused_total", "New connections closed at once because every connection served /metrics or a /-/ endpoint.")
	descUnresolved   = desc("sonde_pool_unresolved_targets", "Targets of a pool it cannot probe yet: host names without an address, discovered targets without a port its check can use.", "pool")
)

// The per-target series. Their labels are pool, target and the pools'
// metric_labels (see targetCollector).
const (
	targetUpHelp  = "1 when the target is healthy, 0 when unhealthy; absent while undecided or disabled."
	targetLatHelp = "Smoothed latency of the target's successful probes."
	certHelp      = "Unix time at which the earliest certificate an HTTPS target presented in its last handshake expires."
)

// counterTotals accumulates the counters of probers a reload retired (a
// worker pool whose check went, a SYN prober replaced), so the exported
// counters keep growing.
type counterTotals struct {
	mu   sync.Mutex
	late uint64 // workers skipped late
	syn  syn.Counters
}

// retirePool adds the counters of a worker pool or loop launcher about to
// stop.
func (t *counterTotals) retirePool(w launcherStats) {
	late := w.Stats().SkippedLate
	t.mu.Lock()
	defer t.mu.Unlock()
	t.late += late
}

// retireSyn adds the counters of a SYN prober about to close.
func (t *counterTotals) retireSyn(p *syn.Prober) {
	c := p.Counters()
	t.mu.Lock()
	defer t.mu.Unlock()
	addSyn(&t.syn, c)
}

func addSyn(dst *syn.Counters, c syn.Counters) {
	dst.Sent += c.Sent
	dst.Retransmits += c.Retransmits
	dst.SendErrors += c.SendErrors
	dst.SynAck += c.SynAck
	dst.RST += c.RST
	dst.Unreachable += c.Unreachable
	dst.InvalidCookie += c.InvalidCookie
	dst.Stale += c.Stale
	dst.Duplicate += c.Duplicate
	dst.RingDrops += c.RingDrops
	dst.Answered += c.Answered
}

// stateCollector produces, at scrape time, everything read from the running
// generation.
type stateCollector struct{ d *Daemon }

// Describe sends every descriptor the collector may produce.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descPoolTargets, descPoolRoutable, descPoolRemoved, descPoolOpen, descFailWin, descSuccessWin, descOnsetWin,
		descTargets, descStreams, descDispatched, descResults, descTimeouts, descStale, descLate, descOverflow, descLateness,
		descWorkPending, descWorkFlight, descWorkLate, descTCPPath, descSynSent, descSynRetrans, descSynErrors, descSynReplies,
		descSynInvalid, descSynStale, descSynDup, descSynDrops, descSynAnswered, descUnresolved,
		descHTTPConns, descHTTPMax, descHTTPEvicted, descHTTPShed, descHTTPRefused,
	} {
		ch <- d
	}
}

// Collect reads the current generation.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	if lim := c.d.conns.Load(); lim != nil {
		open, evicted, shed, refused := lim.Counts()
		gauge(descHTTPConns, float64(open))
		gauge(descHTTPMax, float64(lim.Max()))
		counter(descHTTPEvicted, evicted)
		counter(descHTTPShed, shed)
		counter(descHTTPRefused, refused)
	}
	g := c.d.cur.Load()
	if g == nil {
		return
	}
	c.collectPools(g, gauge)
	for _, chk := range g.cfg.Checks {
		gauge(descFailWin, chk.FailureWindow().Seconds(), chk.Name)
		gauge(descSuccessWin, chk.SuccessWindow(chk.Timeout).Seconds(), chk.Name)
		gauge(descOnsetWin, chk.FailureWindowFromOnset().Seconds(), chk.Name)
	}
	gauge(descTargets, float64(g.targets))
	gauge(descStreams, float64(g.cfg.Streams()))

	t := &c.d.totals
	t.mu.Lock()
	late, sc := t.late, t.syn
	t.mu.Unlock()
	st := g.engine.Stats()
	counter(descDispatched, st.Dispatched)
	counter(descResults, st.Results)
	counter(descTimeouts, st.Timeouts)
	counter(descStale, st.Stale)
	counter(descLate, st.Late)
	counter(descOverflow, st.Overflows)
	ch <- latenessHistogram(&st)

	for ci, l := range g.launch.byCheck {
		w, ok := l.(launcherStats)
		if !ok {
			continue
		}
		ws := w.Stats()
		late += ws.SkippedLate
		name := g.cfg.Checks[ci].Name
		gauge(descWorkPending, float64(ws.Pending), name)
		gauge(descWorkFlight, float64(ws.InFlight), name)
	}
	counter(descWorkLate, late)
	for _, p := range probe.TCPPaths() {
		v := 0.0
		if p == g.launch.tcpPath {
			v = 1
		}
		gauge(descTCPPath, v, string(p))
	}
	if g.launch.syn != nil {
		addSyn(&sc, g.launch.syn.Counters())
	}
	counter(descSynSent, sc.Sent)
	counter(descSynRetrans, sc.Retransmits)
	counter(descSynErrors, sc.SendErrors)
	counter(descSynReplies, sc.SynAck, "synack")
	counter(descSynReplies, sc.RST, "rst")
	counter(descSynReplies, sc.Unreachable, "unreachable")
	counter(descSynInvalid, sc.InvalidCookie)
	counter(descSynStale, sc.Stale)
	counter(descSynDup, sc.Duplicate)
	counter(descSynDrops, sc.RingDrops)
	counter(descSynAnswered, sc.Answered)
}

func (c *stateCollector) collectPools(g *generation, gauge func(*prometheus.Desc, float64, ...string)) {
	for pi, p := range g.pools {
		s := g.router.Summary(pi)
		gauge(descPoolTargets, float64(s.Healthy), p.Name, "healthy")
		gauge(descPoolTargets, float64(s.Unhealthy), p.Name, "unhealthy")
		gauge(descPoolTargets, float64(s.Unknown), p.Name, "unknown")
		gauge(descPoolTargets, float64(s.Disabled), p.Name, "disabled")
		gauge(descPoolTargets, float64(s.Unprobed), p.Name, "unprobed")
		gauge(descPoolRoutable, float64(s.Routable), p.Name)
		gauge(descPoolRemoved, float64(s.Removed), p.Name)
		open := 0.0
		if s.FailingOpen {
			open = 1
		}
		gauge(descPoolOpen, open, p.Name)
		gauge(descUnresolved, float64(len(g.cfg.Pools[pi].Unresolved)), p.Name)
	}
}

// targetCollector produces the per-target series (metrics.per_target) at
// scrape time. Their labels are pool, target and the metric_labels of the
// configuration's pools, so they change with the configuration: the
// collector is unchecked (it describes nothing).
type targetCollector struct{ d *Daemon }

// Describe describes nothing: the series' labels follow the configuration.
func (c *targetCollector) Describe(chan<- *prometheus.Desc) {}

// targetDescs are the descriptors of the per-target series of one
// configuration: pool, target, then extra, the labels some pool exports.
type targetDescs struct {
	up, lat, cert *prometheus.Desc
	extra         []string
}

// newTargetDescs builds the per-target descriptors of pools.
func newTargetDescs(pools []*config.Pool) *targetDescs {
	var extra []string
	for _, p := range pools {
		for _, n := range p.MetricLabels {
			if !slices.Contains(extra, n) {
				extra = append(extra, n)
			}
		}
	}
	slices.Sort(extra)
	names := append([]string{"pool", "target"}, extra...)
	return &targetDescs{
		up:    desc("sonde_target_healthy", targetUpHelp, names...),
		lat:   desc("sonde_target_latency_seconds", targetLatHelp, names...),
		cert:  desc("sonde_tls_earliest_cert_expiry_seconds", certHelp, names...),
		extra: extra,
	}
}

// Collect reads the current generation's targets.
func (c *targetCollector) Collect(ch chan<- prometheus.Metric) {
	g := c.d.cur.Load()
	if g == nil || !g.cfg.Metrics.PerTarget {
		return
	}
	td := g.targetDescs
	values := make([]string, 2+len(td.extra))
	for pi, p := range g.pools {
		if p.Unprobed {
			continue
		}
		cp := g.cfg.Pools[pi]
		exported := len(cp.MetricLabels) > 0
		for i := range values {
			values[i] = ""
		}
		values[0] = p.Name
		pos := -1
		p.Each(func(id uint32, disabled bool) {
			pos++
			if disabled {
				return
			}
			st, exp := g.engine.Status(id), g.certExpiry(id)
			if st.State == scheduler.Unknown && exp == 0 {
				return
			}
			values[1] = g.cfg.Targets[id].AddrPort().String()
			if exported {
				ls := cp.MemberLabels(pos)
				for i, n := range td.extra {
					values[2+i] = ""
					if slices.Contains(cp.MetricLabels, n) {
						values[2+i] = ls.Get(n)
					}
				}
			}
			if exp != 0 {
				ch <- prometheus.MustNewConstMetric(td.cert, prometheus.GaugeValue, float64(exp), values...)
			}
			if st.State == scheduler.Unknown {
				return
			}
			up := 0.0
			if st.State == scheduler.Healthy {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(td.up, prometheus.GaugeValue, up, values...)
			if st.Smoothed > 0 {
				ch <- prometheus.MustNewConstMetric(td.lat, prometheus.GaugeValue, st.Smoothed.Seconds(), values...)
			}
		})
	}
}

// latenessHistogram turns the scheduler's lateness counts into a histogram.
func latenessHistogram(st *scheduler.Stats) prometheus.Metric {
	buckets := make(map[float64]uint64, len(scheduler.LatenessBuckets))
	var cum uint64
	for i, b := range scheduler.LatenessBuckets {
		cum += st.LatenessCounts[i]
		buckets[b.Seconds()] = cum
	}
	cum += st.LatenessCounts[len(scheduler.LatenessBuckets)]
	return prometheus.MustNewConstHistogram(descLateness, cum, st.LatenessSum.Seconds(), buckets)
}
