package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/sondeprobe/sonde/bench"
	"github.com/sondeprobe/sonde/bench/ceiling"
	"github.com/sondeprobe/sonde/bench/connload"
	"github.com/sondeprobe/sonde/bench/fleet"
	"github.com/sondeprobe/sonde/config"
)

const benchUsage = `Usage: sonde bench [-scenario NAME[,NAME…]] [-fleet xdp|kernel|both] [-json] [-keep] [-quick] [flags]
       sonde bench ceiling -interface IF -source IP -next-hop-mac MAC -port P PREFIX
       sonde bench connect-load -port P [-rate N] [-duration D] PREFIX…
       sonde bench tls-loop -port P [-targets N] [-concurrency N] [-duration D] PREFIX

Builds a private test fleet (two network namespaces joined by a veth; the
fleet side answers for 198.18.0.0/15, with known subsets dropped and
rejected), runs the scenarios against it and prints what they measured, with
the machine they ran on. Nothing leaves the two namespaces. The fleet is
removed at the end, also on Ctrl-C, unless -keep. Needs root.

Scenarios (default: all but faults and passive, in this order):
  sweep    sonde scan of the whole fleet as fast as it stays exact
  steady   sonde run with -targets TCP targets at -interval for -duration
  detect   a slice of the fleet starts dropping; time to unhealthy vs W1/W3
  http     HTTP probes/s (new connection per probe) against ab, HTTPS
           probes/s against a Go TLS client loop, and connect() probes/s
  compare  zmap, masscan and blackbox_exporter on the same fleet, if installed
  faults   the same healthy targets probed by raw SYN, connect() and HTTP
           while the link loses, duplicates, reorders or delays packets, or
           the prober is starved (-faults): false "unhealthy" per minute, and
           the detection of a real outage under the same fault (~10 min)
  passive  passive evidence: a client process connects to the targets; some
           start refusing: time to unhealthy at interval 30s with and
           without a passive block (~3 min); the observer's CPU at 20,000
           connections/s with and without it; its maps for 1M targets

Two fleets answer for the same addresses with the same ground truth: the
kernel's (listeners and nftables rules in the fleet namespace) and an XDP
program that answers SYNs on the fleet's veth, so the fleet's TCP stack does
no work per probe. -fleet selects the fleets of sweep, steady and compare
(default: both for sweep and compare, xdp for steady); detect and http need
the kernel's. Every sweep is compared with the same-run ceiling: "sonde bench
ceiling", a minimal sender (TX ring, batched eBPF capture, no scheduler) that
the bench runs in the prober namespace, which can also be run by hand.

Flags:
`

