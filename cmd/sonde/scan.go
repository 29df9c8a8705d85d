package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/syn"
)

// maxScanProbes bounds one sweep (addresses × ports): the table and results
// take about 40 bytes a probe, so this is under 1 GiB.
const maxScanProbes = 1 << 24

const scanUsage = `Usage: sonde scan -port P[,P2…] [-rate PPS] [-timeout D] [-source IP] [-interface IF] [-json] TARGET…

Sends one TCP SYN probe to every (address, port) and reports each as success
(SYN-ACK), refused (RST), unreachable (ICMP) or timeout. TARGET is an address,
a CIDR block or @FILE (one target per line, # comments). Results go to stdout,
one line per probe; progress (on a terminal) and a summary go to stderr.
Needs CAP_NET_RAW, and CAP_BPF with CAP_NET_ADMIN for eBPF capture (without
them replies are captured with AF_PACKET).

Flags:
`

// scanFlags are the parsed flags of sonde scan.
type scanFlags struct {
	ports     []uint16
	rate      float64
	timeout   time.Duration
	source    string
	iface     string
	json      bool
	path      string
	senders   int
	portRange string
	nextHop   string
}

// runScan implements `sonde scan`.
func runScan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	sf, targets, err := parseScanFlags(args, stderr)
	if err != nil {
		return err
	}
	tab, err := scanTable(targets, sf.ports)
	if err != nil {
		return usageError(err)
	}
	cfg, err := sf.proberConfig(tab)
	if err != nil {
		return usageError(err)
	}
	res := newScanResults(tab.Len(), sf.timeout)
	cfg.Sink = res
	p, err := syn.New(cfg)
	if err != nil {
		if errors.Is(err, syn.ErrNoRawSocket) {
			return fmt.Errorf("sonde scan needs CAP_NET_RAW to send SYN probes (run as root, or grant it with setcap cap_net_raw,cap_bpf,cap_net_admin+ep): %w", err)
		}
		return fmt.Errorf("start SYN prober: %w", err)
	}
	defer p.Close()

	var bar *progress
	if isTerminal(stderr) {
		bar = startProgress(stderr, tab.Len(), p, res)
	}
	var ru0 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	sweep := sendAll(ctx, p, tab.Len(), sf.rate, cfg.Lanes, cfg.Batch)
	waitReplies(ctx, res, tab.Len(), sweep.end.Add(sf.timeout))
	counters := p.Counters()
	if bar != nil {
		bar.stop()
	}
	closeErr := p.Close()
	var ru1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)

	if err := writeScanResults(stdout, tab, sweep.sent, res, sf.json); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	s := scanSummary{probes: tab.Len(), sweep: sweep, c: counters, res: res, cpu: cpuSeconds(ru1) - cpuSeconds(ru0), p: p}
	s.write(stderr)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("scan interrupted: %w", err)
	}
	if closeErr != nil {
		return fmt.Errorf("stop SYN prober: %w", closeErr)
	}
	return nil
}

func parseScanFlags(args []string, stderr io.Writer) (scanFlags, []string, error) {
	var sf scanFlags
	var ports string
	fs := flag.NewFlagSet("scan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, scanUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&ports, "port", "", "TCP `ports` to probe: comma-separated, ranges like 8000-8010 allowed (required)")
	fs.Float64Var(&sf.rate, "rate", 100000, "probes per second; 0 means as fast as possible")
	fs.DurationVar(&sf.timeout, "timeout", 3*time.Second, "how long to wait for a reply after a probe")
	fs.StringVar(&sf.source, "source", "", "source `IP` address (default: the route's source towards the first target)")
	fs.StringVar(&sf.iface, "interface", "", "interface that receives the replies (default: the one holding the source address)")
	fs.BoolVar(&sf.json, "json", false, `print one JSON object per probe: {"addr","port","outcome","rtt_seconds"}`)
	fs.StringVar(&sf.path, "path", "auto", "TCP probe `path`: auto (syn-bpf when eBPF loads, else syn-packet), syn-bpf (replies caught by eBPF) or syn-packet (replies read with AF_PACKET)")
	fs.IntVar(&sf.senders, "senders", runtime.GOMAXPROCS(0), "concurrent sender threads")
	fs.StringVar(&sf.nextHop, "next-hop-mac", "", "send Ethernet frames to this `MAC` through AF_PACKET instead of a raw IP socket (every target must be behind it)")
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
	}
	return sf, fs.Args(), nil
}

