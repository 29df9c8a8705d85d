package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/config/fleet"
	"github.com/sondeprobe/sonde/config/watch"
	"github.com/sondeprobe/sonde/internal/earlysignal"
	"github.com/sondeprobe/sonde/internal/privilege"
	"github.com/sondeprobe/sonde/internal/safefile"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/endpoint"
	"github.com/sondeprobe/sonde/probe/syn"
	"github.com/sondeprobe/sonde/server"
)

// defaultListen is where the daemon serves metrics and the API unless told
// otherwise: loopback, so nothing is exposed by accident.
const defaultListen = "127.0.0.1:9123"

// runFlags are the flags of sonde run.
type runFlags struct {
	config    string
	listen    string
	demo      bool
	logLevel  string
	logFormat string
	syn       bool
	source    string
	iface     string
	kernelRST bool
	shards    int
	shard     config.Shard
	watch     bool
	stateFile string
	stateGap  time.Duration
	web       server.WebOptions
	history   int
}

// runRun runs the daemon until SIGINT or SIGTERM; SIGHUP, and a change of
// the configuration's files unless -watch=false, reload it. SIGHUP is caught
// from the process's first moments (package earlysignal): one that arrives
// while the daemon starts reloads once it has started.
func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	hup := earlysignal.Hangups()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f runFlags
	fs.StringVar(&f.config, "config", "", "configuration `file`")
	fs.StringVar(&f.listen, "listen", defaultListen, "`address` for /metrics, the API and /-/ endpoints")
	fs.BoolVar(&f.demo, "demo", false, "start demo backends on loopback and probe them with a built-in configuration")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `level`: debug (every probe), info (state changes), warn, error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log `format`: text or json")
	fs.BoolVar(&f.syn, "syn", true, "let TCP checks in tcp_mode auto use the raw-socket SYN prober when privileged")
	fs.StringVar(&f.source, "source", "", "source `address` of SYN probes (default: the route's source)")
	fs.StringVar(&f.iface, "interface", "", "`interface` whose ingress carries SYN replies (default: the source address's)")
	fs.BoolVar(&f.kernelRST, "kernel-rst", false, "leave the RST that answers each SYN-ACK to the kernel (by default the eBPF capture program sends it)")
	fs.IntVar(&f.shards, "shards", 0, "scheduler shards (default: one per CPU)")
	fs.BoolVar(&f.watch, "watch", true, "reload the -config file by itself when its content, or that of a file it names, changes")
	fs.StringVar(&f.web.RoutePrefix, "web.route-prefix", "", "serve every endpoint under this `path` (/sonde: the status page at /sonde/), for a reverse proxy that forwards one")
	fs.IntVar(&f.history, "web.history-targets", 0, "how many `targets` keep their recent results for the status page's timelines (default 1024)")
	shardFlag(fs, &f.shard, "probe only shard `i/N` of the targets: N processes with shards 0/N … N-1/N probe each target once")
	fs.StringVar(&f.stateFile, "state-file", "", "`file` keeping target states across restarts (saved periodically and at exit, restored at start)")
	fs.DurationVar(&f.stateGap, "state-interval", server.DefaultStateInterval, "`time` between two saves of -state-file")
	fs.BoolVar(&f.web.EnableLifecycle, "web.enable-lifecycle", false, "allow POST /-/reload (otherwise 403)")
	fs.Func("web.allowed-hosts", "comma-separated host `names` requests may name in Host when -listen is on loopback (besides IP addresses and localhost)", func(v string) error {
		for h := range strings.SplitSeq(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				f.web.AllowedHosts = append(f.web.AllowedHosts, h)
			}
		}
		return nil
	})
	probeOn := fs.Bool("web.enable-probe", true, "serve /probe, blackbox_exporter's endpoint (false: it answers 403); each check's probe_targets says what it may probe")
	fs.IntVar(&f.web.MaxConnections, "web.max-connections", 512, "most open HTTP `connections` (at most a quarter of the file descriptor limit)")
	if err := fs.Parse(args); err != nil {
		return usageError(err)
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("run: unexpected argument %q", fs.Arg(0)))
	}
	f.web.DisableProbe = !*probeOn
	if (f.config == "") == !f.demo {
		return usageError(errors.New("run: give either -config FILE or -demo"))
	}
	log, err := newLogger(stderr, f.logLevel, f.logFormat)
	if err != nil {
		return usageError(err)
	}
	if f.stateGap <= 0 {
		return usageError(fmt.Errorf("run: -state-interval %v: want a positive duration", f.stateGap))
	}
	if f.web.MaxConnections < 1 {
		return usageError(fmt.Errorf("run: -web.max-connections %d: want 1 or more", f.web.MaxConnections))
	}
	if host, _, err := net.SplitHostPort(f.listen); err == nil && host != "" {
		f.web.AllowedHosts = append(f.web.AllowedHosts, host) // the name the operator listens on
	}
	if f.history < 0 || f.history > server.MaxHistoryTargets {
		return usageError(fmt.Errorf("run: -web.history-targets %d: want a number of targets 1..%d, or 0 for the default", f.history, server.MaxHistoryTargets))
	}
	// One resolver for the loads and for the daemon, which looks host
	// names up again as their answers expire.
	res := &endpoint.DNSResolver{}
	opt := server.Options{Logger: log, Shards: f.shards, NoSyn: !f.syn, Version: buildVersion(), Revision: buildRevision(), Shard: f.shard, Web: f.web,
		StateFile: f.stateFile, StateInterval: f.stateGap, HistoryTargets: f.history, Resolver: res}
	if opt.Syn, err = synFlags(f); err != nil {
		return usageError(err)
	}
	if f.demo {
		d, err := startDemo(ctx)
		if err != nil {
			return fmt.Errorf("start demo: %w", err)
		}
		defer d.Close()
		opt.Load = func() (*config.Config, error) {
			return config.Parse(d.Config, "", config.LoadOptions{Shard: f.shard, Resolver: res})
		}
		return serveDaemon(ctx, opt, f.listen, hup, nil, func() { d.Banner(stdout, f.listen, opt.Web.RoutePrefix) })
	}
	path := f.config
	w := watchConfig(ctx, f.watch, path, log)
	opt.Load = func() (*config.Config, error) {
		// ctx ends at SIGTERM: a load waiting on a file then fails at once.
		cfg, err := config.Load(path, config.LoadOptions{Context: ctx, Shard: f.shard, Resolver: res})
		if err != nil {
			// A config that cannot be loaded is exit 2, as in "sonde config
			// check", when it stops the start; a reload only logs it.
			return nil, usageError(fmt.Errorf("%s: %w", filepath.Clean(path), err))
		}
		if w != nil {
			w.SetFiles(cfg.Files)
		}
		return cfg, nil
	}
	return serveDaemon(ctx, opt, f.listen, hup, w, nil)
}

