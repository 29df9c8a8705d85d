package server

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/syn"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/server/remediate"
)

// Options configure a [Daemon].
type Options struct {
	// Load returns the configuration; it is called at start and on every
	// reload. Usually it reads a file with config.Load.
	Load func() (*config.Config, error)
	// Logger receives state changes (info), probes (debug) and errors.
	Logger *slog.Logger
	// Clock is the engine's clock; default a scheduler.RealClock.
	Clock scheduler.Clock
	// Shards is the number of scheduler shards; default GOMAXPROCS.
	Shards int
	// Seed spreads first probes and jitter; same seed, same schedule.
	Seed uint64
	// Syn holds the SYN prober's settings (source address, ports,
	// interface...); Table, Sink and Lanes are filled in by the daemon.
	Syn syn.Config
	// NoSyn keeps TCP checks in auto mode on connect() even when the SYN
	// prober could run.
	NoSyn bool
	// Version is reported in sonde_build_info.
	Version string
	// Events is the number of recent state changes kept for the API;
	// default 10000.
	Events int
	// Shard is the slice of the targets this daemon probes (sonde run
	// -shard); the zero Shard is all of them. Load must return
	// configurations of this shard (config.LoadOptions.Shard): one of
	// another shard is rejected. It is reported in the start log,
	// /api/v1/pools and sonde_shard_info.
	Shard config.Shard
	// Web configures the HTTP server: lifecycle endpoints, allowed hosts,
	// connection limit.
	Web WebOptions
	// NoMemoryLimit leaves the Go runtime's memory limit alone. By default
	// the daemon sets it after every load to the memory in use plus an
	// eighth (see memoryTuner), unless GOMEMLIMIT is set.
	NoMemoryLimit bool
	// WebhookMinBackoff and WebhookMaxBackoff bound the wait between
	// delivery attempts of event webhooks, which doubles from the first;
	// default 500 ms and 30 s.
	WebhookMinBackoff, WebhookMaxBackoff time.Duration
	// EventKeepAlive is the longest silence on an event stream before a
	// keep-alive comment; default 15 s.
	EventKeepAlive time.Duration
	// EventWriteTimeout is how long a write to an event stream may block
	// before the client counts as too slow and is dropped; default 10 s.
	EventWriteTimeout time.Duration
	// MaxEventStreams bounds the event streams served at once; default 64.
	MaxEventStreams int
	// ProbeConcurrency bounds the /probe requests probing at once, so they
	// cannot crowd out scheduled probes; default 16.
	ProbeConcurrency int
	// HistoryTargets is how many targets keep their recent results for the
	// status page's timelines (see history.go); default 1024.
	// HistoryResults is how many results each keeps; default 240.
	HistoryTargets, HistoryResults int
}

// Daemon is sonde's long-running process: one generation of probers and
// scheduler at a time, metrics and an HTTP API over it. Its methods are safe
// for concurrent use.
type Daemon struct {
	opt     Options
	log     *slog.Logger
	metrics *metrics
	events  *eventLog
	hooks   hookSet
	streams streams
	probes  chan struct{} // one token per /probe request probing
	totals  counterTotals
	obs     observer
	mem     memoryTuner
	hist    *history // recent results of some targets, for the status page
	// rem fires remediation actions. It outlives generations: budgets and
	// instance state are kept by remediation name and address.
	rem *remediate.Manager

	local      rateLimit                   // logs of local errors
	conns      atomic.Pointer[connLimiter] // the HTTP server's, once it serves
	heavySlots chan struct{}               // slots of list requests running (see heavy)
	loads      atomic.Uint64               // configurations built

	cur      atomic.Pointer[generation]
	reloadMu sync.Mutex // one load or reload at a time
}

