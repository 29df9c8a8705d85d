package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	httpprobe "github.com/sondeprobe/sonde/probe/http"
	"github.com/sondeprobe/sonde/probe/syn"
	"github.com/sondeprobe/sonde/probe/tcp"
	"github.com/sondeprobe/sonde/scheduler"
)

// ErrNoSyn is returned (wrapped) by [NewProber] for a check in tcp_mode syn
// when the caller has no SYN prober.
var ErrNoSyn = errors.New("tcp_mode syn needs the SYN prober")

// NewProber picks the prober of check c, the one choice the daemon and
// `sonde probe` share. A TCP check runs on the caller's SYN prober when the
// caller has one (synReady) and c's tcp_mode is not connect: then NewProber
// returns useSyn true and no prober. Otherwise it returns c's one-shot
// prober: the HTTP prober for HTTP and HTTPS checks, connect() for TCP
// checks; a TCP check in tcp_mode syn without a SYN prober is an error.
func NewProber(c *config.Check, synReady bool) (p probe.Reporter, useSyn bool, err error) {
	switch {
	case c.Protocol != config.TCP:
		o, err := c.HTTPOptions()
		if err != nil {
			return nil, false, fmt.Errorf("check %s: %w", c.Name, err)
		}
		hp, err := httpprobe.New(o)
		if err != nil {
			return nil, false, fmt.Errorf("check %s: %w", c.Name, err)
		}
		return hp, false, nil
	case synReady && c.TCPMode != config.TCPConnect:
		return nil, true, nil
	case c.TCPMode == config.TCPSyn:
		return nil, false, fmt.Errorf("check %s: %w", c.Name, ErrNoSyn)
	}
	return tcp.New(c.TCPOptions()), false, nil
}

// launchers builds one launcher per check: a Workers pool per HTTP(S) and
// connect() check, and one SYN prober shared by every TCP check that uses it.
type launchers struct {
	byCheck []probe.Launcher
	workers []*probe.Workers
	syn     *syn.Prober
	tcpPath probe.TCPPath
	synErr  error // why TCP checks in auto mode fell back to connect(), if they did
}

// buildLaunchers creates the probers of cfg's checks. Results go to sink;
// onReport sees the detail of every one-shot probe.
func buildLaunchers(cfg *config.Config, opt *Options, sink probe.Sink, clock scheduler.Clock, shards int, onReport func(uint32, *probe.Report)) (*launchers, error) {
	ls := &launchers{byCheck: make([]probe.Launcher, len(cfg.Checks)), tcpPath: probe.PathConnect}
	target := func(id uint32) probe.Target {
		t := cfg.Targets[id]
		return probe.Target{Addr: t.Addr, Port: t.Port, Host: cfg.Hostnames[id]}
	}
	if err := ls.startSyn(cfg, opt, sink, shards); err != nil {
		return nil, err
	}
	streams := streamsPerCheck(cfg)
	for ci, c := range cfg.Checks {
		p, useSyn, err := NewProber(c, ls.syn != nil)
		if err != nil {
			ls.close()
			return nil, err
		}
		if useSyn {
			ls.byCheck[ci] = ls.syn
			continue
		}
		w, err := probe.NewWorkers(probe.WorkersOptions{
			Prober:      p,
			Target:      target,
			Sink:        sink,
			Now:         clock.Nanotime,
			Concurrency: concurrencyFor(c, streams[ci]),
			OnReport:    onReport,
		})
		if err != nil {
			ls.close()
			return nil, fmt.Errorf("check %s: %w", c.Name, err)
		}
		ls.byCheck[ci] = w
		ls.workers = append(ls.workers, w)
	}
	return ls, nil
}

// startSyn starts the SYN prober when a TCP check wants it. A check in syn
// mode needs it; in auto mode its failure falls back to connect().
func (ls *launchers) startSyn(cfg *config.Config, opt *Options, sink probe.Sink, shards int) error {
	need, must := false, false
	for _, c := range cfg.Checks {
		if c.Protocol == config.TCP && c.TCPMode != config.TCPConnect {
			need = true
			must = must || c.TCPMode == config.TCPSyn
		}
	}
	if !need || (opt.NoSyn && !must) {
		if opt.NoSyn {
			ls.synErr = errors.New("disabled by -syn=false")
		}
		return nil
	}
	table := probe.NewTable(len(cfg.Targets))
	for _, t := range cfg.Targets {
		table.Add(t.AddrPort())
	}
	sc := opt.Syn
	sc.Table, sc.Sink, sc.Lanes = table, sink, shards
	p, err := syn.New(sc)
	if err != nil {
		if must {
			return fmt.Errorf("tcp_mode syn: %w", err)
		}
		ls.synErr = err
		return nil
	}
	ls.syn = p
	ls.tcpPath = p.Path()
	return nil
}

// run runs the worker pools until ctx is done.
func (ls *launchers) run(ctx context.Context) {
	done := make(chan struct{}, len(ls.workers))
	for _, w := range ls.workers {
		go func() {
			_ = w.Run(ctx) // only fails when run twice, which run never does
			done <- struct{}{}
		}()
	}
	for range ls.workers {
		<-done
	}
}

// close releases the SYN prober's sockets and eBPF objects.
func (ls *launchers) close() error {
	if ls.syn != nil {
		return ls.syn.Close()
	}
	return nil
}

// streamsPerCheck counts, per check, the probe streams its targets lead.
func streamsPerCheck(cfg *config.Config) []int {
	n := make([]int, len(cfg.Checks))
	for id, t := range cfg.Targets {
		if t.Leader == uint32(id) && !t.Disabled {
			n[t.Check]++
		}
	}
	return n
}

// concurrencyFor sizes a check's worker pool for the worst case, every probe
// running to its timeout: streams × timeout / (interval + timeout), with
// headroom, between 4 and 4096.
func concurrencyFor(c *config.Check, streams int) int {
	gap := c.Interval
	if c.FastRecheck > 0 && c.FastRecheck < gap {
		gap = c.FastRecheck
	}
	cycle := gap + c.Timeout
	need := float64(streams) * float64(c.Timeout) / float64(cycle)
	n := int(need*1.25) + 4
	return min(max(n, 4), 4096)
}
