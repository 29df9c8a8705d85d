package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/bench/fleet"
	"github.com/sondeprobe/sonde/internal/netns"
	"github.com/sondeprobe/sonde/probe"
)

// Names of the other probers' executables, as their Debian packages install
// them.
var (
	zmapNames     = []string{"zmap"}
	masscanNames  = []string{"masscan"}
	blackboxNames = []string{"prometheus-blackbox-exporter", "blackbox_exporter"}
)

// lookTool returns the path of the first of names on PATH (and in /usr/sbin,
// where zmap lives), or "".
func lookTool(names []string) string {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
		for _, dir := range []string{"/usr/sbin", "/sbin"} {
			if p := filepath.Join(dir, n); isExecutable(p) {
				return p
			}
		}
	}
	return ""
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

var versionRE = regexp.MustCompile(`[0-9]+\.[0-9]+(\.[0-9]+)?`)

// toolVersion returns the version number `tool args...` prints, for the
// report.
func toolVersion(tool string, args ...string) string {
	out, _ := exec.Command(tool, args...).CombinedOutput() // the text is all we want, whatever the exit
	if v := versionRE.Find(out); v != nil {
		return string(v)
	}
	return "unknown"
}

// runCompare runs zmap, masscan and blackbox_exporter against the same fleet
// and reports sonde's ratio to each. The machine is shared and its speed
// drifts, so sonde and the other probers take turns: each round measures
// sonde, then each other tool, and the ratios are of the medians.
func (e *env) runCompare(ctx context.Context, s *Scenario) error {
	s.Measure = fmt.Sprintf("other probers on the same fleet, taking turns with sonde (rounds: %d): the same-run ceiling, zmap and masscan sweep like `sonde scan` (rate on the prober's veth, recall and precision of open ports, CPU per probe); blackbox_exporter's /probe for http_2xx and tcp_connect driven by a bounded concurrent client, against `sonde run` probing the same %d targets at full speed", e.opt.Runs, rateTargets)
	zmap, masscan, blackbox := lookTool(zmapNames), lookTool(masscanNames), lookTool(blackboxNames)
	for _, t := range []struct{ name, path string }{{"zmap", zmap}, {"masscan", masscan}, {"blackbox_exporter", blackbox}} {
		if t.path == "" {
			s.note("%s: skipped, not installed", t.name)
		}
	}
	if blackbox != "" && e.fleet.XDP != fleet.XDPOff {
		blackbox = ""
		s.note("blackbox_exporter: compared on the kernel's fleet only (HTTP and connect() need a TCP stack)")
	}
	if err := e.compareSweeps(ctx, s, zmap, masscan); err != nil {
		return err
	}
	if blackbox != "" {
		if err := e.compareBlackbox(ctx, s, blackbox); err != nil {
			return fmt.Errorf("blackbox_exporter: %w", err)
		}
	}
	return nil
}

// scanner is one sweep tool in the comparison.
type scanner struct {
	name string
	once func(context.Context) (*sweepRun, string, error)
	runs []*sweepRun
}

