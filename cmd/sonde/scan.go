package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/syn"
)

// maxScanProbes bounds one sweep (addresses × ports): the table, the
// prober's state and the results take about 45 bytes a probe, so this is
// under 1 GiB.
const maxScanProbes = 1 << 24

const scanUsage = `Usage: sonde scan [-port P[,P2…]] [-rate PPS] [-timeout D] [-retries N] [-source IP] [-interface IF] [-json] TARGET…

Sends one TCP SYN probe to every (address, port) and reports each as success
(SYN-ACK), refused (RST), unreachable (ICMP) or timeout. With -retries N, up
to N more passes send the SYN again to the endpoints that have not answered
-retry-wait after the pass before (same source port and cookie: an answer to
any of them counts once). TARGET is an address,
an address with a port (198.18.0.7:8080, [2001:db8::1]:443), a CIDR block or
@FILE (one target per line, # comments): the target grammar of config files.
A target's own port wins over -port. Results go to stdout, one line per probe;
progress (on a terminal) and a summary go to stderr.
Needs CAP_NET_RAW, and CAP_BPF with CAP_NET_ADMIN for the syn-bpf path
(without them replies are read with AF_PACKET: the syn-packet path).

Flags:
`

// scanFlags are the parsed flags of sonde scan.
type scanFlags struct {
	ports     []uint16
	rate      float64
	timeout   time.Duration
	retries   int
	retryWait time.Duration
	source    string
	iface     string
	json      bool
	path      string
	senders   int
	portRange string
	nextHop   string
	kernelRST bool
}

// runScan implements `sonde scan`: it parses flags and targets, runs one
// syn.Sweep and prints its results.
func runScan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runScanWith(ctx, args, stdout, stderr, syn.NewSweep)
}

// runScanWith is runScan with the constructor of the sweep, which opens the
// raw sockets: tests of refused input give one that sends nothing.
func runScanWith(ctx context.Context, args []string, stdout, stderr io.Writer, newSweep func(syn.SweepOptions) (*syn.Sweep, error)) error {
	sf, targets, err := parseScanFlags(args, stderr)
	if err != nil {
		return err
	}
	tab, err := scanTable(targets, sf.ports)
	if err != nil {
		return usageError(fmt.Errorf("scan: %w", err))
	}
	opts, err := sf.sweepOptions(tab)
	if err != nil {
		return usageError(err)
	}
	sw, err := newSweep(opts)
	if err != nil {
		if errors.Is(err, syn.ErrNoRawSocket) {
			return fmt.Errorf("sonde scan needs CAP_NET_RAW to send SYN probes (run as root, or grant it with setcap cap_net_raw,cap_bpf,cap_net_admin+ep): %w", err)
		}
		return fmt.Errorf("start SYN prober: %w", err)
	}
	defer sw.Close()

	var bar *progress
	if isTerminal(stderr) {
		bar = startProgress(stderr, tab.Len(), sw)
	}
	var ru0, ru1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	st, runErr := sw.Run(ctx)
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	if bar != nil {
		bar.stop()
	}
	if err := writeScanResults(stdout, tab, st.Sent, sw.Result, sf.json); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	writeScanSummary(stderr, st, cpuSeconds(ru1)-cpuSeconds(ru0))
	if runErr != nil {
		return fmt.Errorf("scan: %w", runErr)
	}
	return nil
}

