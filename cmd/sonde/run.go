package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/config/watch"
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
	shards    int
	shard     config.Shard
	watch     bool
	stateFile string
	stateGap  time.Duration
}

// runRun runs the daemon until SIGINT or SIGTERM; SIGHUP, and a change of
// the configuration's files unless -watch=false, reload it.
func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
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
	fs.IntVar(&f.shards, "shards", 0, "scheduler shards (default: one per CPU)")
	fs.BoolVar(&f.watch, "watch", true, "reload the -config file by itself when its content, or that of a file it names, changes")
	shardFlag(fs, &f.shard, "probe only shard `i/N` of the targets: N processes with shards 0/N … N-1/N probe each target once")
	fs.StringVar(&f.stateFile, "state-file", "", "`file` keeping target states across restarts (saved periodically and at exit, restored at start)")
	fs.DurationVar(&f.stateGap, "state-interval", server.DefaultStateInterval, "`time` between two saves of -state-file")
	if err := fs.Parse(args); err != nil {
		return usageError(err)
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("run: unexpected argument %q", fs.Arg(0)))
	}
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
	opt := server.Options{Logger: log, Shards: f.shards, NoSyn: !f.syn, Version: buildVersion(), Shard: f.shard,
		StateFile: f.stateFile, StateInterval: f.stateGap}
	if opt.Syn, err = synFlags(f); err != nil {
		return usageError(err)
	}
	if f.demo {
		d, err := startDemo(ctx)
		if err != nil {
			return fmt.Errorf("start demo: %w", err)
		}
		defer d.Close()
		opt.Load = func() (*config.Config, error) { return config.Parse(d.Config, "", config.LoadOptions{Shard: f.shard}) }
		return serveDaemon(ctx, opt, f.listen, log, nil, func() { d.Banner(stdout, f.listen) })
	}
	path := f.config
	w := watchConfig(f.watch, path, log)
	opt.Load = func() (*config.Config, error) {
		cfg, err := config.Load(path, config.LoadOptions{Shard: f.shard})
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
	return serveDaemon(ctx, opt, f.listen, log, w, nil)
}

// watchConfig returns a watcher of the configuration file, or nil when
// watching is off or impossible (logged: SIGHUP still reloads). It is made
// before the first load, so that a change after that load is seen.
func watchConfig(on bool, path string, log *slog.Logger) *watch.Watcher {
	if !on {
		return nil
	}
	w, err := watch.New([]string{path}, watch.Options{Error: func(err error) { log.Warn("watching the configuration", "err", err) }})
	if err != nil {
		log.Warn("the configuration is not watched; SIGHUP reloads it", "err", err)
		return nil
	}
	return w
}

// serveDaemon starts the daemon and its HTTP server, reloads on SIGHUP and
// on every change w (which may be nil) reports, and stops gracefully when
// ctx is done. ready is called once both run.
func serveDaemon(ctx context.Context, opt server.Options, listen string, log *slog.Logger, w *watch.Watcher, ready func()) error {
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
	if err := d.Start(); err != nil {
		return err
	}
	defer d.Stop()
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	log.Info("serving", "listen", l.Addr().String())
	if ready != nil {
		ready()
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
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
	}()
	err = d.Serve(ctx, l)
	log.Info("stopping")
	return err
}

// synFlags turns the SYN prober flags into its settings.
func synFlags(f runFlags) (syn.Config, error) {
	var c syn.Config
	if f.source != "" {
		a, err := netip.ParseAddr(f.source)
		if err != nil {
			return c, fmt.Errorf("run: -source %q: want an IP address", f.source)
		}
		if a.Unmap().Is4() {
			c.Source4 = a.Unmap()
		} else {
			c.Source6 = a
		}
	}
	c.Interface = f.iface
	return c, nil
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
		*s, err = config.ParseShard(v)
		return err
	})
}
