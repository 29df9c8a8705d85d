package server

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	httpprobe "github.com/sondeprobe/sonde/probe/http"
	"github.com/sondeprobe/sonde/probe/syn"
	"github.com/sondeprobe/sonde/probe/tcp"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/server/prober"
)

// launchers is what one generation runs its checks on: per check, the
// launcher of its probes, with the SYN prober and the worker pools behind
// them. The probers themselves belong to the daemon's proberSet and outlive
// generations.
type launchers struct {
	byCheck     []probe.Launcher
	firstProbes []scheduler.Pace // per check: what its launcher takes of first probes at once
	workers     []*probe.Workers // of the HTTPS checks, in check order
	syn         *syn.Prober
	tcpPath     probe.TCPPath
	synErr      error // why TCP checks in auto mode fell back to connect(), if they did
}

// engineCheck returns what the engine runs for check c, the ci-th of the
// configuration ls was made for.
func (ls *launchers) engineCheck(ci int, c *config.Check) scheduler.Check {
	return scheduler.Check{Timing: c.Timing, Launcher: ls.byCheck[ci], FirstProbes: ls.firstProbes[ci], Retransmit: c.SynRetransmit.D()}
}

// proberSet is the daemon's probers, kept across reloads: per plain-HTTP
// or connect() check a launcher on the HTTP event loops (one set of loops
// for all of them), a probe.Workers pool per HTTPS check, by check name,
// and one SYN prober shared by the TCP checks that run on it, with the
// table of endpoints it probes. A reload keeps a check's launcher running —
// its queue and the probes in flight — and gives it the check's new prober
// (so certificates and secrets are read again) and, for a pool, its size; a
// check that moves between plain HTTP, connect() and HTTPS gets a new
// launcher and its old one stops. The SYN prober stays up while a check
// uses it and its sources cover the address families of the targets it
// probes. It is used only by the daemon's update path, one update at a time.
type proberSet struct {
	opt      *Options
	sink     probe.Sink
	target   func(uint32) probe.Target
	onReport func(uint32, *probe.Report)
	onRetire func(*syn.Prober)   // takes a retiring SYN prober's counters
	onStop   func(launcherStats) // takes a retiring pool's or loop launcher's counters
	shards   int
	ctx      context.Context // pools and retiring SYN probers run until it is done
	// endpoints give the SYN prober its targets' endpoints: those of the
	// running generation, by engine id (see daemonEndpoints).
	endpoints probe.Endpoints

	pools    map[string]*workerPool // by check name
	syn      *syn.Prober
	loops    *httpprobe.Loops // the HTTP event loops, once a plain-HTTP check needs them
	loopsRun bool             // loops' Run has started
	wg       sync.WaitGroup   // pools' and loops' Run, retiring SYN probers' Close
}

// launcherStats is what the daemon reads of a one-shot check's launcher:
// a probe.Workers pool or a launcher on the HTTP event loops.
type launcherStats interface {
	Stats() probe.WorkerStats
}

// workerPool is one check's running launcher of one-shot probes: a
// probe.Workers pool (w), or a launcher on the HTTP event loops (lw) of
// HTTP probes or, when connect, of connect() probes.
type workerPool struct {
	w       *probe.Workers
	lw      *httpprobe.LoopLauncher
	connect bool
	cancel  context.CancelFunc
}

// launcher returns the pool's launcher.
func (wp *workerPool) launcher() probe.Launcher {
	if wp.lw != nil {
		return wp.lw
	}
	return wp.w
}

// stats returns the pool's counters.
func (wp *workerPool) stats() launcherStats {
	if wp.lw != nil {
		return wp.lw
	}
	return wp.w
}

// loopKind is how a check's probes run on the HTTP event loops.
type loopKind uint8

const (
	notOnLoops  loopKind = iota // on a worker pool: HTTPS (crypto/tls on a goroutine per probe in flight)
	loopHTTP                    // plain HTTP
	loopConnect                 // tcp_mode connect: a connect() per probe, no data
)

// onLoops returns how prober p runs on the HTTP event loops: a plain-HTTP
// prober, a connect() prober (cheaper there than on a worker pool:
// bench/README.md), or neither.
func onLoops(p probe.Reporter) loopKind {
	switch p := p.(type) {
	case *httpprobe.Prober:
		if p.Loopable() {
			return loopHTTP
		}
	case *tcp.Prober:
		return loopConnect
	}
	return notOnLoops
}

// sameKind reports whether wp is a launcher of kind k.
func (wp *workerPool) sameKind(k loopKind) bool {
	switch k {
	case loopHTTP:
		return wp.lw != nil && !wp.connect
	case loopConnect:
		return wp.lw != nil && wp.connect
	}
	return wp.w != nil
}

