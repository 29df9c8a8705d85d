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
	stateFile string
	stateGap  time.Duration
}

// runRun runs the daemon until SIGINT or SIGTERM; SIGHUP reloads the
// configuration.
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
	opt := server.Options{Logger: log, Shards: f.shards, NoSyn: !f.syn, Version: buildVersion(), StateFile: f.stateFile, StateInterval: f.stateGap}
	if opt.Syn, err = synFlags(f); err != nil {
		return usageError(err)
	}
	if f.demo {
		d, err := startDemo(ctx)
		if err != nil {
			return fmt.Errorf("start demo: %w", err)
		}
		defer d.Close()
		opt.Load = func() (*config.Config, error) { return config.Parse(d.Config, "", config.LoadOptions{}) }
		return serveDaemon(ctx, opt, f.listen, log, func() { d.Banner(stdout, f.listen) })
	}
	path := f.config
	opt.Load = func() (*config.Config, error) {
		cfg, err := config.Load(path, config.LoadOptions{})
		if err != nil {
			// A config that cannot be loaded is exit 2, as in "sonde config
			// check", when it stops the start; a reload only logs it.
			return nil, usageError(fmt.Errorf("%s: %w", filepath.Clean(path), err))
		}
		return cfg, nil
	}
	return serveDaemon(ctx, opt, f.listen, log, nil)
}

// serveDaemon starts the daemon and its HTTP server, reloads on SIGHUP, and
// stops gracefully when ctx is done. ready is called once both run.
func serveDaemon(ctx context.Context, opt server.Options, listen string, log *slog.Logger, ready func()) error {
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