// watchConfig returns a watcher of the configuration file, or nil when
// watching is off or impossible (logged: SIGHUP still reloads). It is made
// before the first load, so that a change after that load is seen; ctx
// bounds its first reading of the file.
func watchConfig(ctx context.Context, on bool, path string, log *slog.Logger) *watch.Watcher {
	if !on {
		return nil
	}
	w, err := watch.New(ctx, []safefile.File{{Path: path, Max: safefile.MaxConfig}}, watch.Options{Error: func(err error) { log.Warn("watching the configuration", "err", err) }})
	if err != nil {
		log.Warn("the configuration is not watched; SIGHUP reloads it", "err", err)
		return nil
	}
	return w
}

// serveDaemon listens, starts the daemon, reloads it on every signal from
// hup and every change w (which may be nil) reports, and stops gracefully
// when ctx is done. The HTTP server runs from the start (/-/ready answers
// 503 until a configuration runs); ready is called once the daemon has
// started. A ctx done during the start ends it as soon as the start
// completes, with no error.
func serveDaemon(ctx context.Context, opt server.Options, listen string, hup <-chan os.Signal, w *watch.Watcher, ready func()) error {
	log := opt.Logger
	if n, err := raiseFileLimit(); err != nil {
		log.Warn("raising the file descriptor limit", "err", err)
	} else {
		log.Debug("file descriptor limit", "nofile", n)
	}
	var changes <-chan struct{} // nil: never
	if w != nil {
		changes = w.Changes()
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			if err := w.Run(wctx); err != nil {
				log.Warn("the configuration is no longer watched; SIGHUP reloads it", "err", err)
			}
		}()
	}
	d, err := server.New(opt)
	if err != nil {
		return err
	}
	// Listen before the first load, on purpose: a load of a million
	// targets takes seconds, and meanwhile /-/healthy answers and /-/ready
	// says 503 (the Kubernetes startup and liveness probes, and tools
	// waiting for the daemon, see it start rather than a refused port).
	// So the server's "listening" comes before a first load that may still
	// fail; "serving" below says a configuration runs.
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	httpCtx, stopHTTP := context.WithCancel(context.Background())
	defer stopHTTP()
	served := make(chan error, 1)
	go func() { served <- d.Serve(httpCtx, l) }()
	stop := func() error {
		stopHTTP()
		return <-served
	}
	// A SIGTERM during the start stops the daemon at once: Stop gives up
	// the start's reads of files, and the start ends.
	stopEarly := context.AfterFunc(ctx, func() { _ = d.Stop() })
	if err := d.Start(); err != nil {
		stopEarly()
		if ctx.Err() != nil {
			log.Info("stopping", "during", "start", "err", err)
			return stop()
		}
		if errors.Is(err, server.ErrStateFile) {
			err = usageError(err) // -state-file names a file sonde cannot use
		}
		return errors.Join(err, stop())
	}
	stopEarly()
	defer func() {
		if err := d.Stop(); err != nil {
			log.Error("stop", "err", err)
		}
	}()
	path, _ := d.TCPPath()
	dropPrivileges(log, opt.NoSyn, path != probe.PathConnect, d.PassiveRuns())
	log.Info("serving", "listen", l.Addr().String()) // a configuration runs
	if ready != nil && ctx.Err() == nil {
		ready()
	}
	rctx, stopReloads := context.WithCancel(ctx)
	defer stopReloads() // before d.Stop, which fails a reload a signal may still wait for
	go reloadOn(rctx, d, hup, changes, log)
	select {
	case <-ctx.Done():
		log.Info("stopping")
		return stop()
	case err := <-served:
		return err
	}
}