// compareSweeps sweeps the fleet Runs times with sonde, the same-run
// ceiling, zmap and masscan in turn and reports each one's median rate,
// accuracy and CPU per probe, and sonde's ratio to each of the others.
func (e *env) compareSweeps(ctx context.Context, s *Scenario, zmap, masscan string) error {
	p := e.sweepTargets()
	tools := []*scanner{
		{name: "sonde", once: func(ctx context.Context) (*sweepRun, string, error) { return e.scanOnce(ctx, p, 0) }},
		{name: "ceiling", once: func(ctx context.Context) (*sweepRun, string, error) { return e.ceilingOnce(ctx, p) }},
	}
	if zmap != "" {
		s.addText("zmap version", toolVersion(zmap, "--version"))
		tools = append(tools, &scanner{name: "zmap", once: func(ctx context.Context) (*sweepRun, string, error) { return e.zmapOnce(ctx, zmap, p) }})
	}
	if masscan != "" {
		s.addText("masscan version", toolVersion(masscan, "--version"))
		tools = append(tools, &scanner{name: "masscan", once: func(ctx context.Context) (*sweepRun, string, error) { return e.masscanOnce(ctx, masscan, p) }})
	}
	for round := range e.opt.Runs {
		for _, t := range tools {
			e.opt.Progress("compare: sweep", "tool", t.name, "round", round+1)
			r, line, err := t.once(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			addCommand(s, line)
			t.runs = append(t.runs, r)
		}
	}
	for _, t := range tools {
		addSweepRuns(s, t.name, t.runs, t.name == "sonde" || t.name == "ceiling")
	}
	m := func(t *scanner, f func(*sweepRun) float64) float64 { return median(collect(t.runs, f)) }
	sonde := tools[0]
	exact := true
	for _, r := range sonde.runs {
		exact = exact && r.acc.exact()
	}
	pps, cpu := (*sweepRun).pps, (*sweepRun).procPerProbe
	for _, t := range tools[1:] {
		ratio := m(sonde, pps) / m(t, pps)
		s.add("sonde/"+t.name+" rate", ratio, "×")
		s.add("sonde/"+t.name+" process CPU per probe", m(sonde, cpu)/m(t, cpu), "×")
		if t.name != "zmap" {
			continue
		}
		if e.fleet.XDP != fleet.XDPOff {
			s.goal("sweep ≥ 3× zmap, 100.00% recall and precision", ratio >= 3 && exact,
				"sonde %.0f probes/s (every sweep exact: %v), zmap %.0f probes/s: %.2f×", m(sonde, pps), exact, m(t, pps), ratio)
		} else {
			s.goal("sweep ≥ 2× zmap, 100.00% recall and precision", ratio >= 2 && exact,
				"sonde %.0f probes/s (every sweep exact: %v), zmap %.0f probes/s: %.2f×", m(sonde, pps), exact, m(t, pps), ratio)
		}
	}
	s.note("ratios are of the medians; process CPU per probe is each tool's user+system time for its whole run (start-up, cooldown and output included) over the probes, the one number every tool has; the ceiling is `sonde bench ceiling` (sonde's SYNs and cookies through a PACKET_MMAP TX ring, sonde's eBPF capture, no scheduler)")
	return nil
}

// zmapOnce sweeps p with zmap, through the same veth, to the same gateway
// MAC, from the same source address as `sonde scan`.
func (e *env) zmapOnce(ctx context.Context, zmap string, p netip.Prefix) (*sweepRun, string, error) {
	empty := filepath.Join(e.dir, "zmap-blocklist.txt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		return nil, "", err
	}
	out := filepath.Join(e.dir, "zmap.txt")
	// zmap's default blocklist excludes 198.18.0.0/15; -b gives it an empty
	// one. -r 0 is no rate limit; -c 1: one second of cooldown.
	cmd := e.command(ctx, zmap, "-q", "-p", strconv.Itoa(ScanPort), "-i", e.fleet.ProberLink,
		"-G", e.fleet.GatewayMAC.String(), "-S", e.fleet.ProberAddr.String(), "-b", empty,
		"-r", "0", "-c", "1", "-o", out, p.String())
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	line := commandLine(cmd)
	w, wall, cpu, err := e.measure(cmd)
	if err != nil {
		return nil, line, fmt.Errorf("%w: %s", err, stderr.tail(1000))
	}
	found, err := readAddrLines(out, func(l string) string { return l })
	if err != nil {
		return nil, line, err
	}
	return &sweepRun{tool: "zmap", probes: 1 << (32 - p.Bits()), window: w, wall: wall, procCPU: cpu,
		acc: openTruth(p, found, false)}, line, nil
}

// masscanOnce sweeps p with masscan. masscan only exits once it has seen a
// packet after its --wait, so a trickle of datagrams from the fleet side
// keeps arriving while it runs.
func (e *env) masscanOnce(ctx context.Context, masscan string, p netip.Prefix) (*sweepRun, string, error) {
	mac, err := e.proberMAC()
	if err != nil {
		return nil, "", err
	}
	out := filepath.Join(e.dir, "masscan.txt")
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := e.command(ctx, masscan, p.String(), "-p"+strconv.Itoa(ScanPort), "--rate", "10000000", "--wait", "1",
		"--adapter", e.fleet.ProberLink, "--adapter-ip", e.fleet.ProberAddr.String(), "--adapter-mac", mac,
		"--router-mac", e.fleet.GatewayMAC.String(), "-oL", out)
	var stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	line := commandLine(cmd)
	stop := e.trickle(ctx)
	w, wall, cpu, err := e.measure(cmd)
	stop()
	if err != nil {
		return nil, line, fmt.Errorf("%w: %s", err, stderr.tail(1000))
	}
	// -oL lines: "open tcp 80 198.18.0.1 1700000000".
	found, err := readAddrLines(out, func(l string) string {
		f := strings.Fields(l)
		if len(f) >= 4 && f[0] == "open" {
			return f[3]
		}
		return ""
	})
	if err != nil {
		return nil, line, err
	}
	return &sweepRun{tool: "masscan", probes: 1 << (32 - p.Bits()), window: w, wall: wall, procCPU: cpu,
		acc: openTruth(p, found, false)}, line, nil
}

// proberMAC returns the MAC address of the prober's end of the veth.
func (e *env) proberMAC() (string, error) {
	var mac string
	err := netns.Do(e.fleet.ProberNS, func() error {
		ifc, err := net.InterfaceByName(e.fleet.ProberLink)
		if err != nil {
			return err
		}
		mac = ifc.HardwareAddr.String()
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("prober link: %w", err)
	}
	return mac, nil
}

// trickle sends a UDP datagram from the fleet namespace to the prober's
// address every 100 ms until stopped (the prober's kernel answers with an
// ICMP port unreachable, which nothing reads).
func (e *env) trickle(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = netns.Do(e.fleet.FleetNS, func() error {
			c, err := net.Dial("udp4", netip.AddrPortFrom(e.fleet.ProberAddr, 9).String())
			if err != nil {
				return err
			}
			defer c.Close()
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
					_, _ = c.Write([]byte("sonde bench"))
				}
			}
		})
	}()
	return func() {
		cancel()
		<-done
	}
}