// proberPlan is a proberSet's change for one configuration, prepared but not
// yet made: the probers its checks need, new ones created but not started.
type proberPlan struct {
	ps      *proberSet
	ls      *launchers             // the configuration's launchers, by check
	probers []probe.Reporter       // per check, its one-shot prober; nil on the SYN prober
	sizes   []int                  // per check, its pool's size
	fresh   map[string]*workerPool // pools to start, by check name
}

// prepare plans the probers of cfg: the SYN prober if a TCP check runs on it
// (started now if none runs or the running one cannot probe every target), a
// one-shot prober per other check, and a worker pool per such check (the
// running one of the same name, or a new one). Nothing changes for the
// running configuration until commit; when prepare fails, nothing did.
// ctx bounds the reading of the checks' files.
func (ps *proberSet) prepare(ctx context.Context, cfg *config.Config) (*proberPlan, error) {
	pp := &proberPlan{
		ps: ps,
		ls: &launchers{byCheck: make([]probe.Launcher, len(cfg.Checks)), firstProbes: make([]scheduler.Pace, len(cfg.Checks)),
			tcpPath: probe.PathConnect},
		probers: make([]probe.Reporter, len(cfg.Checks)),
		sizes:   make([]int, len(cfg.Checks)),
		fresh:   map[string]*workerPool{},
	}
	sp, err := ps.synFor(cfg, pp.ls)
	if err != nil {
		return nil, err
	}
	pp.ls.syn = sp
	if sp != nil {
		pp.ls.tcpPath = sp.Path()
	}
	streams := streamsPerCheck(cfg)
	syn := make([]bool, len(cfg.Checks)) // the checks the SYN prober runs
	for ci, c := range cfg.Checks {
		p, useSyn, err := prober.New(ctx, c, sp != nil)
		if err != nil {
			pp.abort()
			return nil, err
		}
		if useSyn {
			pp.ls.byCheck[ci], syn[ci] = sp, true
			continue
		}
		n := concurrencyFor(c, streams[ci])
		pp.probers[ci], pp.sizes[ci] = p, n
		pp.ls.firstProbes[ci] = firstProbePace(c, streams[ci], n, float64(n)/c.Timeout.Seconds())
		kind := onLoops(p)
		wp := ps.pools[c.Name]
		if wp == nil || !wp.sameKind(kind) {
			if kind != notOnLoops {
				wp, err = ps.newLoopLauncher(p, kind)
			} else {
				wp = ps.newPool(p, pp.sizes[ci])
			}
			if err != nil {
				pp.abort()
				return nil, fmt.Errorf("check %s: %w", c.Name, err)
			}
			pp.fresh[c.Name] = wp
		}
		pp.ls.byCheck[ci] = wp.launcher()
		if wp.w != nil {
			pp.ls.workers = append(pp.ls.workers, wp.w)
		}
	}
	synPace := synFirstPace(cfg, streams, syn)
	for ci := range syn {
		if syn[ci] {
			pp.ls.firstProbes[ci] = synPace
		}
	}
	return pp, nil
}

// abort drops a plan: a SYN prober it started is closed.
func (pp *proberPlan) abort() {
	if sp := pp.ls.syn; sp != nil && sp != pp.ps.syn {
		_ = sp.Close()
	}
}

// commit makes the plan the probers' state for cfg, whose ids are the
// engine's: it starts new pools and gives running ones their new prober and
// size (the SYN prober reads cfg's endpoints once it is published). retire,
// to call once the engine runs on the new launchers, stops the probers cfg
// no longer uses.
func (pp *proberPlan) commit(cfg *config.Config) (retire func()) {
	ps := pp.ps
	old := ps.syn
	ps.syn = pp.ls.syn
	used := map[string]bool{}
	var gone []*workerPool
	for ci, c := range cfg.Checks {
		if pp.probers[ci] == nil {
			continue
		}
		used[c.Name] = true
		if wp := pp.fresh[c.Name]; wp != nil {
			if old := ps.pools[c.Name]; old != nil {
				gone = append(gone, old) // the check changed launcher kind
			}
			ps.pools[c.Name] = wp
			ps.run(wp)
			continue
		}
		wp := ps.pools[c.Name]
		if wp.lw != nil {
			// prepare chose this launcher for this prober's kind
			switch p := pp.probers[ci].(type) {
			case *httpprobe.Prober:
				_ = wp.lw.SetProber(p) // loopable
			case *tcp.Prober:
				wp.lw.SetSource(p.Source())
			}
			continue
		}
		wp.w.SetProber(pp.probers[ci])
		wp.w.SetConcurrency(pp.sizes[ci])
	}
	for name, wp := range ps.pools {
		if !used[name] {
			gone = append(gone, wp)
			delete(ps.pools, name)
		}
	}
	return func() {
		for _, wp := range gone {
			wp.cancel() // their targets are gone: their probes may go too
			if ps.onStop != nil {
				ps.onStop(wp.stats())
			}
		}
		if old != nil && old != ps.syn {
			ps.retireSyn(old, maxTCPTimeout(cfg))
		}
	}
}

