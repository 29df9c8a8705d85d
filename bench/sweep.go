package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sondeprobe/sonde/bench/fleet"
	"github.com/sondeprobe/sonde/bench/linkstat"
	"github.com/sondeprobe/sonde/probe"
)

// sweepRun is one sweep of the fleet by one tool, measured on the wire.
type sweepRun struct {
	tool    string
	probes  int             // addresses probed
	window  linkstat.Window // when the prober's veth was busy
	wall    time.Duration   // the whole process, start-up and waiting included
	procCPU float64         // the process's user+system seconds, start-up included
	self    float64         // the tool's own report of its CPU seconds for the sweep, if it gives one
	acc     accuracy
	info    map[string]string // tool-specific facts (TCP probe path, ring drops)
}

// pps is the rate of probes on the wire.
func (r *sweepRun) pps() float64 { return float64(r.probes) / r.window.Duration().Seconds() }

// answered is the rate of replies on the wire.
func (r *sweepRun) answered() float64 { return float64(r.window.Rx) / r.window.Duration().Seconds() }

// machinePerProbe is the whole machine's busy CPU µs per probe while the
// sweep was on the wire: the prober, the kernel's work for both namespaces
// and whatever else ran.
func (r *sweepRun) machinePerProbe() float64 { return r.window.CPU / float64(r.probes) * 1e6 }

// procPerProbe is the process's user+system CPU µs per probe, start-up and
// output included: the number every tool has.
func (r *sweepRun) procPerProbe() float64 { return r.procCPU / float64(r.probes) * 1e6 }

// selfPerProbe is the CPU µs per probe the tool reports for the sweep
// itself, from its first probe to the end of its wait for replies (sonde
// scan and the ceiling report it).
func (r *sweepRun) selfPerProbe() float64 { return r.self / float64(r.probes) * 1e6 }

// accuracy compares a sweep's findings with the ground truth. Positives
// are open ports (success).
type accuracy struct {
	truthOpen, foundOpen, truePos int
	wrong                         int // addresses whose reported outcome differs from the truth (all outcomes)
	missing                       int // addresses the tool did not report at all (tools that report every address)
	examples                      []string
}

func (a accuracy) recall() float64 {
	if a.truthOpen == 0 {
		return 1
	}
	return float64(a.truePos) / float64(a.truthOpen)
}

func (a accuracy) precision() float64 {
	if a.foundOpen == 0 {
		return 1
	}
	return float64(a.truePos) / float64(a.foundOpen)
}

// exact reports whether the sweep found exactly the open ports.
func (a accuracy) exact() bool { return a.truePos == a.truthOpen && a.foundOpen == a.truePos }

// sweepTargets returns the prefix the sweep covers: the whole fleet, or an
// eighth of it in quick mode (which still holds every static subset).
func (e *env) sweepTargets() netip.Prefix {
	if e.opt.Quick {
		return netip.PrefixFrom(BenchPrefix.Addr(), BenchPrefix.Bits()+2)
	}
	return BenchPrefix
}

// openTruth counts the open addresses of p and checks found against the
// truth. found maps every reported address to its outcome.
func openTruth(p netip.Prefix, found map[netip.Addr]probe.Outcome, everyAddress bool) accuracy {
	var a accuracy
	for addr := p.Addr(); p.Contains(addr); addr = addr.Next() {
		want := Truth(addr)
		got, ok := found[addr]
		if want == probe.Success {
			a.truthOpen++
		}
		if ok && got == probe.Success {
			a.foundOpen++
			if want == probe.Success {
				a.truePos++
			}
		}
		if everyAddress {
			if !ok {
				a.missing++
			} else if got != want {
				a.wrong++
			}
			if (!ok || got != want) && len(a.examples) < 5 {
				a.examples = append(a.examples, fmt.Sprintf("%s: %s, want %s", addr, got, want))
			}
		}
	}
	for addr, o := range found {
		if !p.Contains(addr) && o == probe.Success {
			a.foundOpen++ // an answer from outside the sweep: a false positive
		}
	}
	return a
}

// measure runs cmd (a prober in the prober namespace) while sampling the
// prober's veth, and returns the wire window, wall time and process CPU.
func (e *env) measure(cmd *exec.Cmd) (linkstat.Window, time.Duration, float64, error) {
	ls, err := linkstat.Start(e.fleet.ProberNS, e.fleet.ProberLink, 2*time.Millisecond)
	if err != nil {
		return linkstat.Window{}, 0, 0, err
	}
	start := time.Now()
	runErr := cmd.Run()
	wall := time.Since(start)
	samples, serr := ls.Stop()
	if runErr != nil {
		return linkstat.Window{}, wall, 0, runErr
	}
	if serr != nil {
		return linkstat.Window{}, wall, 0, serr
	}
	w, ok := linkstat.SendWindow(samples)
	if !ok {
		return w, wall, 0, fmt.Errorf("%s sent nothing", cmd.Args[4])
	}
	cpu := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	return w, wall, cpu, nil
}

