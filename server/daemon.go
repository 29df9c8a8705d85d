package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/syn"
	"github.com/sondeprobe/sonde/scheduler"
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
	// NoMemoryLimit leaves the Go runtime's memory limit alone. By default
	// the daemon sets it after every load to the memory in use plus an
	// eighth (see memoryTuner), unless GOMEMLIMIT is set.
	NoMemoryLimit bool
}

// Daemon is sonde's long-running process: one generation of probers and
// scheduler at a time, metrics and an HTTP API over it. Its methods are safe
// for concurrent use.
type Daemon struct {
	opt     Options
	log     *slog.Logger
	metrics *metrics
	events  *eventLog
	totals  counterTotals
	obs     observer
	mem     memoryTuner

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
	d := &Daemon{opt: opt, log: opt.Logger, events: newEventLog(opt.Events), mem: newMemoryTuner(&opt)}
	d.obs.d = d
	d.metrics = newMetrics(d)
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
	kept := 0
	if reload {
		if err := old.stop(); err != nil {
			d.log.Warn("stopping probers", "err", err)
		}
		d.totals.retire(old)
		kept = old.carryOver(next)
		d.metrics.forgetPools(removedPools(old, next))
	}
	next.start()
	d.cur.Store(next)
	limit := d.mem.afterLoad()
	d.metrics.reloads.WithLabelValues("success").Inc()
	d.metrics.reloadOK.Set(1)
	d.metrics.reloadTime.Set(float64(time.Now().Unix()))
	d.logStart(next, reload, kept, limit, time.Since(start))
	return nil
}

// load reads the configuration and builds its generation, not yet started.
func (d *Daemon) load() (*generation, error) {
	cfg, err := d.opt.Load()
	if err != nil {
		return nil, err
	}
	d.mem.loaded()
	g, err := buildGeneration(cfg, &d.opt, &d.obs)
	if err != nil {
		return nil, fmt.Errorf("start probers: %w", err)
	}
	return g, nil
}

func (d *Daemon) logStart(g *generation, reload bool, kept int, memLimit int64, took time.Duration) {
	msg := "configuration loaded"
	if reload {
		msg = "configuration reloaded"
	}
	d.log.Info(msg, "checks", len(g.cfg.Checks), "pools", len(g.cfg.Pools), "targets", len(g.cfg.Targets),
		"streams", g.cfg.Streams(), "kept_state", kept, "tcp_path", g.launch.tcpPath, "took", took.Round(time.Millisecond))
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

// removedPools returns the names of old's pools that next lacks.
func removedPools(old, next *generation) []string {
	keep := map[string]bool{}
	for _, p := range next.cfg.Pools {
		keep[p.Name] = true
	}
	var gone []string
	for _, p := range old.cfg.Pools {
		if !keep[p.Name] {
			gone = append(gone, p.Name)
		}
	}
	return gone
}

// Stop ends probing. The daemon cannot be started again.
func (d *Daemon) Stop() error {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
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

// Serve serves the daemon's HTTP endpoints on l until ctx is done, then shuts
// the server down gracefully.
func (d *Daemon) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down http: %w", err)
	}
	return nil
}