// runBench implements `sonde bench`.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "ceiling" {
		return runBenchCeiling(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "connect-load" {
		return runBenchConnectLoad(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "tls-loop" {
		return runBenchTLSLoop(ctx, args[1:], stderr)
	}
	fs := newFlagSet("bench", benchUsage, stderr)
	var (
		scenarios []string
		asJSON    bool
		opt       bench.Options
		quiet     bool
		binary    string
	)
	fs.Func("scenario", "scenario `names` to run, comma-separated or repeated (default all but faults)", func(s string) error {
		for _, n := range strings.Split(s, ",") {
			if n = strings.TrimSpace(n); n != "" {
				scenarios = append(scenarios, n)
			}
		}
		return nil
	})
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fs.Func("fleet", "fleet of sweep, steady and compare: `xdp`, kernel or both (default both for sweep and compare, xdp for steady)", func(s string) error {
		f, err := bench.ParseFleetChoice(s)
		opt.Fleet = f
		return err
	})
	fs.Func("xdp-mode", "how the XDP fleet's responder is attached to its veth: `generic` (skb) or native (default generic)", func(s string) error {
		m, err := fleet.ParseXDPMode(s)
		opt.XDP = m
		return err
	})
	fs.BoolVar(&opt.Keep, "keep", false, "keep the fleet's namespaces and the run's files (configs, outputs) after the run; the report names them")
	fs.BoolVar(&opt.Quick, "quick", false, "a smoke run of a few seconds per scenario on a small part of the fleet")
	fs.IntVar(&opt.Runs, "runs", 0, "repetitions of each sweep, and rounds of compare; medians are reported (default 3, 1 with -quick)")
	fs.IntVar(&opt.Steady.Targets, "targets", 0, "steady: TCP targets, (address, port) pairs over the fleet (default 1000000)")
	fs.DurationVar(&opt.Steady.Interval, "interval", 0, "steady: probe interval of every target (default 10s)")
	fs.DurationVar(&opt.Steady.Duration, "duration", 0, "steady: how long the steady state is measured (default 60s)")
	fs.DurationVar(&opt.HTTPDuration, "http-duration", 0, "http and compare: length of each rate measurement (default 5s)")
	fs.Func("faults", "faults: the `faults` to run, comma-separated: "+strings.Join(bench.FaultNames(), ", ")+" (default all)", func(s string) error {
		for _, n := range strings.Split(s, ",") {
			if n = strings.TrimSpace(n); n != "" {
				if !slices.Contains(bench.FaultNames(), n) {
					return fmt.Errorf("unknown fault %q; want %s", n, strings.Join(bench.FaultNames(), ", "))
				}
				opt.Faults = append(opt.Faults, n)
			}
		}
		return nil
	})
	fs.DurationVar(&opt.FaultDuration, "fault-duration", 0, "faults: how long each fault is measured before the outage (default 60s, 10s with -quick)")
	fs.BoolVar(&quiet, "q", false, "no progress lines on stderr")
	fs.StringVar(&binary, "sonde", "", "sonde `binary` that runs the scans and daemons (default: this one)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return silentExit(exitOK)
		}
		return usageError(err)
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("bench: unexpected argument %q", fs.Arg(0)))
	}
	for _, n := range scenarios {
		if !slices.Contains(bench.Scenarios, n) {
			return usageError(fmt.Errorf("bench: unknown scenario %q; want %s", n, strings.Join(bench.Scenarios, ", ")))
		}
	}
	opt.Scenarios = scenarios
	if d := opt.FaultDuration; d != 0 && (d < 5*time.Second || d > time.Hour) {
		return usageError(fmt.Errorf("bench: -fault-duration %v out of range 5s-1h", d))
	}
	if os.Geteuid() != 0 {
		return errors.New("sonde bench needs root: it creates network namespaces, a veth pair, routes and firewall rules, and runs the SYN prober (run it with sudo)")
	}
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench: find the sonde binary: %w", err)
		}
		binary = exe
	}
	opt.Binary, opt.Version = binary, buildVersion()
	if !quiet {
		log := slog.New(slog.NewTextHandler(stderr, nil))
		opt.Progress = func(msg string, args ...any) { log.Info(msg, args...) }
	}
	rep, runErr := bench.Run(ctx, opt)
	if rep != nil {
		var werr error
		if asJSON {
			werr = rep.WriteJSON(stdout)
		} else {
			werr = rep.WriteTable(stdout)
		}
		if werr != nil {
			return errors.Join(runErr, fmt.Errorf("write report: %w", werr))
		}
	}
	if runErr != nil {
		return fmt.Errorf("bench: %w", runErr)
	}
	for _, s := range rep.Scenarios {
		if s.Status == bench.StatusFailed {
			return fmt.Errorf("bench: scenario %s failed: %s", s.Name, s.Error)
		}
	}
	return nil
}

const ceilingUsage = `Usage: sonde bench ceiling -interface IF -source IP -next-hop-mac MAC -port P [-senders N] [-timeout D] PREFIX

Sweeps every address of PREFIX on one port with the bench's same-run ceiling:
sonde's SYNs and cookies written straight into PACKET_MMAP TX rings, replies
read in bulk from sonde's eBPF capture (which answers each SYN-ACK with the
RST, as for sonde scan, unless -kernel-rst), no scheduler. sonde bench runs it
inside the prober namespace of its fleet (ip netns exec NS sonde bench
ceiling …). Results go to stdout as "addr:port<TAB>outcome<TAB>-", a summary
to stderr. Needs CAP_NET_RAW, CAP_BPF and CAP_NET_ADMIN.

Flags:
`