// newPool returns a worker pool for prober p, not yet running.
func (ps *proberSet) newPool(p probe.Prober, size int) *workerPool {
	w, err := probe.NewWorkers(probe.WorkersOptions{
		Prober:      p,
		Target:      ps.target,
		Sink:        ps.sink,
		Now:         ps.opt.Clock.Nanotime,
		Concurrency: size,
		OnReport:    ps.onReport,
	})
	if err != nil {
		panic(fmt.Sprintf("server: worker pool: %v", err)) // every option is set above
	}
	return &workerPool{w: w}
}

// newLoopLauncher returns a launcher of p's probes, of kind k, on the HTTP
// event loops, which it creates (not yet running) for the first check that
// runs on them.
func (ps *proberSet) newLoopLauncher(p probe.Reporter, k loopKind) (*workerPool, error) {
	if ps.loops == nil {
		ls, err := httpprobe.NewLoops(httpprobe.LoopOptions{
			Target:   ps.target,
			Sink:     ps.sink,
			Now:      ps.opt.Clock.Nanotime,
			OnReport: ps.onReport,
		})
		if err != nil {
			return nil, err
		}
		ps.loops = ls
		if engine, why := ls.Engine(); why != nil {
			ps.opt.Logger.Warn("http loops: io_uring unavailable, polling with epoll (a system call per step)", "engine", engine, "err", why)
		} else {
			ps.opt.Logger.Info("http loops", "engine", engine)
		}
	}
	if k == loopConnect {
		return &workerPool{lw: ps.loops.ConnectLauncher(p.(*tcp.Prober).Source()), connect: true}, nil
	}
	lw, err := ps.loops.Launcher(p.(*httpprobe.Prober))
	if err != nil {
		return nil, err
	}
	return &workerPool{lw: lw}, nil
}

// run starts pool wp, and the HTTP event loops with their first launcher.
func (ps *proberSet) run(wp *workerPool) {
	if wp.lw != nil {
		wp.cancel = wp.lw.Stop
		if ls := ps.loops; !ps.loopsRun {
			ps.loopsRun = true
			ps.wg.Go(func() { _ = ls.Run(ps.ctx) }) // Run fails only when run twice
		}
		return
	}
	ctx, cancel := context.WithCancel(ps.ctx)
	wp.cancel = cancel
	ps.wg.Go(func() { _ = wp.w.Run(ctx) }) // Run fails only when run twice
}

// synFor returns the SYN prober for cfg's TCP checks, or nil when none of
// them runs on one. It keeps the running prober when its sources cover cfg,
// and starts one when a TCP check wants it and none runs, or when cfg has
// targets of an address family the running one has no source for. A check in
// syn mode needs it; in auto mode a failure falls back to connect(), and
// ls.synErr says why.
func (ps *proberSet) synFor(cfg *config.Config, ls *launchers) (*syn.Prober, error) {
	need, must := false, false
	for _, c := range cfg.Checks {
		if c.Protocol == config.TCP && c.TCPMode != config.TCPConnect {
			need = true
			must = must || c.TCPMode == config.TCPSyn
		}
	}
	if !need || (ps.opt.NoSyn && !must) {
		if ps.opt.NoSyn {
			ls.synErr = errors.New("disabled by -syn=false")
		}
		return nil, nil
	}
	if ps.syn != nil && covers(ps.syn, cfg) {
		return ps.syn, nil
	}
	sc := ps.opt.Syn
	sc.Table, sc.Sink, sc.Lanes = ps.endpoints, ps.sink, ps.shards
	sc.Destinations = firstOfFamilies(cfg)
	p, err := syn.New(sc)
	if err != nil {
		if must {
			return nil, fmt.Errorf("tcp_mode syn: %w", err)
		}
		ls.synErr = err
		return nil, nil
	}
	return p, nil
}

