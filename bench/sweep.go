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
	"strconv"
	"strings"
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// sweepRun is one sweep of the fleet by one tool, measured on the wire.
type sweepRun struct {
	tool    string
	probes  int           // addresses probed
	window  WireWindow    // when the prober's veth was busy
	wall    time.Duration // the whole process, start-up and waiting included
	procCPU float64       // the process's user+system seconds, start-up included
	self    float64       // the tool's own report of its CPU seconds for the sweep, if it gives one
	acc     accuracy
	info    map[string]string // tool-specific facts (TCP probe path, ring drops)
}

// pps is the rate of probes on the wire.
func (r *sweepRun) pps() float64 { return float64(r.probes) / r.window.Duration().Seconds() }

// answered is the rate of replies on the wire.
func (r *sweepRun) answered() float64 { return float64(r.window.Rx) / r.window.Duration().Seconds() }

// cpuPerMillion is the whole machine's busy CPU seconds per million probes
// while the sweep was on the wire: the prober, the kernel's work for both
// namespaces and whatever else ran.
func (r *sweepRun) cpuPerMillion() float64 { return r.window.CPU / float64(r.probes) * 1e6 }

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
func (e *env) measure(cmd *exec.Cmd) (WireWindow, time.Duration, float64, error) {
	ls, err := SampleLink(e.fleet.ProberNS, e.fleet.ProberLink, 2*time.Millisecond)
	if err != nil {
		return WireWindow{}, 0, 0, err
	}
	start := time.Now()
	runErr := cmd.Run()
	wall := time.Since(start)
	samples, serr := ls.Stop()
	if runErr != nil {
		return WireWindow{}, wall, 0, runErr
	}
	if serr != nil {
		return WireWindow{}, wall, 0, serr
	}
	w, ok := SendWindow(samples)
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
	out := filepath.Join(e.dir, "scan.txt")
	f, err := os.Create(out)
	if err != nil {
		return nil, "", fmt.Errorf("scan output: %w", err)
	}
	defer f.Close()
	cmd := e.command(ctx, e.opt.Binary, "scan", "-port", strconv.Itoa(ScanPort),
		"-rate", strconv.FormatFloat(rate, 'f', 0, 64), "-timeout", "1s",
		"-next-hop-mac", e.fleet.GatewayMAC.String(), p.String())
	var stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = f, &stderr
	line := commandLine(cmd)
	w, wall, cpu, err := e.measure(cmd)
	if err != nil {
		return nil, line, fmt.Errorf("sonde scan: %w: %s", err, stderr.tail(1000))
	}
	found, err := readScanOutput(out)
	if err != nil {
		return nil, line, err
	}
	r := &sweepRun{tool: "sonde", probes: 1 << (32 - p.Bits()), window: w, wall: wall, procCPU: cpu,
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

// runSweep sweeps the fleet with `sonde scan` as fast as it goes, Runs times;
// a sweep that is not exact is repeated at 80% of its rate, so the reported
// rate is the highest one at which every answer is right.
func (e *env) runSweep(ctx context.Context, s *Scenario) error {
	p := e.sweepTargets()
	s.Measure = fmt.Sprintf("`sonde scan` of %s port %d (%d addresses), rate on the prober's veth; recall and precision of open ports against the fleet's ground truth; CPU of the whole machine while the sweep was on the wire", p, ScanPort, 1<<(32-p.Bits()))
	var good []*sweepRun
	rate := 0.0
	tries := 0
	for len(good) < e.opt.Runs && tries < e.opt.Runs+4 {
		tries++
		r, line, err := e.scanOnce(ctx, p, rate)
		if err != nil {
			return err
		}
		if len(s.Command) == 0 || s.Command[len(s.Command)-1] != line {
			s.Command = append(s.Command, line)
		}
		if !r.acc.exact() || r.acc.wrong > 0 || r.acc.missing > 0 {
			s.note("sweep at %s: %.0f probes/s was not exact (recall %.4f%%, precision %.4f%%, %d wrong, %d missing: %s); retrying at 80%% of that",
				rateText(rate), r.pps(), 100*r.acc.recall(), 100*r.acc.precision(), r.acc.wrong, r.acc.missing, strings.Join(r.acc.examples, "; "))
			rate = r.pps() * 0.8
			continue
		}
		good = append(good, r)
	}
	if len(good) == 0 {
		return fmt.Errorf("no exact sweep in %d tries", tries)
	}
	var pps, ans, recall, precision, cpu, self []float64
	for _, r := range good {
		pps = append(pps, r.pps())
		ans = append(ans, r.answered())
		recall = append(recall, 100*r.acc.recall())
		precision = append(precision, 100*r.acc.precision())
		cpu = append(cpu, r.cpuPerMillion())
		self = append(self, r.self/float64(r.probes)*1e6)
	}
	s.add("probes", float64(good[0].probes), "")
	s.addRuns("sent", pps, "probes/s")
	s.addRuns("answered", ans, "replies/s")
	s.addRuns("recall", recall, "%")
	s.addRuns("precision", precision, "%")
	s.add("wrong outcomes", float64(good[0].acc.wrong), "addresses")
	s.addRuns("machine CPU", cpu, "s/M probes")
	s.addRuns("sonde CPU", self, "s/M probes")
	s.addText("tcp_path", good[0].info["tcp_path"])
	s.addText("ring drops", good[0].info["ring_drops"])
	s.note("rate = probes / time the prober's veth was busy (sampled every 2 ms); machine CPU = busy CPU seconds of all cores in that time, kernel work for both namespaces included; sonde CPU = the scan's own user+system time for the sweep")
	return nil
}

func rateText(rate float64) string {
	if rate <= 0 {
		return "full speed"
	}
	return fmt.Sprintf("-rate %.0f", rate)
}