// runBenchCeiling implements `sonde bench ceiling`.
func runBenchCeiling(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench ceiling", ceilingUsage, stderr)
	var (
		cfg         ceiling.Config
		source, mac string
		port        uint
	)
	fs.StringVar(&cfg.Interface, "interface", "", "`interface` to send on and capture from (required)")
	fs.StringVar(&source, "source", "", "IPv4 source `address` (required)")
	fs.StringVar(&mac, "next-hop-mac", "", "`MAC` address every probe is sent to (required)")
	fs.UintVar(&port, "port", 0, "TCP `port` to probe (required)")
	fs.IntVar(&cfg.Senders, "senders", runtime.GOMAXPROCS(0), "sending threads, each with its own socket (default: one per CPU, as sonde scan)")
	fs.BoolVar(&cfg.Sendmmsg, "sendmmsg", false, "send batches with sendmmsg(2) instead of a PACKET_MMAP TX ring")
	fs.BoolVar(&cfg.KernelRST, "kernel-rst", false, "leave the RST that answers each SYN-ACK to the kernel (by default the eBPF capture program sends it, as for sonde scan)")
	fs.DurationVar(&cfg.Timeout, "timeout", time.Second, "how long to wait for replies after the last probe")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return silentExit(exitOK)
		}
		return usageError(err)
	}
	if fs.NArg() != 1 {
		return usageError(errors.New("bench ceiling: want one PREFIX"))
	}
	var err error
	if cfg.Prefix, err = netip.ParsePrefix(fs.Arg(0)); err != nil {
		return usageError(fmt.Errorf("bench ceiling: %w", err))
	}
	if cfg.Source, err = config.ParseSourceAddress(source); err != nil {
		return usageError(fmt.Errorf("bench ceiling: -source: %w", err))
	}
	if cfg.NextHopMAC, err = net.ParseMAC(mac); err != nil {
		return usageError(fmt.Errorf("bench ceiling: -next-hop-mac: %w", err))
	}
	if port < 1 || port > 65535 {
		return usageError(fmt.Errorf("bench ceiling: -port: %d is out of range 1..65535", port))
	}
	cfg.Port = uint16(port)
	res, err := ceiling.Sweep(ctx, cfg)
	if res == nil {
		return err
	}
	bw := bufio.NewWriterSize(stdout, 1<<16)
	var line []byte
	for i := range res.Probes {
		line = res.Target(i).AppendTo(line[:0])
		line = append(line, '\t')
		line = append(line, res.Outcome(i).String()...)
		line = append(line, "\t-\n"...)
		_, _ = bw.Write(line)
	}
	if werr := bw.Flush(); werr != nil {
		return errors.Join(err, fmt.Errorf("write results: %w", werr))
	}
	sec := res.End.Sub(res.Start).Seconds()
	fmt.Fprintf(stderr, "ceiling: %d probes in %.3fs (%.0f probes/s); syn-ack %d, rst %d, unreachable %d, invalid %d, duplicate %d, ring drops %d; cpu %.3fs user+sys\n",
		res.Probes, sec, float64(res.Probes)/sec, res.SynAck, res.RST, res.Unreach, res.Invalid, res.Duplicate, res.RingDrops, res.CPU)
	return err
}

const connectLoadUsage = `Usage: sonde bench connect-load -port P [-rate N] [-duration D] [-count N] [-workers N] [-timeout D] PREFIX…

Connects to every address of the PREFIXes on port P in turn, at -rate
connections a second (0: as fast as it goes), until -count connections
were made or -duration passed, and closes each connection at once with an
RST. Prints one line of JSON: the connections by outcome and the CPU time
they took this process. sonde bench runs it in its prober namespace as the
client traffic of the passive scenario: a process other than sonde's, whose
connections the passive observer counts.

Flags:
`

// runBenchConnectLoad implements `sonde bench connect-load`.
func runBenchConnectLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench connect-load", connectLoadUsage, stderr)
	var (
		cfg  connload.Config
		port uint
	)
	fs.UintVar(&port, "port", 0, "TCP `port` to connect to (required)")
	fs.IntVar(&cfg.Rate, "rate", 0, "connections a `second`, all workers together (0: as fast as they go)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long the load lasts at most")
	fs.IntVar(&cfg.Count, "count", 0, "connections to make at most (default rate × duration)")
	fs.IntVar(&cfg.Workers, "workers", 2, "threads connecting in parallel")
	fs.DurationVar(&cfg.Timeout, "timeout", time.Second, "each connect's timeout")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return silentExit(exitOK)
		}
		return usageError(err)
	}
	if port < 1 || port > 65535 {
		return usageError(fmt.Errorf("bench connect-load: -port: %d is out of range 1..65535", port))
	}
	if cfg.Workers < 1 {
		return usageError(fmt.Errorf("bench connect-load: -workers: %d, want at least 1", cfg.Workers))
	}
	if cfg.Duration <= 0 {
		return usageError(fmt.Errorf("bench connect-load: -duration: %v, want more than 0", cfg.Duration))
	}
	if fs.NArg() == 0 {
		return usageError(errors.New("bench connect-load: want at least one PREFIX"))
	}
	const maxTargets = 1 << 16
	for _, a := range fs.Args() {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return usageError(fmt.Errorf("bench connect-load: %w", err))
		}
		if !p.Addr().Is4() || p.Bits() < 16 {
			return usageError(fmt.Errorf("bench connect-load: prefix %s: want IPv4, /16 or longer", p))
		}
		for x := p.Masked().Addr(); p.Contains(x) && len(cfg.Targets) <= maxTargets; x = x.Next() {
			cfg.Targets = append(cfg.Targets, netip.AddrPortFrom(x, uint16(port)))
		}
	}
	if len(cfg.Targets) > maxTargets {
		return usageError(fmt.Errorf("bench connect-load: more than %d targets", maxTargets))
	}
	if err := cfg.Validate(); err != nil {
		return usageError(err)
	}
	if err := loadStaysInside(cfg.Targets); err != nil {
		return err
	}
	res, err := connload.Run(ctx, cfg)
	if err != nil && res.Connections == 0 {
		return err
	}
	line, jerr := json.Marshal(res)
	if jerr != nil {
		return errors.Join(err, jerr)
	}
	if _, werr := fmt.Fprintf(stdout, "%s\n", line); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// loadStaysInside refuses a load to addresses other than loopback where
