package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/config/discovery"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/endpoint"
	"github.com/sondeprobe/sonde/probe/syn"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/policy"
	"github.com/sondeprobe/sonde/server/apiv1"
	"github.com/sondeprobe/sonde/server/events"
	"github.com/sondeprobe/sonde/server/history"
	"github.com/sondeprobe/sonde/server/passivewatch"
	"github.com/sondeprobe/sonde/server/remediate"
	"github.com/sondeprobe/sonde/server/statefile"
	"github.com/sondeprobe/sonde/server/web"
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
	// Version and Revision (the commit) are reported in sonde_build_info
	// and the status page's header.
	Version, Revision string
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
	// NoMemoryTuning leaves the Go runtime's collector settings alone. By
	// default the daemon sets GOGC after every load so that the heap grows
	// by a sixty-fourth of the live heap between collections (see
	// memoryTuner), unless GOGC or GOMEMLIMIT is set.
	NoMemoryTuning bool
	// ReloadGap is the least time between the starts of two reloads;
	// default DefaultReloadGap. Reloads asked for meanwhile are coalesced
	// into one.
	ReloadGap time.Duration
	// StateFile, when set, is where target states are kept across
	// restarts: saved every StateInterval and at Stop, restored at Start.
	StateFile string
	// StateInterval is the time between two saves of the state file;
	// default DefaultStateInterval.
	StateInterval time.Duration
	// WebhookMinBackoff and WebhookMaxBackoff bound the wait between
	// delivery attempts of event webhooks, which doubles from the first;
	// default 500 ms and 30 s.
	WebhookMinBackoff, WebhookMaxBackoff time.Duration
	// EventKeepAlive is the longest silence on an event stream before a
	// heartbeat comment; default 5 s. The heartbeat is what the write
	// deadline (WriteStall) measures on a quiet stream.
	EventKeepAlive time.Duration
	// WriteStall is how long a write to a client may block before the
	// client counts as too slow and its request ends: event streams (the
	// client is dropped), /metrics and the API's lists, which hold a slot
	// while they write; default 10 s.
	WriteStall time.Duration
	// MaxEventStreams bounds the event streams served at once; default 64.
	// More are refused at once (see server/web, admission.go).
	MaxEventStreams int
	// ProbeConcurrency bounds the /probe requests probing at once, so they
	// cannot crowd out scheduled probes; default 16. More are refused at
	// once (see server/web, admission.go).
	ProbeConcurrency int
	// HistoryTargets is how many targets keep their recent results for the
	// status page's timelines (see server/history); default 1024, at most
	// MaxHistoryTargets.
	// HistoryResults is how many results each keeps; default 240.
	HistoryTargets, HistoryResults int
	// Resolver looks up the host names of pools while the daemon runs (they
	// are looked up again when their answers expire) and the targets of
	// /probe; default an endpoint.DNSResolver. Load should resolve with the
	// same.
	Resolver endpoint.Resolver
	// DiscoveryDebounce is how long discovery changes are gathered before
	// they are applied; default 200 ms.
	DiscoveryDebounce time.Duration
	// RelabelBudget is how long relabeling n targets of one discovery
	// source may take; default discovery.DefaultRelabelBudget.
	RelabelBudget func(n int) time.Duration
}

// MaxHistoryTargets is the most targets that keep recent results for the
// status page (Options.HistoryTargets).
const MaxHistoryTargets = history.MaxTargets

// DefaultReloadGap is the least time between the starts of two reloads. A
// reload costs CPU in proportion to the configuration (about half a second
// at a million targets); one a second at most keeps a flood of reload
// requests from taking more than half a core, and a file saved twice in a
// row is read once.
const DefaultReloadGap = time.Second