func parseScanFlags(args []string, stderr io.Writer) (scanFlags, []string, error) {
	var sf scanFlags
	var ports string
	fs := newFlagSet("scan", scanUsage, stderr)
	fs.StringVar(&ports, "port", "", "TCP `ports` to probe on targets that give none: comma-separated, ranges like 8000-8010 allowed")
	fs.Float64Var(&sf.rate, "rate", 100000, "probes per second; 0 means as fast as possible")
	fs.DurationVar(&sf.timeout, "timeout", 3*time.Second, "how long to wait for a reply after a probe's latest SYN")
	fs.IntVar(&sf.retries, "retries", 0, "passes that send the SYN again to the endpoints without an answer (masscan's --retries, zmap's --probes)")
	fs.DurationVar(&sf.retryWait, "retry-wait", time.Second, "pause between the end of a pass and the next retry pass")
	fs.StringVar(&sf.source, "source", "", "source `IP` address (default: the route's source towards the first target)")
	fs.StringVar(&sf.iface, "interface", "", "interface that receives the replies (default: the one holding the source address)")
	fs.BoolVar(&sf.json, "json", false, `print one JSON object per probe: {"addr","port","outcome","rtt_seconds"}`)
	fs.StringVar(&sf.path, "path", "auto", "TCP probe `path`: auto (syn-bpf when eBPF loads, else syn-packet), syn-bpf (replies caught by eBPF) or syn-packet (replies read with AF_PACKET)")
	fs.IntVar(&sf.senders, "senders", runtime.GOMAXPROCS(0), "concurrent sender threads")
	fs.StringVar(&sf.nextHop, "next-hop-mac", "", "send Ethernet frames to this `MAC` through AF_PACKET instead of a raw IP socket (every target must be behind it)")
	fs.BoolVar(&sf.kernelRST, "kernel-rst", false, "leave the RST that answers each SYN-ACK to the kernel (by default the eBPF program sends it and the SYN-ACK never reaches the stack)")
	fs.StringVar(&sf.portRange, "source-ports", "", "source-port `range` FIRST-LAST (default 61000-65535, outside the kernel's ephemeral range)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return sf, nil, silentExit(exitOK)
		}
		return sf, nil, usageError(err)
	}
	var err error
	if sf.ports, err = parsePorts(ports); err != nil {
		return sf, nil, usageError(err)
	}
	switch {
	case fs.NArg() == 0:
		return sf, nil, usageError(errors.New("scan: no targets"))
	case sf.rate < 0 || math.IsNaN(sf.rate) || math.IsInf(sf.rate, 0):
		return sf, nil, usageError(fmt.Errorf("scan: -rate %v must be 0 or positive", sf.rate))
	case sf.timeout <= 0:
		return sf, nil, usageError(fmt.Errorf("scan: -timeout %v must be positive", sf.timeout))
	case sf.senders < 1 || sf.senders > 64:
		return sf, nil, usageError(fmt.Errorf("scan: -senders %d out of range 1-64", sf.senders))
	case sf.retries < 0 || sf.retries > syn.MaxSweepRetries:
		return sf, nil, usageError(fmt.Errorf("scan: -retries %d out of range 0-%d", sf.retries, syn.MaxSweepRetries))
	case sf.retryWait <= 0:
		return sf, nil, usageError(fmt.Errorf("scan: -retry-wait %v must be positive", sf.retryWait))
	}
	return sf, fs.Args(), nil
}

// sweepOptions turns the flags into the sweep's settings.
func (sf scanFlags) sweepOptions(tab *probe.Table) (syn.SweepOptions, error) {
	cfg := syn.Config{Table: tab, Lanes: sf.senders, Interface: sf.iface, Batch: 256, KernelRST: sf.kernelRST}
	switch p := probe.TCPPath(sf.path); p {
	case "auto":
	case probe.PathSynBPF, probe.PathSynPacket:
		cfg.Path = p
	default:
		return syn.SweepOptions{}, fmt.Errorf("scan: -path %q is not auto, %s or %s", sf.path, probe.PathSynBPF, probe.PathSynPacket)
	}
	if err := setSynSource(&cfg, sf.source); err != nil {
		return syn.SweepOptions{}, fmt.Errorf("scan: %w", err)
	}
	if sf.nextHop != "" {
		mac, err := net.ParseMAC(sf.nextHop)
		if err != nil {
			return syn.SweepOptions{}, fmt.Errorf("scan: -next-hop-mac: %w", err)
		}
		cfg.NextHopMAC = mac
	}
	if sf.portRange != "" {
		if !strings.Contains(sf.portRange, "-") {
			return syn.SweepOptions{}, fmt.Errorf("scan: -source-ports: %q is not a range FIRST-LAST", sf.portRange)
		}
		first, last, err := parsePortRange(sf.portRange)
		if err != nil {
			return syn.SweepOptions{}, fmt.Errorf("scan: -source-ports: %w", err)
		}
		cfg.Ports = syn.PortRange{First: first, Last: last}
	}
	return syn.SweepOptions{Prober: cfg, Rate: sf.rate, Timeout: sf.timeout, Retries: sf.retries, RetryWait: sf.retryWait}, nil
}