// readAddrLines reads the addresses a scanner reported open, one per line
// after pick extracts it ("" skips the line).
func readAddrLines(path string, pick func(string) string) (map[netip.Addr]probe.Outcome, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read scanner output: %w", err)
	}
	found := map[netip.Addr]probe.Outcome{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		t := strings.TrimSpace(sc.Text())
		if t == "" || t[0] == '#' {
			continue
		}
		if t = pick(t); t == "" {
			continue
		}
		a, err := netip.ParseAddr(t)
		if err != nil {
			return nil, fmt.Errorf("scanner output line %q: %w", sc.Text(), err)
		}
		found[a] = probe.Success
	}
	return found, sc.Err()
}

// blackboxConfig has the two modules the comparison drives.
const blackboxConfig = `modules:
  http_2xx:
    prober: http
    timeout: 5s
    http:
      preferred_ip_protocol: ip4
      ip_protocol_fallback: false
  tcp_connect:
    prober: tcp
    timeout: 5s
    tcp:
      preferred_ip_protocol: ip4
      ip_protocol_fallback: false
`

// blackboxPort is where blackbox_exporter listens (prober namespace).
const blackboxPort = 9205

// blackboxConcurrency are the client concurrencies tried in the first
// round; the best one is used after that, so blackbox_exporter is compared at
// its best.
func (e *env) blackboxConcurrency() []int {
	if e.opt.Quick {
		return []int{64}
	}
	return []int{16, 64, 256, 1024}
}