// New returns a daemon; Start loads the configuration.
func New(opt Options) (*Daemon, error) {
	if opt.Load == nil {
		return nil, errors.New("server: Options.Load is required")
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Clock == nil {
		opt.Clock = scheduler.NewRealClock()
	}
	if opt.Events <= 0 {
		opt.Events = 10000
	}
	if opt.Version == "" {
		opt.Version = "devel"
	}
	if err := opt.Shard.Validate(); err != nil {
		return nil, fmt.Errorf("server: Options.Shard: %w", err)
	}
	if opt.EventKeepAlive <= 0 {
		opt.EventKeepAlive = 15 * time.Second
	}
	if opt.EventWriteTimeout <= 0 {
		opt.EventWriteTimeout = 10 * time.Second
	}
	if opt.MaxEventStreams <= 0 {
		opt.MaxEventStreams = 64
	}
	if opt.ProbeConcurrency <= 0 {
		opt.ProbeConcurrency = 16
	}
	prefix, err := routePrefix(opt.Web.RoutePrefix)
	if err != nil {
		return nil, fmt.Errorf("server: Options.Web.RoutePrefix: %w", err)
	}
	opt.Web.RoutePrefix = prefix
	d := &Daemon{opt: opt, log: opt.Logger, events: newEventLog(opt.Events), mem: newMemoryTuner(&opt),
		hist: newHistory(opt.HistoryTargets, opt.HistoryResults)}
	d.local.period = localLogEvery
	d.heavySlots = make(chan struct{}, heavyRequests)
	d.obs.d = d
	d.hooks = hookSet{opt: &d.opt, log: d.log, feed: d.events.setHooks}
	d.streams.done = make(chan struct{})
	d.probes = make(chan struct{}, opt.ProbeConcurrency)
	d.metrics = newMetrics(d)
	d.rem = remediate.New(remediate.Options{Logger: opt.Logger, Registerer: d.metrics.reg})
	return d, nil
}

// Start loads the configuration and starts probing. It fails when the
// configuration cannot be loaded or its probers cannot start; the error is
// returned, not logged: nothing runs, and the caller reports it.
func (d *Daemon) Start() error {
	return d.Reload()
}

// Reload loads the configuration again and replaces the running generation.
// Targets whose address, port, check name and probe definition are unchanged
// keep their state, counts, latency and schedule. An invalid configuration is
// rejected: the running one goes on, the error is returned (and logged), and
// sonde_config_last_reload_successful drops to 0.
func (d *Daemon) Reload() error {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	start := time.Now()
	d.mem.beforeLoad()
	old := d.cur.Load()
	next, err := d.load()
	var hooks []*hook
	if err == nil {
		if hooks, err = d.hooks.prepare(next.cfg); err != nil {
			_ = next.launch.close()
		}
	}
	if err != nil {
		d.mem.afterLoad()
		d.metrics.reloads.WithLabelValues("failure").Inc()
		d.metrics.reloadOK.Set(0)
		if old != nil {
			d.log.Error("configuration rejected; the previous one keeps running", "err", err)
		}
		return err
	}
	reload := old != nil
	var pairs [][2]uint32
	var oldHist *histIndex
	if reload {
		if err := old.stop(); err != nil {
			d.log.Warn("stopping probers", "err", err)
		}
		d.totals.retire(old)
		pairs = old.carryOver(next)
		d.metrics.forget(staleSeries(old.cfg, next.cfg))
		oldHist = old.hist
	}
	d.hist.adopt(oldHist, next.hist, pairs)
	d.hooks.replace(hooks)
	next.decide()
	if reload {
		old.routeChanges(next, pairs, d.events.add)
	}
	next.start()
	d.cur.Store(next)
	d.rem.Use(next.remedies, remediate.NewView(next.cfg, d.opt.Clock, next.engine.Status, next.lastError))
	limit := d.mem.afterLoad()
	d.metrics.reloads.WithLabelValues("success").Inc()
	d.metrics.reloadOK.Set(1)
	d.metrics.reloadTime.Set(float64(time.Now().Unix()))
	d.logStart(next, reload, len(pairs), limit, time.Since(start))
	return nil
}

// load reads the configuration and builds its generation, not yet started.
func (d *Daemon) load() (*generation, error) {
	cfg, err := d.opt.Load()
	if err != nil {
		return nil, err
	}
	if cfg.Shard.String() != d.opt.Shard.String() {
		return nil, fmt.Errorf("configuration holds the targets of shard %s, the daemon runs shard %s", cfg.Shard, d.opt.Shard)
	}
	d.mem.loaded()
	plan, err := d.rem.Plan(cfg)
	if err != nil {
		return nil, err
	}
	g, err := buildGeneration(cfg, &d.opt, &d.obs)
	if err != nil {
		return nil, fmt.Errorf("start probers: %w", err)
	}
	g.seq = d.loads.Add(1)
	g.remedies = plan
	return g, nil
}

func (d *Daemon) logStart(g *generation, reload bool, kept int, memLimit int64, took time.Duration) {
	msg := "configuration loaded"
	if reload {
		msg = "configuration reloaded"
	}
	d.log.Info(msg, "shard", g.cfg.Shard.String(), "checks", len(g.cfg.Checks), "pools", len(g.cfg.Pools), "targets", len(g.cfg.Targets),
		"streams", g.cfg.Streams(), "remediations", len(g.cfg.Remediations), "kept_state", kept, "tcp_path", g.launch.tcpPath, "took", took.Round(time.Millisecond))
	if memLimit > 0 {
		d.log.Debug("memory limit set", "bytes", memLimit)
	}
	if g.launch.synErr != nil {
		d.log.Warn("TCP checks use connect(), not the SYN prober", "reason", g.launch.synErr)
	}
	if g.launch.syn != nil {
		if err := g.launch.syn.CaptureFallback(); err != nil {
			d.log.Warn("SYN replies are read with AF_PACKET, not eBPF", "reason", err)
		}
	}
}

// staleSeries returns the names of old's pools that next lacks, and the
// pool and protocol of those next keeps with another protocol: their series
// by protocol are stale.
func staleSeries(old, next *config.Config) (gone []string, moved []poolProtocol) {
	now := map[string]string{}
	for _, p := range next.Pools {
		now[p.Name] = next.Checks[p.CheckIndex].Protocol.String()
	}
	for _, p := range old.Pools {
		proto := old.Checks[p.CheckIndex].Protocol.String()
		switch np, ok := now[p.Name]; {
		case !ok:
			gone = append(gone, p.Name)
		case np != proto:
			moved = append(moved, poolProtocol{p.Name, proto})
		}
	}
	return gone, moved
}

// Stop ends probing and remediation (an action in flight is cancelled).
// The daemon cannot be started again.
func (d *Daemon) Stop() error {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	d.rem.Close()
	defer d.hooks.stopAll()
	g := d.cur.Load()
	if g == nil {
		return nil
	}
	return g.stop()
}

// TCPPath tells which prober runs TCP checks, and why it is not the SYN
// prober when it is not.
func (d *Daemon) TCPPath() (probe.TCPPath, error) {
	g := d.cur.Load()
	if g == nil {
		return "", nil
	}
	return g.launch.tcpPath, g.launch.synErr
}