// Daemon is sonde's long-running process: one scheduler engine and its
// probers, changed in place by every reload, metrics and an HTTP API over
// them. Its methods are safe for concurrent use.
type Daemon struct {
	opt     Options
	log     *slog.Logger
	metrics *metrics
	events  *events.Log
	hooks   *events.HookSet
	streams *events.Streams
	adm     web.Admission // slots of the request classes that can take long
	totals  counterTotals
	obs     observer
	mem     memoryTuner
	errs    lastErrors
	hist    *history.History    // recent results of some targets, for the status page
	passive *passivewatch.Watch // evidence from this host's own connections to the targets
	// rem fires remediation actions. It outlives generations: budgets and
	// instance state are kept by remediation name and address.
	rem *remediate.Manager

	local   events.RateLimit                // logs of local errors
	conns   atomic.Pointer[web.ConnLimiter] // the HTTP server's, once it serves
	layouts atomic.Uint32                   // the last pool layout; from a random start, so cursors die with the process

	// life ends when Stop begins: reads of the configuration's files
	// (secrets, certificates, the state file) made with it are given up
	// then, so that a file system that does not answer holds no stop.
	life    context.Context
	endLife context.CancelFunc

	// The state file (Options.StateFile): the lock held on it from Start to
	// Stop, and how its saves go; both nil without one.
	stateLock *os.File
	saves     *statefile.Health

	cur atomic.Pointer[generation]

	// updateMu serialises the loads and edits of the running engine; it
	// guards the fields below.
	updateMu sync.Mutex
	static   *config.Config                   // the configuration as its files give it (config.Config.Static)
	disc     atomic.Pointer[discovery.Runner] // the pools' discovery sources and host names; nil until one discovers (read without the lock)
	found    uint64                           // the version of the runner's targets the engine runs
	pending  statefile.Pending                // saved states waiting for discovered targets
	engine   *scheduler.Engine
	probers  *proberSet
	inputs   inputs // of the configuration running
	cancel   context.CancelFunc
	done     chan struct{} // closed when the engine and the state saver stopped
	stopped  bool

	reloads reloader
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
	if opt.Resolver == nil {
		opt.Resolver = &endpoint.DNSResolver{}
	}
	if opt.Version == "" {
		opt.Version = "devel"
	}
	if opt.Revision == "" {
		opt.Revision = "unknown"
	}
	if opt.ReloadGap <= 0 {
		opt.ReloadGap = DefaultReloadGap
	}
	if opt.StateInterval <= 0 {
		opt.StateInterval = DefaultStateInterval
	}
	if err := opt.Shard.Validate(); err != nil {
		return nil, fmt.Errorf("server: Options.Shard: %w", err)
	}
	if opt.EventKeepAlive <= 0 {
		opt.EventKeepAlive = 5 * time.Second
	}
	if opt.WriteStall <= 0 {
		opt.WriteStall = 10 * time.Second
	}
	if opt.MaxEventStreams <= 0 {
		opt.MaxEventStreams = 64
	}
	if opt.ProbeConcurrency <= 0 {
		opt.ProbeConcurrency = 16
	}
	prefix, err := web.RoutePrefix(opt.Web.RoutePrefix)
	if err != nil {
		return nil, fmt.Errorf("server: Options.Web.RoutePrefix: %w", err)
	}
	opt.Web.RoutePrefix = prefix
	d := &Daemon{opt: opt, log: opt.Logger, events: events.NewLog(opt.Events), mem: newMemoryTuner(&opt),
		hist: history.New(opt.HistoryTargets, opt.HistoryResults)}
	d.errs.m = map[uint32]string{}
	d.obs = newObserver(d)
	d.local.Period = localLogEvery
	d.layouts.Store(rand.Uint32())
	d.life, d.endLife = context.WithCancel(context.Background())
	d.hooks = events.NewHookSet(d.events, events.HookOptions{MinBackoff: opt.WebhookMinBackoff, MaxBackoff: opt.WebhookMaxBackoff, UserAgent: "sonde/" + opt.Version}, d.log)
	d.adm = web.NewAdmission(d.opt.ProbeConcurrency, d.opt.MaxEventStreams, d.opt.WriteStall)
	d.streams = events.NewStreams(d.events, d.adm.Stream, d.opt.WriteStall, d.opt.EventKeepAlive, d.log)
	d.metrics = newMetrics(d)
	d.passive = newPassiveWatch(d)
	d.passive.Register(d.metrics.reg)
	d.rem = remediate.New(remediate.Options{Logger: opt.Logger, Registerer: d.metrics.reg})
	if opt.StateFile != "" {
		d.saves = statefile.NewHealth(d.metrics.reg)
	}
	d.reloads.d = d
	return d, nil
}