// proberConfig turns the flags into a prober configuration (without sink).
func (sf scanFlags) proberConfig(tab *probe.Table) (syn.Config, error) {
	cfg := syn.Config{Table: tab, Lanes: sf.senders, Interface: sf.iface, Batch: 256}
	switch p := probe.TCPPath(sf.path); p {
	case "auto":
	case probe.PathSynBPF, probe.PathSynPacket:
		cfg.Path = p
	default:
		return cfg, fmt.Errorf("scan: -path %q is not auto, %s or %s", sf.path, probe.PathSynBPF, probe.PathSynPacket)
	}
	if sf.source != "" {
		a, err := netip.ParseAddr(sf.source)
		if err != nil {
			return cfg, fmt.Errorf("scan: -source: %w", err)
		}
		if a.Unmap().Is4() {
			cfg.Source4 = a.Unmap()
		} else {
			cfg.Source6 = a
		}
	}
	if sf.nextHop != "" {
		mac, err := net.ParseMAC(sf.nextHop)
		if err != nil {
			return cfg, fmt.Errorf("scan: -next-hop-mac: %w", err)
		}
		cfg.NextHopMAC = mac
	}
	if sf.portRange != "" {
		lo, hi, ok := strings.Cut(sf.portRange, "-")
		first, err1 := strconv.ParseUint(lo, 10, 16)
		last, err2 := strconv.ParseUint(hi, 10, 16)
		if !ok || err1 != nil || err2 != nil || first == 0 || last < first {
			return cfg, fmt.Errorf("scan: -source-ports %q is not FIRST-LAST within 1-65535", sf.portRange)
		}
		cfg.Ports = syn.PortRange{First: uint16(first), Last: uint16(last)}
	}
	return cfg, nil
}

// parsePorts parses "80,443,8000-8010" (SEMANTICS T4: ports 1–65535).
func parsePorts(s string) ([]uint16, error) {
	if s == "" {
		return nil, errors.New("scan: -port is required")
	}
	var ports []uint16
	for _, f := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(f), "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.ParseUint(lo, 10, 16)
		b, err2 := strconv.ParseUint(hi, 10, 16)
		if err1 != nil || err2 != nil || a < 1 || b < a {
			return nil, fmt.Errorf("scan: -port %q: want ports or ranges within 1-65535", f)
		}
		for p := a; p <= b; p++ {
			ports = append(ports, uint16(p))
		}
	}
	return ports, nil
}

// scanTable expands the targets (addresses, CIDR blocks, @files) and ports
// into a table: id = address index × len(ports) + port index.
func scanTable(targets []string, ports []uint16) (*probe.Table, error) {
	var prefixes []netip.Prefix
	for _, t := range targets {
		ps, err := expandTarget(t)
		if err != nil {
			return nil, err
		}
		prefixes = append(prefixes, ps...)
	}
	total := 0
	for _, p := range prefixes {
		bits := p.Addr().BitLen() - p.Bits()
		if bits >= 31 || total+(1<<bits)*len(ports) > maxScanProbes {
			return nil, fmt.Errorf("scan: more than %d probes; split the sweep", maxScanProbes)
		}
		total += (1 << bits) * len(ports)
	}
	tab := probe.NewTable(total)
	for _, p := range prefixes {
		for a := p.Addr(); a.IsValid() && p.Contains(a); a = a.Next() {
			for _, port := range ports {
				tab.Add(netip.AddrPortFrom(a, port))
			}
		}
	}
	return tab, nil
}