var (
	scanCPURE   = regexp.MustCompile(`cpu ([0-9.]+)s user\+sys`)
	scanPathRE  = regexp.MustCompile(`tcp path ([a-z-]+(?: \([a-z]+\))?),`)
	scanDropsRE = regexp.MustCompile(`ring drops ([0-9]+)`)
)

// scanOnce sweeps p with `sonde scan` at rate (0: as fast as it can).
func (e *env) scanOnce(ctx context.Context, p netip.Prefix, rate float64) (*sweepRun, string, error) {
	return e.sondeSweep(ctx, "sonde", p, "scan", "-port", strconv.Itoa(ScanPort),
		"-rate", strconv.FormatFloat(rate, 'f', 0, 64), "-timeout", "1s",
		"-next-hop-mac", e.fleet.GatewayMAC.String(), p.String())
}

// ceilingOnce sweeps p with the same-run ceiling, `sonde bench ceiling`.
func (e *env) ceilingOnce(ctx context.Context, p netip.Prefix) (*sweepRun, string, error) {
	return e.sondeSweep(ctx, "ceiling", p, "bench", "ceiling", "-interface", e.fleet.ProberLink,
		"-source", e.fleet.ProberAddr.String(), "-next-hop-mac", e.fleet.GatewayMAC.String(),
		"-port", strconv.Itoa(ScanPort), "-timeout", "1s", p.String())
}

// sondeSweep runs the sonde binary with args, a sweep of p that writes
// `sonde scan`'s text output and summary, and measures it.
func (e *env) sondeSweep(ctx context.Context, tool string, p netip.Prefix, args ...string) (*sweepRun, string, error) {
	out := filepath.Join(e.dir, tool+".txt")
	f, err := os.Create(out)
	if err != nil {
		return nil, "", fmt.Errorf("%s output: %w", tool, err)
	}
	defer f.Close()
	cmd := e.command(ctx, e.opt.Binary, args...)
	var stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = f, &stderr
	line := commandLine(cmd)
	w, wall, cpu, err := e.measure(cmd)
	if err != nil {
		return nil, line, fmt.Errorf("%s: %w: %s", tool, err, stderr.tail(1000))
	}
	found, err := readScanOutput(out)
	if err != nil {
		return nil, line, err
	}
	r := &sweepRun{tool: tool, probes: 1 << (32 - p.Bits()), window: w, wall: wall, procCPU: cpu,
		acc: openTruth(p, found, true), info: map[string]string{}}
	summary := stderr.tail(4000)
	if m := scanCPURE.FindStringSubmatch(summary); m != nil {
		r.self, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := scanPathRE.FindStringSubmatch(summary); m != nil {
		r.info["tcp_path"] = m[1]
	}
	if m := scanDropsRE.FindStringSubmatch(summary); m != nil {
		r.info["ring_drops"] = m[1]
	}
	return r, line, nil
}

// readScanOutput reads `sonde scan` text output: "addr:port\toutcome\trtt".
func readScanOutput(path string) (map[netip.Addr]probe.Outcome, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read scan output: %w", err)
	}
	defer f.Close()
	found := map[netip.Addr]probe.Outcome{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), "\t")
		if len(fs) != 3 {
			return nil, fmt.Errorf("scan output line %q: want 3 fields", sc.Text())
		}
		ap, err := netip.ParseAddrPort(fs[0])
		if err != nil {
			return nil, fmt.Errorf("scan output line %q: %w", sc.Text(), err)
		}
		o, err := probe.ParseOutcome(fs[1])
		if err != nil {
			return nil, fmt.Errorf("scan output line %q: %w", sc.Text(), err)
		}
		found[ap.Addr()] = o
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read scan output: %w", err)
	}
	return found, nil
}