// Start loads the configuration and starts probing, with the states of the
// state file (if any) for the targets whose probe is unchanged. It fails when
// the configuration cannot be loaded or its probers cannot start, and with
// ErrStateFile when the state file is not sonde's or another daemon holds
// it; the error is returned, not logged: nothing runs, and the caller
// reports it.
func (d *Daemon) Start() (err error) {
	d.updateMu.Lock()
	defer d.updateMu.Unlock()
	if d.engine != nil || d.stopped {
		return errors.New("server: the daemon runs or ran already")
	}
	start := time.Now()
	if d.opt.StateFile != "" {
		if d.stateLock, err = statefile.Claim(d.life, d.opt.StateFile); err != nil {
			return err
		}
		defer func() {
			if err != nil {
				d.stateLock.Close()
				d.stateLock = nil
			}
		}()
	}
	cfg, in, err := d.read(false)
	if err != nil {
		return err
	}
	cfg, version, err := d.withFound(cfg)
	if err != nil {
		d.loadFailed(err, false)
		return err
	}
	g, err := d.first(cfg)
	if err != nil {
		d.loadFailed(err, false)
		return fmt.Errorf("start probers: %w", err)
	}
	d.applied(version)
	d.inputs = in
	d.mem.first()
	d.loaded(g, false, 0, len(g.cfg.Targets), 0, time.Since(start))
	return nil
}

// read loads the configuration, which must be of the daemon's shard, with
// the memory limit lifted, and returns it with its inputs (inputsOf: the
// digests of what the load read, and of the files it names that the
// probers read next). A failure is
// counted and, on a reload, logged.
func (d *Daemon) read(reload bool) (*config.Config, inputs, error) {
	d.mem.beforeLoad()
	cfg, err := d.opt.Load()
	if err == nil && cfg.Shard.String() != d.opt.Shard.String() {
		err = fmt.Errorf("configuration holds the targets of shard %s, the daemon runs shard %s", cfg.Shard, d.opt.Shard)
	}
	if err != nil {
		d.loadFailed(err, reload)
		return nil, inputs{}, err
	}
	return cfg, inputsOf(d.life, cfg), nil
}

// first builds the engine and the probers for the first configuration, ids
// as in cfg, and starts them.
func (d *Daemon) first(cfg *config.Config) (*generation, error) {
	plan, err := d.rem.Plan(d.life, cfg)
	if err != nil {
		return nil, err
	}
	hooks, err := d.hooks.Prepare(d.life, cfg)
	if err != nil {
		return nil, err
	}
	shards := d.opt.Shards
	if shards <= 0 {
		shards = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var engine *scheduler.Engine
	sink := &engineSink{}
	ps := &proberSet{
		opt: &d.opt, sink: sink, target: d.target, onReport: d.obs.report,
		onRetire: d.totals.retireSyn, onStop: d.totals.retirePool,
		shards: shards, ctx: ctx, pools: map[string]*workerPool{}, endpoints: daemonEndpoints{d},
	}
	pp, err := ps.prepare(d.life, cfg)
	if err != nil {
		cancel()
		return nil, err
	}
	checks := make([]scheduler.Check, len(cfg.Checks))
	slots := make([]uint16, len(cfg.Checks))
	for ci, c := range cfg.Checks {
		checks[ci] = pp.ls.engineCheck(ci, c)
		slots[ci] = uint16(ci)
	}
	resume := d.restore(cfg)
	// Specs are made per id, not held for the whole fleet: at ten million
	// targets a slice of them would be the load's largest transient.
	spec := func(id uint32) scheduler.TargetSpec {
		t := &cfg.Targets[id]
		s := scheduler.TargetSpec{Check: t.Check, Leader: t.Leader(), Disabled: t.Disabled()}
		if resume != nil {
			s.Resume = resume[id]
		}
		return s
	}
	engine, err = scheduler.NewFunc(checks, len(cfg.Targets), spec, scheduler.Options{
		Shards:   shards,
		Clock:    d.opt.Clock,
		Observer: &d.obs,
		Seed:     d.opt.Seed,
	})
	if err != nil {
		pp.abort()
		cancel()
		return nil, fmt.Errorf("build scheduler: %w", err)
	}
	sink.e.Store(engine)
	retire := pp.commit(cfg)
	g := d.newGeneration(cfg, engine, pp.ls, slots, plan)
	d.hist.Adopt(nil, g.hist, nil)
	d.hooks.Replace(hooks)
	g.decide(d)
	d.publish(g)
	d.passive.Use(g)
	g.runRouter()
	retire()
	d.engine, d.probers, d.cancel = engine, ps, cancel
	d.done = make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { engine.Run(ctx) })
	if d.opt.StateFile != "" {
		wg.Go(func() { d.saveEvery(ctx) })
	}
	go func() {
		wg.Wait()
		close(d.done)
	}()
	return g, nil
}