// expandTarget parses one TARGET into prefixes (a single address is a /32 or /128).
func expandTarget(t string) ([]netip.Prefix, error) {
	if name, ok := strings.CutPrefix(t, "@"); ok {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("scan: target file: %w", err)
		}
		var out []netip.Prefix
		for i, line := range strings.Split(string(b), "\n") {
			if c, _, found := strings.Cut(line, "#"); found {
				line = c
			}
			if line = strings.TrimSpace(line); line == "" {
				continue
			}
			if strings.HasPrefix(line, "@") {
				return nil, fmt.Errorf("scan: %s:%d: files cannot include files", name, i+1)
			}
			ps, err := expandTarget(line)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, i+1, err)
			}
			out = append(out, ps...)
		}
		return out, nil
	}
	if strings.Contains(t, "/") {
		p, err := netip.ParsePrefix(t)
		if err != nil {
			return nil, fmt.Errorf("scan: target %q: %w", t, err)
		}
		p = p.Masked()
		if p.Addr().Is4In6() {
			return nil, fmt.Errorf("scan: target %q: use the IPv4 form", t)
		}
		return []netip.Prefix{p}, nil
	}
	a, err := netip.ParseAddr(t)
	if err != nil {
		return nil, fmt.Errorf("scan: target %q is not an address, CIDR block or @file", t)
	}
	a = a.Unmap().WithZone("")
	return []netip.Prefix{netip.PrefixFrom(a, a.BitLen())}, nil
}

// scanResults is the sweep's probe.Sink: one outcome and RTT per id. Each id is
// delivered at most once per probe by the prober; replies that arrive after
// the timeout count as timeouts, as they would for the daemon.
type scanResults struct {
	outcome []uint8 // 0: no answer yet; else Outcome+1
	rtt     []int64
	timeout time.Duration
	replies atomic.Int64
	late    atomic.Int64
}

func newScanResults(n int, timeout time.Duration) *scanResults {
	return &scanResults{outcome: make([]uint8, n), rtt: make([]int64, n), timeout: timeout}
}

// Deliver records r. It is called from the prober's reader goroutine (and from
// senders for probes without a route), never twice for one id.
func (s *scanResults) Deliver(r probe.Result) {
	if int(r.ID) >= len(s.outcome) {
		return
	}
	if r.Latency > s.timeout {
		s.late.Add(1)
		return
	}
	s.outcome[r.ID] = uint8(r.Outcome) + 1
	s.rtt[r.ID] = int64(r.Latency)
	s.replies.Add(1)
}

// get returns id's outcome and RTT; unanswered probes are timeouts.
func (s *scanResults) get(id int) (probe.Outcome, time.Duration, bool) {
	if s.outcome[id] == 0 {
		return probe.Timeout, 0, false
	}
	return probe.Outcome(s.outcome[id] - 1), time.Duration(s.rtt[id]), true
}

// sweepTimes is when sending started and ended, and how many probes went out:
// ids [0, sent) were launched, in order of id, batch by batch.
type sweepTimes struct {
	start, end time.Time
	sent       int
}

// sendAll sends one probe per id from `senders` goroutines, each taking the
// next chunk of ids and pacing itself at its share of rate. A chunk is a full
// batch at high rates and about 5ms worth of probes at low ones, so slow
// sweeps are smooth. Once taken, a chunk is always launched whole, so on
// cancellation the ids sent are exactly [0, sweepTimes.sent).
func sendAll(ctx context.Context, p *syn.Prober, n int, rate float64, senders, batch int) sweepTimes {
	var next atomic.Int64
	var sent atomic.Int64
	var wg sync.WaitGroup
	if rate > 0 {
		batch = max(1, min(batch, int(rate/float64(senders)/200)))
	}
	st := sweepTimes{start: time.Now()}
	for lane := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pacer := syn.NewPacer(rate/float64(senders), batch)
			reqs := make([]probe.Request, batch)
			for ctx.Err() == nil {
				first := int(next.Add(int64(batch))) - batch
				if first >= n {
					return
				}
				k := min(batch, n-first)
				for i := range k {
					reqs[i] = probe.Request{ID: uint32(first + i), Gen: 1}
				}
				pacer.Wait(k)
				p.Launch(lane, reqs[:k])
				sent.Add(int64(k))
			}
		}()
	}
	wg.Wait()
	st.end = time.Now()
	st.sent = int(sent.Load())
	return st
}

