package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	httpprobe "github.com/sondeprobe/sonde/probe/http"
	"github.com/sondeprobe/sonde/probe/syn"
	"github.com/sondeprobe/sonde/probe/tcp"
	"github.com/sondeprobe/sonde/scheduler"
)

// HTTPOptions maps an HTTP or HTTPS check's effective settings onto the HTTP
// prober's options, reading the probe token's secret when the check has one.
func HTTPOptions(c *config.Check) (httpprobe.Options, error) {
	o := httpprobe.Options{
		Scheme:       c.Protocol.String(),
		Method:       c.Method,
		Path:         c.Path,
		Healthy:      &c.HealthyStatus,
		Body:         c.BodyContains,
		MaxBodyBytes: int64(c.MaxBodyBytes),
		Host:         c.Host,
		SNI:          c.SNI,
		UserAgent:    c.UserAgent,
		Source:       c.SourceAddress,
	}
	if len(c.Headers) > 0 {
		o.Headers = make(http.Header, len(c.Headers))
		for k, v := range c.Headers {
			o.Headers.Set(k, v)
		}
	}
	if t := c.TLS; t != nil {
		o.TLS = httpprobe.TLSOptions{
			CAFile:             t.CAFile,
			CertFile:           t.CertFile,
			KeyFile:            t.KeyFile,
			InsecureSkipVerify: t.InsecureSkipVerify,
		}
		if t.ServerName != "" && o.SNI == "" {
			o.SNI = t.ServerName
		}
	}
	if a := c.AuthToken; a != nil {
		var err error
		switch {
		case a.SecretFile != "":
			o.Token, err = httpprobe.TokenFromFile(a.SecretFile)
		default:
			o.Token, err = httpprobe.TokenFromEnv(a.SecretEnv)
		}
		if err != nil {
			return o, fmt.Errorf("check %s: auth_token: %w", c.Name, err)
		}
	}
	return o, nil
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
		var p probe.Prober
		switch {
		case c.Protocol == config.TCP && ls.useSyn(c):
			ls.byCheck[ci] = ls.syn
			continue
		case c.Protocol == config.TCP:
			p = tcp.New(tcp.Options{Source: c.SourceAddress})
		default:
			o, err := HTTPOptions(c)
			if err != nil {
				ls.close()
				return nil, err
			}
			hp, err := httpprobe.New(o)
			if err != nil {
				ls.close()
				return nil, fmt.Errorf("check %s: %w", c.Name, err)
			}
			p = hp
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

// useSyn reports whether TCP check c runs on the SYN prober.
func (ls *launchers) useSyn(c *config.Check) bool {
	return ls.syn != nil && c.TCPMode != config.TCPConnect
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