// the network namespace has an IPv4 default route: the load is for test
// fleets, whose prober namespaces route the fleet's prefix only, and must
// not leave the machine.
func loadStaysInside(targets []netip.AddrPort) error {
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return fmt.Errorf("bench connect-load: read the routes: %w", err)
	}
	if !hasDefaultRoute(string(b)) {
		return nil
	}
	for _, t := range targets {
		if !t.Addr().IsLoopback() {
			return fmt.Errorf("bench connect-load: %s is not loopback, and this network namespace has a default route: run it inside a test fleet's prober namespace (ip netns exec NS sonde bench connect-load …), which has none", t.Addr())
		}
	}
	return nil
}

// hasDefaultRoute reports whether /proc/net/route text has a route to
// 0.0.0.0/0.
func hasDefaultRoute(table string) bool {
	for i, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		// Iface Destination Gateway Flags RefCnt Use Metric Mask ...
		if i == 0 || len(f) < 8 {
			continue
		}
		if f[1] == "00000000" && f[7] == "00000000" {
			return true
		}
	}
	return false
}

const tlsLoopUsage = `Usage: sonde bench tls-loop -port P [-targets N] [-concurrency N] [-duration D] PREFIX

The http scenario's reference for HTTPS probes: a plain Go crypto/tls client
that does what one probe does, in a loop — a new connection, a full
handshake (no session cache, certificate not verified), one GET, the
response head and body read, an RST — to the first -targets
addresses of PREFIX in turn, -concurrency at a time, for -duration. A
summary goes to stderr.

`

// runBenchTLSLoop implements `sonde bench tls-loop`.
func runBenchTLSLoop(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("bench tls-loop", tlsLoopUsage, stderr)
	var (
		cfg           bench.TLSLoopConfig
		port, targets uint
	)
	fs.UintVar(&port, "port", 0, "TCP `port` of the HTTPS servers (required)")
	fs.UintVar(&targets, "targets", 256, "how many addresses of PREFIX, from its first")
	fs.IntVar(&cfg.Concurrency, "concurrency", 256, "requests in flight")
	fs.DurationVar(&cfg.Duration, "duration", 5*time.Second, "how long to run")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return silentExit(exitOK)
		}
		return usageError(err)
	}
	if fs.NArg() != 1 {
		return usageError(errors.New("bench tls-loop: want one PREFIX"))
	}
	p, err := netip.ParsePrefix(fs.Arg(0))
	if err != nil {
		return usageError(fmt.Errorf("bench tls-loop: %w", err))
	}
	if port < 1 || port > 65535 {
		return usageError(fmt.Errorf("bench tls-loop: -port: %d is out of range 1..65535", port))
	}
	if targets < 1 || targets > 1<<20 {
		return usageError(fmt.Errorf("bench tls-loop: -targets: %d is out of range 1..%d", targets, 1<<20))
	}
	a := p.Masked().Addr()
	for range targets {
		if !p.Contains(a) {
			return usageError(fmt.Errorf("bench tls-loop: -targets: %s has fewer than %d addresses", p, targets))
		}
		cfg.Targets = append(cfg.Targets, netip.AddrPortFrom(a, uint16(port)))
		a = a.Next()
	}
	res, err := bench.TLSLoop(ctx, cfg)
	sec := res.Elapsed.Seconds()
	fmt.Fprintf(stderr, "tls-loop: %d requests in %.3fs (%.0f requests/s); failed %d; cpu %.3fs user+sys\n",
		res.OK, sec, float64(res.OK)/max(sec, 1e-9), res.Failed, res.CPU.Seconds())
	if res.FirstErr != nil {
		fmt.Fprintf(stderr, "tls-loop: first failure: %v\n", res.FirstErr)
	}
	return err
}