// waitReplies waits until every probe is answered, the deadline passes or ctx
// is done.
func waitReplies(ctx context.Context, res *scanResults, n int, deadline time.Time) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for res.replies.Load() < int64(n) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// writeScanResults prints one line per probe sent (ids below sent) in table
// order.
func writeScanResults(w io.Writer, tab *probe.Table, sent int, res *scanResults, asJSON bool) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	var line []byte
	for id := range min(sent, tab.Len()) {
		ap := tab.Endpoint(uint32(id))
		o, rtt, ok := res.get(id)
		line = line[:0]
		if asJSON {
			line = append(line, `{"addr":"`...)
			line = ap.Addr().AppendTo(line)
			line = append(line, `","port":`...)
			line = strconv.AppendUint(line, uint64(ap.Port()), 10)
			line = append(line, `,"outcome":"`...)
			line = append(line, o.String()...)
			line = append(line, `","rtt_seconds":`...)
			if ok {
				line = strconv.AppendFloat(line, rtt.Seconds(), 'f', -1, 64)
			} else {
				line = append(line, "null"...)
			}
			line = append(line, "}\n"...)
		} else {
			line = ap.AppendTo(line)
			line = append(line, '\t')
			line = append(line, o.String()...)
			line = append(line, '\t')
			if ok {
				line = append(line, rtt.String()...)
			} else {
				line = append(line, '-')
			}
			line = append(line, '\n')
		}
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// scanSummary is the report printed on stderr after a sweep.
type scanSummary struct {
	probes int
	sweep  sweepTimes
	c      syn.Counters
	res    *scanResults
	cpu    float64
	p      *syn.Prober
}

func (s scanSummary) write(w io.Writer) {
	var counts [probe.NumOutcomes]int
	for id := range s.sweep.sent {
		o, _, _ := s.res.get(id)
		counts[o]++
	}
	d := s.sweep.end.Sub(s.sweep.start).Seconds()
	pps := 0.0
	if d > 0 {
		pps = float64(s.sweep.sent) / d
	}
	cpm := 0.0
	if s.sweep.sent > 0 {
		cpm = s.cpu / float64(s.sweep.sent) * 1e6
	}
	v4, v6 := s.p.Sources()
	src := v4.String()
	if v6.IsValid() {
		src += ", " + v6.String()
	}
	fmt.Fprintf(w, "sonde scan: sent %d of %d probes in %.3fs (%.0f probes/s); %d replies\n",
		s.sweep.sent, s.probes, d, pps, s.res.replies.Load())
	fmt.Fprintf(w, "  success %d, refused %d, unreachable %d, timeout %d (late replies %d)\n",
		counts[probe.Success], counts[probe.Refused], counts[probe.Unreachable], counts[probe.Timeout], s.res.late.Load())
	path := string(s.c.Path)
	if s.c.Path == probe.PathSynBPF {
		path += " (" + s.p.Attachment().String() + ")"
	}
	fmt.Fprintf(w, "  tcp path %s, source %s, ports %s; send errors %d, invalid cookies %d, stale %d, duplicates %d, ring drops %d\n",
		path, src, s.p.Ports(), s.c.SendErrors, s.c.InvalidCookie, s.c.Stale, s.c.Duplicate, s.c.RingDrops)
	fmt.Fprintf(w, "  cpu %.2fs user+sys (%.2fs per million probes)\n", s.cpu, cpm)
	if err := s.p.CaptureFallback(); err != nil {
		fmt.Fprintf(w, "  eBPF capture unavailable, used AF_PACKET: %v\n", err)
	}
}

func cpuSeconds(ru unix.Rusage) float64 {
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progress draws a progress bar on a terminal until stopped.
type progress struct {
	done chan struct{}
	wg   sync.WaitGroup
}

func startProgress(w io.Writer, total int, p *syn.Prober, res *scanResults) *progress {
	pr := &progress{done: make(chan struct{})}
	pr.wg.Add(1)
	go func() {
		defer pr.wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		start := time.Now()
		for {
			select {
			case <-pr.done:
				fmt.Fprint(w, "\r\033[K")
				return
			case <-tick.C:
			}
			c := p.Counters()
			frac := float64(c.Sent) / float64(total)
			const width = 30
			bar := strings.Repeat("=", int(frac*width)) + strings.Repeat(" ", width-int(frac*width))
			fmt.Fprintf(w, "\r\033[K[%s] %3.0f%% sent %d/%d, %d replies, %.0f probes/s",
				bar, frac*100, c.Sent, total, res.replies.Load(), float64(c.Sent)/time.Since(start).Seconds())
		}
	}()
	return pr
}

func (pr *progress) stop() {
	close(pr.done)
	pr.wg.Wait()
}