// newGeneration builds the generation of cfg (ids as the engine's) and
// resolves its pools' instruments.
func (d *Daemon) newGeneration(cfg *config.Config, e *scheduler.Engine, ls *launchers, slots []uint16, remedies *remediate.Plan) *generation {
	g := &generation{cfg: cfg, engine: e, launch: ls, errs: &d.errs, slots: slots, remedies: remedies, loaded: d.opt.Clock.Now(),
		hist: history.NewIndex(d.hist.Rings())}
	g.indexPools()
	g.targetDescs = newTargetDescs(cfg.Pools)
	g.rankCache = make([]apiv1.RankCache, len(g.pools))
	g.layout = d.layoutOf(g)
	for _, p := range cfg.Pools {
		proto := cfg.Checks[p.CheckIndex].Protocol.String()
		g.inst = append(g.inst, d.metrics.instruments(p.Name, proto))
	}
	if slices.ContainsFunc(cfg.Checks, func(c *config.Check) bool { return c.Protocol == config.HTTPS }) {
		g.certs = make([]atomic.Int64, len(cfg.Targets))
	}
	return g
}

// layoutOf returns the pool layout of g: that of the running generation when
// g's pools have the same names in the same order, a new one otherwise.
func (d *Daemon) layoutOf(g *generation) uint32 {
	old := d.cur.Load()
	if old != nil && slices.EqualFunc(old.pools, g.pools, func(a, b *policy.Pool) bool { return a.Name == b.Name }) {
		return old.layout
	}
	return d.layouts.Add(1)
}

// publish makes g the generation readers, the observer and remediation see.
func (d *Daemon) publish(g *generation) {
	d.cur.Store(g)
	d.rem.Use(g.remedies, remediate.NewView(g.cfg, d.opt.Clock, g.engine.Status, g.lastError))
}

// engineSink hands results to the engine, which is built after the
// probers that need a sink.
type engineSink struct {
	e atomic.Pointer[scheduler.Engine]
}

func (s *engineSink) Deliver(r probe.Result) {
	if e := s.e.Load(); e != nil {
		e.Deliver(r)
	}
}

// target returns the destination of target id in the running generation.
func (d *Daemon) target(id uint32) probe.Target {
	g := d.cur.Load()
	if g == nil {
		return probe.Target{}
	}
	return g.target(id)
}

// Reload loads the configuration again and applies it to the running engine
// as an edit: targets added, removed, or changed (a new probe definition
// starts them afresh); targets whose address, port, check name and probe
// definition are unchanged keep their state, streak, latency, schedule and
// the probe they may have in flight. A configuration whose files are
// byte for byte the ones running is not even parsed. An invalid
// configuration is rejected: the running one goes on, the error is
// returned (and logged), and sonde_config_last_reload_successful drops to 0.
//
// Reloads are coalesced and rate-limited: a call waits for a reload that
// starts after it, at most one starts per Options.ReloadGap, and every call
// waiting when one starts gets its result.
func (d *Daemon) Reload() error { return d.reloads.request() }

// reload is one reload, run by the reloader.
func (d *Daemon) reload() error {
	d.updateMu.Lock()
	defer d.updateMu.Unlock()
	if d.engine == nil || d.stopped {
		return errors.New("server: the daemon does not run")
	}
	start := time.Now()
	if d.inputs.unchanged(d.life) {
		d.metrics.reloads.WithLabelValues("success").Inc()
		d.metrics.reloadOK.Set(1)
		d.log.Debug("configuration unchanged", "files", len(d.inputs.files))
		return nil
	}
	cfg, in, err := d.read(true)
	if err != nil {
		return err
	}
	cfg, version, err := d.withFound(cfg)
	if err != nil {
		d.loadFailed(err, true)
		return fmt.Errorf("apply configuration: %w", err)
	}
	g, added, removed, err := d.apply(cfg)
	if err != nil {
		d.loadFailed(err, true)
		return fmt.Errorf("apply configuration: %w", err)
	}
	d.applied(version)
	d.inputs = in
	d.loaded(g, true, g.targets-added, added, removed, time.Since(start))
	return nil
}