// covers reports whether SYN prober p has a source address for every
// address family among cfg's targets of TCP checks.
func covers(p *syn.Prober, cfg *config.Config) bool {
	v4, v6 := p.Sources()
	for _, t := range cfg.Targets {
		if !t.Valid() || cfg.Checks[t.Check].Protocol != config.TCP {
			continue
		}
		if t.Addr().Is4() && !v4.IsValid() || t.Addr().Is6() && !v6.IsValid() {
			return false
		}
	}
	return true
}

// firstOfFamilies returns the first target address of each family among
// cfg's targets: their routes choose the SYN prober's sources.
func firstOfFamilies(cfg *config.Config) []netip.Addr {
	var v4, v6 netip.Addr
	for _, t := range cfg.Targets {
		if !t.Valid() {
			continue
		}
		if t.Addr().Is4() && !v4.IsValid() {
			v4 = t.Addr()
		} else if t.Addr().Is6() && !v6.IsValid() {
			v6 = t.Addr()
		}
	}
	var out []netip.Addr
	for _, a := range []netip.Addr{v4, v6} {
		if a.IsValid() {
			out = append(out, a)
		}
	}
	return out
}

// retireSyn closes a SYN prober the configuration no longer uses, once the
// answers to its last probes are in: after their longest timeout (wait) and
// a second more.
func (ps *proberSet) retireSyn(p *syn.Prober, wait time.Duration) {
	ps.wg.Go(func() {
		t := time.NewTimer(wait + time.Second)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ps.ctx.Done():
		}
		if ps.onRetire != nil {
			ps.onRetire(p)
		}
		_ = p.Close() // nothing to do about a failed close of sockets no one uses
	})
}

// maxTCPTimeout is the longest timeout of cfg's TCP checks.
func maxTCPTimeout(cfg *config.Config) time.Duration {
	var d time.Duration
	for _, c := range cfg.Checks {
		if c.Protocol == config.TCP {
			d = max(d, c.Timeout)
		}
	}
	return d
}

// close stops every prober once ctx, which the set was made with, is done:
// it waits for the pools to stop and closes the SYN prober.
func (ps *proberSet) close() error {
	ps.wg.Wait()
	if ps.syn != nil {
		return ps.syn.Close()
	}
	return nil
}

// streamsPerCheck counts, per check, the probe streams its targets lead.
func streamsPerCheck(cfg *config.Config) []int {
	n := make([]int, len(cfg.Checks))
	for id, t := range cfg.Targets {
		if t.Leader() == uint32(id) && !t.Disabled() {
			n[t.Check]++
		}
	}
	return n
}

// concurrencyFor sizes a check's worker pool for the worst case, every probe
// running to its timeout: streams × timeout × the rate of probes at a
// hanging server (timeout / (gap + timeout) after completion, timeout / gap
// at a fixed rate), with headroom, between 4 and 4096.
func concurrencyFor(c *config.Check, streams int) int {
	need := float64(streams) * c.Timeout.Seconds() * c.TimeoutRate()
	n := int(need*1.25) + 4
	return min(max(n, 4), 4096)
}

// What the SYN prober takes of first probes: a burst its capture ring holds
// with room to spare, then a rate well below what one core sends and
// captures (bench/README.md: about 300,000 SYNs/s on two cores).
const (
	synFirstBurst = 4096
	synFirstRate  = 100_000
)

// synFirstPace is the pace of the first probes of every check the SYN
// prober runs, shared by them in the engine (one pacer for the one
// launcher): synFirstBurst at once, then synFirstRate, or the steady rate of
// all their streams together when that is higher. syn tells the checks the
// SYN prober runs (prober.New's choice). A wave of first probes
// thus never runs faster than the prober's comfortable rate unless the
// steady state needs more, and the last first probe leaves within an
// interval: after completion, later probes keep the phases the first ones
// took, so a wave squeezed into a part of the interval would stay one,
// probes late behind each other, at every round.
func synFirstPace(cfg *config.Config, streams []int, syn []bool) scheduler.Pace {
	steady := 0.0
	for ci, c := range cfg.Checks {
		if syn[ci] {
			steady += float64(streams[ci]) / c.Interval.Seconds()
		}
	}
	return scheduler.Pace{Rate: max(synFirstRate, steady), Burst: synFirstBurst}
}

// firstProbePace paces the first probes of a check's streams to what its
// launcher takes: burst at once, then rate per second (a worker pool: its
// workers at once, then as many per timeout, so that even a fleet of
// hanging servers never leaves a first probe queued past its deadline).
// It is never slower than the check's own steady rate, so the last first
// probe leaves within one interval of the start at most.
func firstProbePace(c *config.Check, streams, burst int, rate float64) scheduler.Pace {
	return scheduler.Pace{Rate: max(rate, float64(streams)/c.Interval.Seconds()), Burst: burst}
}