// runSweep sweeps the fleet with `sonde scan` as fast as it goes and with
// the same-run ceiling, taking turns, Runs times each; a sonde sweep that is
// not exact is repeated at 80% of its rate, so the reported rate is the
// highest one at which every answer is right.
func (e *env) runSweep(ctx context.Context, s *Scenario) error {
	p := e.sweepTargets()
	s.Measure = fmt.Sprintf("`sonde scan` of %s port %d (%d addresses) and the same-run ceiling (`sonde bench ceiling`), taking turns; rate on the prober's veth; recall and precision of open ports against the fleet's ground truth; CPU per probe", p, ScanPort, 1<<(32-p.Bits()))
	fleet0, _, _ := e.fleet.ResponderCounters()
	var good, ceil []*sweepRun
	rate := 0.0
	for tries := 0; len(good) < e.opt.Runs && tries < e.opt.Runs+4; tries++ {
		r, line, err := e.scanOnce(ctx, p, rate)
		if err != nil {
			return err
		}
		addCommand(s, line)
		if !r.acc.exact() || r.acc.wrong > 0 || r.acc.missing > 0 {
			s.note("sweep at %s: %.0f probes/s was not exact (recall %.4f%%, precision %.4f%%, %d wrong, %d missing: %s); retrying at 80%% of that",
				rateText(rate), r.pps(), 100*r.acc.recall(), 100*r.acc.precision(), r.acc.wrong, r.acc.missing, strings.Join(r.acc.examples, "; "))
			rate = r.pps() * 0.8
			continue
		}
		good = append(good, r)
		c, line, err := e.ceilingOnce(ctx, p)
		if err != nil {
			return err
		}
		addCommand(s, line)
		ceil = append(ceil, c)
	}
	if len(good) == 0 {
		return fmt.Errorf("no exact sweep in %d tries", e.opt.Runs+4)
	}
	s.add("probes", float64(good[0].probes), "")
	addSweepRuns(s, "sonde", good, true)
	s.add("sonde wrong outcomes", float64(good[0].acc.wrong), "addresses")
	s.addText("sonde tcp path", good[0].info["tcp_path"])
	s.addText("sonde ring drops", good[0].info["ring_drops"])
	addSweepRuns(s, "ceiling", ceil, true)
	med := func(rs []*sweepRun, f func(*sweepRun) float64) float64 { return median(collect(rs, f)) }
	rateRatio := med(good, (*sweepRun).pps) / med(ceil, (*sweepRun).pps)
	cpuRatio := med(good, (*sweepRun).selfPerProbe) / med(ceil, (*sweepRun).selfPerProbe)
	s.add("sonde/ceiling rate", rateRatio, "×")
	s.add("sonde/ceiling CPU per probe", cpuRatio, "×")
	e.sweepCPU[e.fleet.XDP] = med(good, (*sweepRun).selfPerProbe)
	if fleet1, ok, err := e.fleet.ResponderCounters(); ok && err == nil {
		sweeps := float64(len(good) + len(ceil))
		s.add("fleet SYN-ACKs per sweep (XDP)", float64(fleet1.SynAck-fleet0.SynAck)/sweeps, "")
		s.add("prober packets dropped per sweep (XDP)", float64(fleet1.HostDropped-fleet0.HostDropped)/sweeps, "")
	}
	if e.fleet.XDP != fleet.XDPOff {
		exact := true
		for _, r := range good {
			exact = exact && r.acc.exact() && r.acc.wrong == 0
		}
		s.goal("sweep ≥ 1.2× the same-run ceiling's rate, 100.00% recall and precision", rateRatio >= 1.2 && exact,
			"sonde %.0f probes/s, ceiling %.0f probes/s: %.2f×", med(good, (*sweepRun).pps), med(ceil, (*sweepRun).pps), rateRatio)
		s.goal("sweep CPU per probe ≤ the ceiling's", cpuRatio <= 1,
			"sonde %.2f µs, ceiling %.2f µs: %.2f×", med(good, (*sweepRun).selfPerProbe), med(ceil, (*sweepRun).selfPerProbe), cpuRatio)
	}
	s.note("rate = probes / time the prober's veth was busy (sampled every 2 ms); CPU per probe = the tool's own user+system time from its first probe to the end of its wait for replies (on a veth the fleet's and the prober host's kernel work for each probe runs inside the sender's system calls and counts there); process CPU per probe includes start-up and writing the results; machine CPU per probe = busy CPU of all cores while the sweep was on the wire, other work on the machine included")
	return nil
}

// addSweepRuns adds the rate, accuracy and CPU of a tool's sweeps.
func addSweepRuns(s *Scenario, tool string, rs []*sweepRun, self bool) {
	s.addRuns(tool+" sent", collect(rs, (*sweepRun).pps), "probes/s")
	s.addRuns(tool+" answered", collect(rs, (*sweepRun).answered), "replies/s")
	s.addRuns(tool+" recall", collect(rs, func(r *sweepRun) float64 { return 100 * r.acc.recall() }), "%")
	s.addRuns(tool+" precision", collect(rs, func(r *sweepRun) float64 { return 100 * r.acc.precision() }), "%")
	if self {
		s.addRuns(tool+" CPU per probe", collect(rs, (*sweepRun).selfPerProbe), "µs")
	}
	s.addRuns(tool+" process CPU per probe", collect(rs, (*sweepRun).procPerProbe), "µs")
	s.addRuns(tool+" machine CPU per probe", collect(rs, (*sweepRun).machinePerProbe), "µs")
}

// collect applies f to every run.
func collect(rs []*sweepRun, f func(*sweepRun) float64) []float64 {
	var out []float64
	for _, r := range rs {
		out = append(out, f(r))
	}
	return out
}

// addCommand records a command line once.
func addCommand(s *Scenario, line string) {
	if !slices.Contains(s.Command, line) {
		s.Command = append(s.Command, line)
	}
}

func rateText(rate float64) string {
	if rate <= 0 {
		return "full speed"
	}
	return fmt.Sprintf("-rate %.0f", rate)
}