// parsePorts parses "80,443,8000-8010" (docs/semantics.md T4: ports 1–65535); ""
// gives no ports.
func parsePorts(s string) ([]uint16, error) {
	if s == "" {
		return nil, nil
	}
	var ports []uint16
	for _, f := range strings.Split(s, ",") {
		a, b, err := parsePortRange(f)
		if err != nil {
			return nil, fmt.Errorf("scan: -port: %w", err)
		}
		for p := int(a); p <= int(b); p++ {
			ports = append(ports, uint16(p))
		}
	}
	return ports, nil
}

// parsePortRange parses a port ("80") or a range of ports ("8000-8010"),
// with config's wording for a port out of range.
func parsePortRange(s string) (first, last uint16, err error) {
	s = strings.TrimSpace(s)
	lo, hi, isRange := strings.Cut(s, "-")
	if !isRange {
		hi = lo
	}
	var ends [2]uint16
	for i, text := range []string{lo, hi} {
		n, err := strconv.ParseUint(text, 10, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("%q is not a port or a range FIRST-LAST", s)
		}
		if n < 1 || n > 65535 {
			return 0, 0, fmt.Errorf("%d is out of range 1..65535", n)
		}
		ends[i] = uint16(n)
	}
	if ends[1] < ends[0] {
		return 0, 0, fmt.Errorf("%q has its start after its end", s)
	}
	return ends[0], ends[1], nil
}

// scanTable expands the targets (config's target grammar, with @FILE) into a
// table, in order: each address with its target's own port, or with every
// one of ports in turn.
func scanTable(targets []string, ports []uint16) (*probe.Table, error) {
	type block struct {
		p    netip.Prefix
		port uint16 // 0: every one of ports
	}
	var blocks []block
	total := 0
	err := config.ParseTargetArgs(targets, func(e config.TargetEntry) error {
		b := block{p: e.Block, port: e.Port}
		switch {
		case e.Host != "":
			return fmt.Errorf("%q is a host name: sonde scan takes IP addresses and CIDR blocks", e.Host)
		case e.Addr.IsValid():
			b.p = netip.PrefixFrom(e.Addr, e.Addr.BitLen())
		}
		perAddr := 1
		if b.port == 0 {
			if perAddr = len(ports); perAddr == 0 {
				what := b.p.String()
				if e.Addr.IsValid() {
					what = e.Addr.String()
				}
				return fmt.Errorf("%s has no port and -port is not set", what)
			}
		}
		// Worded as config's limit of targets, in probes: a sweep's size is
		// its addresses times their ports.
		what := "block " + b.p.String()
		if e.Addr.IsValid() {
			what = e.Addr.String()
		}
		bits := b.p.Addr().BitLen() - b.p.Bits()
		if bits >= 62 {
			return fmt.Errorf("%s has 2^%d addresses, more than the limit of %d probes", what, bits, maxScanProbes)
		}
		if n := 1 << bits; n > maxScanProbes {
			return fmt.Errorf("%s has %d addresses, more than the limit of %d probes", what, n, maxScanProbes)
		}
		if n := total + (1<<bits)*perAddr; n > maxScanProbes {
			return fmt.Errorf("%s brings the number of probes (addresses × ports) to %d, more than the limit of %d", what, n, maxScanProbes)
		}
		total += (1 << bits) * perAddr
		blocks = append(blocks, b)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if total == 0 {
		return nil, errors.New("no targets")
	}
	tab := probe.NewTable(total)
	for _, b := range blocks {
		for a := b.p.Addr(); a.IsValid() && b.p.Contains(a); a = a.Next() {
			if b.port != 0 {
				tab.Add(netip.AddrPortFrom(a, b.port))
				continue
			}
			for _, port := range ports {
				tab.Add(netip.AddrPortFrom(a, port))
			}
		}
	}
	return tab, nil
}