// apply edits the running engine and probers into cfg and publishes its
// generation. It returns the numbers of targets added and removed.
func (d *Daemon) apply(cfg *config.Config) (*generation, int, int, error) {
	old := d.cur.Load()
	plan, err := d.rem.Plan(d.life, cfg)
	if err != nil {
		return nil, 0, 0, err
	}
	hooks, err := d.hooks.Prepare(d.life, cfg)
	if err != nil {
		return nil, 0, 0, err
	}
	slots, nslots := slotsFor(old, cfg)
	pp, err := d.probers.prepare(d.life, cfg)
	if err != nil {
		return nil, 0, 0, err
	}
	ed := d.engine.Edit()
	d.pending.Expire(d.opt.Clock.Now())
	var resume func(uint32) *scheduler.TargetStatus
	if d.pending.Len() > 0 {
		resume = func(n uint32) *scheduler.TargetStatus { return d.pending.Take(cfg, n, d.opt.Clock) }
	}
	ch, err := edit(ed, old, cfg, pp.ls, slots, nslots, resume)
	if err != nil {
		ed.Abort()
		pp.abort()
		return nil, 0, 0, err
	}
	retire := pp.commit(ch.cfg)
	g := d.newGeneration(ch.cfg, d.engine, pp.ls, slots, plan)
	g.keepCerts(old, ch.removed)
	d.hist.Adopt(old.hist, g.hist, ch.removed)
	d.hooks.Replace(hooks)
	g.decide(d)
	old.routeChanges(g, ch.kept, d.events.Add)
	// Readers and the observer see the new generation first: the engine
	// still runs the removed targets until its shards apply the edit, and
	// the generation knows them as gone.
	d.publish(g)
	d.passive.Use(g)
	ed.Commit()
	old.stopRouter()
	g.runRouter()
	retire()
	d.errs.forget(ch.removed)
	d.metrics.forget(staleSeries(old.cfg, g.cfg))
	return g, len(ch.added), len(ch.removed), nil
}

// loadFailed counts and reports a load that failed.
func (d *Daemon) loadFailed(err error, reload bool) {
	d.mem.afterLoad()
	d.metrics.reloads.WithLabelValues("failure").Inc()
	d.metrics.reloadOK.Set(0)
	if reload {
		d.log.Error("configuration rejected; the previous one keeps running", "err", err)
	}
}

// loaded counts and reports a load that succeeded.
func (d *Daemon) loaded(g *generation, reload bool, kept, added, removed int, took time.Duration) {
	gogc := d.mem.afterLoad()
	d.metrics.reloads.WithLabelValues("success").Inc()
	d.metrics.reloadOK.Set(1)
	d.metrics.reloadTime.Set(float64(time.Now().Unix()))
	msg := "configuration loaded"
	if reload {
		msg = "configuration reloaded"
	}
	d.log.Info(msg, "shard", g.cfg.Shard.String(), "checks", len(g.cfg.Checks), "pools", len(g.cfg.Pools), "targets", g.targets,
		"streams", g.cfg.Streams(), "remediations", len(g.cfg.Remediations), "kept_state", kept, "added", added, "removed", removed,
		"tcp_path", g.launch.tcpPath, "passive", d.passive.Describe(), "took", took.Round(time.Millisecond))
	d.metrics.warnings.Set(float64(len(g.cfg.Warnings)))
	for _, w := range g.cfg.Warnings {
		d.log.Warn("configuration warning", "field", w.Field, "warning", w.Msg)
	}
	if gogc > 0 {
		d.log.Debug("collector goal set", "gogc", gogc)
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

// Stop ends probing and remediation (an action in flight is cancelled) and
// saves the state file. The daemon cannot be started again. It may be
// called while Start or a reload runs: their reads of files are given up at
// once, and Stop follows as soon as they return.
//
// Discovery stops first, without the update lock: an update being built
// is given up, and one waiting for the lock finds the daemon stopped.
func (d *Daemon) Stop() error {
	d.endLife()
	d.reloads.stop()
	d.updateMu.Lock()
	if d.stopped {
		d.updateMu.Unlock()
		return nil
	}
	d.stopped = true // from now on no load runs, and no runner is made
	r := d.disc.Load()
	d.updateMu.Unlock()
	var errs []error
	if r != nil {
		if err := r.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	d.updateMu.Lock()
	defer d.updateMu.Unlock()
	d.rem.Close()
	defer d.hooks.StopAll()
	if d.engine == nil {
		return errors.Join(errs...)
	}
	// The engine and the state saver stop without the lock: a periodic save
	// takes it to read the states, and one that began now would wait for it
	// forever while Stop waits for the saver. No reload, update or start
	// runs meanwhile: they see d.stopped.
	d.updateMu.Unlock()
	d.cancel()
	<-d.done
	d.passive.Stop()
	d.updateMu.Lock()
	d.cur.Load().stopRouter()
	if d.opt.StateFile != "" {
		if s := d.stateToSave(); s != nil {
			err := statefile.Write(d.opt.StateFile, s)
			d.saves.Record(err, time.Now()) // the error is Stop's: the caller reports it
			if err != nil {
				errs = append(errs, fmt.Errorf("the states were not saved at stop: %w", err))
			}
		}
		d.stateLock.Close()
	}
	errs = append(errs, d.probers.close())
	return errors.Join(errs...)
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