// reloadOn reloads d on every signal from hup and every change from changes
// until ctx is done. It runs apart from serveDaemon's wait for the end: a
// reload waits for its turn (at most one a second), and a SIGTERM meanwhile
// stops the daemon at once. Signals that arrive during a reload are answered
// by one reload after it.
func reloadOn(ctx context.Context, d *server.Daemon, hup <-chan os.Signal, changes <-chan struct{}, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = d.Reload() // logged by the daemon; the old configuration keeps running
		case <-changes:
			log.Info("configuration changed on disk")
			_ = d.Reload()
		}
	}
}

// dropPrivileges drops the capabilities the daemon no longer needs once its
// raw sockets, eBPF program and listener are open, and sets no_new_privs.
// It keeps CAP_NET_RAW, CAP_BPF and CAP_NET_ADMIN (those the process has)
// while a reload can still start a SYN prober or one runs (synRuns). The
// SYN prober persists across reloads, but a reload starts one when TCP
// checks that want it arrive with none running (or come back after the
// last one went), when targets of an address family it has no source
// address for arrive, or to try again after one failed to start; and
// closing one removes its TC filter, which takes CAP_NET_ADMIN. With
// -syn=false (noSyn) only checks in tcp_mode syn start one: when none runs
// after the start, the three go too, and a reload that adds such a check is
// rejected. While the passive observer runs (passiveRuns) it keeps CAP_BPF
// and CAP_PERFMON, which a reload that watches more targets than the
// observer was opened for needs to open a larger one; when the first
// configuration watches nothing they go, and a reload that adds a passive
// block runs without passive evidence, saying so.
func dropPrivileges(log *slog.Logger, noSyn, synRuns, passiveRuns bool) {
	var keep privilege.Set
	if !noSyn || synRuns {
		keep = privilege.Of(unix.CAP_NET_RAW, unix.CAP_BPF, unix.CAP_NET_ADMIN)
	}
	if passiveRuns {
		keep |= privilege.Of(unix.CAP_BPF, unix.CAP_PERFMON)
	}
	res, err := privilege.Drop(keep)
	if err != nil {
		log.Warn("capabilities not dropped", "err", err)
		return
	}
	attrs := []any{"kept", res.Kept, "dropped", res.Dropped, "bounding_set", res.Bounding, "no_new_privs", true}
	if res.Kept != 0 {
		attrs = append(attrs, "kept_for", "reloads that start a SYN prober (the first TCP check, a new address family, a retry) or close one, or that watch more targets passively")
	}
	log.Info("capabilities dropped", attrs...)
}

// raiseFileLimit raises the soft RLIMIT_NOFILE to the hard limit (the Go
// runtime does too, on most versions) and returns it: every probe and API
// connection takes a descriptor.
func raiseFileLimit() (uint64, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("getrlimit: %w", err)
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
			return 0, fmt.Errorf("setrlimit: %w", err)
		}
	}
	return rl.Cur, nil
}

// synFlags turns the SYN prober flags into its settings.
func synFlags(f runFlags) (syn.Config, error) {
	c := syn.Config{Interface: f.iface, KernelRST: f.kernelRST}
	if err := setSynSource(&c, f.source); err != nil {
		return c, fmt.Errorf("run: %w", err)
	}
	return c, nil
}

// setSynSource sets the source address of the SYN prober c from the value
// of a -source flag ("" for the route's choice), parsed as a check's
// source_address is.
func setSynSource(c *syn.Config, source string) error {
	if source == "" {
		return nil
	}
	a, err := config.ParseSourceAddress(source)
	if err != nil {
		return fmt.Errorf("-source: %w", err)
	}
	if a.Is4() {
		c.Source4 = a
	} else {
		c.Source6 = a
	}
	return nil
}

// newLogger returns a slog logger writing to w.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want text or json", format)
}

// shardFlag defines -shard i/N on fs, parsed into s.
func shardFlag(fs *flag.FlagSet, s *config.Shard, usage string) {
	fs.Func("shard", usage, func(v string) error {
		var err error
		*s, err = fleet.ParseShard(v)
		return err
	})
}