// compareBlackbox runs blackbox_exporter in the prober namespace and drives
// its /probe endpoint for the http_2xx and tcp_connect modules against the
// same targets as the http scenario, taking turns with sonde's daemon.
func (e *env) compareBlackbox(ctx context.Context, s *Scenario, bin string) error {
	s.addText("blackbox_exporter version", toolVersion(bin, "--version"))
	cfg := filepath.Join(e.dir, "blackbox.yml")
	if err := os.WriteFile(cfg, []byte(blackboxConfig), 0o644); err != nil {
		return err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", blackboxPort)
	cmd := e.command(ctx, bin, "--config.file="+cfg, "--web.listen-address="+listen, "--log.level=warn")
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	s.Command = append(s.Command, commandLine(cmd))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	base := "http://" + listen
	if err := waitHTTP(ctx, nsClient(e.fleet.ProberNS, 1), base+"/-/healthy", 30*time.Second, done); err != nil {
		return fmt.Errorf("%w: %s", err, out.tail(1000))
	}
	addrs := blocks(fleetSize()/2+4096, rateTargets)[0]
	dur := e.opt.HTTPDuration
	for _, m := range []struct {
		module, sonde, check string
		port                 int
		target               func(netip.Addr) string
		goal                 string
	}{
		{"http_2xx", "http", fmt.Sprintf("protocol: http, port: %d, path: /", HTTPPort), httpDaemonPort,
			func(a netip.Addr) string { return fmt.Sprintf("http://%s:%d/", a, HTTPPort) }, "http ≥ 5× blackbox_exporter http_2xx"},
		{"tcp_connect", "connect", fmt.Sprintf("protocol: tcp, tcp_mode: connect, port: %d", ScanPort), connectDaemonPort,
			func(a netip.Addr) string { return fmt.Sprintf("%s:%d", a, ScanPort) }, "connect mode ≥ 5× blackbox_exporter tcp_connect"},
	} {
		var targets []string
		for a := addrs.Addr(); addrs.Contains(a); a = a.Next() {
			targets = append(targets, m.target(a))
		}
		var sondeRates, bbRates []float64
		bestC := 0
		for round := range e.opt.Runs {
			e.opt.Progress("compare: blackbox_exporter", "module", m.module, "round", round+1)
			sub := &Scenario{}
			r, err := e.daemonRate(ctx, sub, m.sonde, rateConfig(m.sonde, m.check), m.port, dur)
			if err != nil {
				return fmt.Errorf("sonde %s: %w", m.sonde, err)
			}
			if round == 0 {
				s.Command = append(s.Command, sub.Command...)
			}
			sondeRates = append(sondeRates, r.rate)
			if round == 0 {
				// Find blackbox_exporter's best concurrency.
				best := 0.0
				var tried []string
				for _, c := range e.blackboxConcurrency() {
					rate, err := driveProbe(ctx, e.fleet.ProberNS, base, m.module, targets, c, dur)
					if err != nil {
						return err
					}
					tried = append(tried, fmt.Sprintf("%.0f/s at %d", rate, c))
					if rate > best {
						best, bestC = rate, c
					}
				}
				s.note("blackbox_exporter %s by client concurrency (first round): %s", m.module, strings.Join(tried, ", "))
				bbRates = append(bbRates, best)
				continue
			}
			rate, err := driveProbe(ctx, e.fleet.ProberNS, base, m.module, targets, bestC, dur)
			if err != nil {
				return err
			}
			bbRates = append(bbRates, rate)
		}
		s.addRuns("sonde "+m.sonde, sondeRates, "probes/s")
		s.addRuns("blackbox "+m.module, bbRates, "probes/s")
		ratio := median(sondeRates) / median(bbRates)
		s.add("sonde "+m.sonde+"/blackbox "+m.module, ratio, "×")
		s.goal(m.goal, ratio >= 5, "sonde %.0f probes/s, blackbox_exporter %.0f probes/s (%d concurrent requests): %.2f×", median(sondeRates), median(bbRates), bestC, ratio)
	}
	return nil
}

// waitHTTP waits until url answers 200, the process ends (done) or timeout.
func waitHTTP(ctx context.Context, c *http.Client, url string, timeout time.Duration, done <-chan error) error {
	end := time.Now().Add(timeout)
	for time.Now().Before(end) {
		select {
		case err := <-done:
			return fmt.Errorf("exited: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("%s not ready after %v", url, timeout)
}

// driveProbe calls base/probe?module=&target= from conc goroutines for dur,
// cycling through targets, and returns the successful probes per second
// (answers holding "probe_success 1").
func driveProbe(ctx context.Context, ns, base, module string, targets []string, conc int, dur time.Duration) (float64, error) {
	client := nsClient(ns, conc)
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var ok, failed, next atomic.Int64
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				t := targets[int(next.Add(1))%len(targets)]
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/probe?module="+module+"&target="+t, nil)
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
						errMu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						errMu.Unlock()
					}
					continue
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil && bytes.Contains(body, []byte("\nprobe_success 1")) {
					ok.Add(1)
				} else if ctx.Err() == nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	if ok.Load() == 0 {
		return 0, fmt.Errorf("no successful /probe?module=%s call (%d failed; first error %v)", module, failed.Load(), firstErr)
	}
	return float64(ok.Load()) / el, nil
}
