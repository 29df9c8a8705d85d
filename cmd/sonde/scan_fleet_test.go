package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/bench/fleet"
	"github.com/sondeprobe/sonde/internal/netns"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
)

// TestScanFleet is integration test (b): `sonde scan` over a fleet of 65,536
// IPv4 addresses (and 256 IPv6 ones) in its own namespaces, with known subsets
// dropped (timeout), rejected with RST (refused) and rejected with ICMP
// (unreachable), must classify every address correctly. Its rate is logged,
// not asserted: speed is measured by `sonde bench`, and depends on what else
// the machine runs.
func TestScanFleet(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, BPF")
	if testing.Short() {
		t.Skip("fleet sweep skipped in -short mode")
	}
	bin := testenv.Sonde(t)
	cfg, truth := fleetTruth()
	f, err := fleet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	pps := scanOnce(t, f, bin, truth)
	t.Logf("sweep: %.0f probes/s", pps)
}

// fleetTruth returns the fleet configuration and the expected outcome of
// every address on port 80.
func fleetTruth() (fleet.Config, map[netip.Addr]probe.Outcome) {
	cfg := fleet.Config{
		Prefix:  netip.MustParsePrefix("198.18.0.0/16"),
		Prefix6: netip.MustParsePrefix("2001:db8:5eed::/112"),
		Listen:  []uint16{80},
	}
	truth := map[netip.Addr]probe.Outcome{}
	for i := range 1 << 16 {
		a := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		truth[a] = probe.Success
		switch {
		case i>>8 == 100 || i%251 == 7: // a /24 and a scattered subset
			truth[a] = probe.Timeout
		case i>>8 == 101 || i%241 == 9:
			truth[a] = probe.Refused
		case i>>4 == 102<<4: // 198.18.102.0/28
			truth[a] = probe.Unreachable
		}
	}
	for i := range 256 {
		b := netip.MustParseAddr("2001:db8:5eed::").As16()
		b[15] = byte(i)
		a := netip.AddrFrom16(b)
		truth[a] = probe.Success
		switch {
		case i%16 == 7:
			truth[a] = probe.Timeout
		case i%16 == 9:
			truth[a] = probe.Refused
		case i >= 0xa0 && i < 0xb0:
			truth[a] = probe.Unreachable
		}
	}
	for a, o := range truth {
		p := netip.PrefixFrom(a, a.BitLen())
		switch o {
		case probe.Timeout:
			cfg.Drop = append(cfg.Drop, p)
		case probe.Refused:
			cfg.Reject = append(cfg.Reject, p)
		case probe.Unreachable:
			cfg.Unreachable = append(cfg.Unreachable, p)
		}
	}
	return cfg, truth
}

var ppsRE = regexp.MustCompile(`\(([0-9]+) probes/s\)`)

// scanOnce sweeps the fleet, checks every address against the truth and
// returns the achieved send rate.
func scanOnce(t *testing.T, f *fleet.Fleet, bin string, truth map[netip.Addr]probe.Outcome) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", f.ProberNS, bin, "scan",
		"-port", "80", "-rate", "0", "-timeout", "2s", "-json", "198.18.0.0/16", "2001:db8:5eed::/120")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sonde scan: %v\n%s", err, stderr.String())
	}
	t.Logf("summary:\n%s", stderr.String())
	got := map[netip.Addr]probe.Outcome{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var l struct {
			Addr    string   `json:"addr"`
			Port    uint16   `json:"port"`
			Outcome string   `json:"outcome"`
			RTT     *float64 `json:"rtt_seconds"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		o, err := probe.ParseOutcome(l.Outcome)
		if err != nil {
			t.Fatal(err)
		}
		if (l.RTT != nil) != (o != probe.Timeout) {
			t.Errorf("%s: outcome %s with rtt %v", l.Addr, o, l.RTT)
		}
		got[netip.MustParseAddr(l.Addr)] = o
	}
	var wrong []string
	for a, want := range truth {
		if got[a] != want {
			wrong = append(wrong, fmt.Sprintf("%s: got %s, want %s", a, got[a], want))
		}
	}
	if len(got) != len(truth) {
		t.Errorf("%d result lines, want %d", len(got), len(truth))
	}
	if len(wrong) > 0 {
		t.Errorf("%d addresses misclassified, e.g.:\n%s", len(wrong), strings.Join(wrong[:min(10, len(wrong))], "\n"))
	}
	m := ppsRE.FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no rate in the summary:\n%s", stderr.String())
	}
	pps, _ := strconv.ParseFloat(m[1], 64)
	return pps
}

// TestScanCapabilities runs the scan as an unprivileged user holding exactly
// the capabilities of each path (docs/operations.md, "Permissions"):
// CAP_NET_RAW + CAP_BPF + CAP_NET_ADMIN → eBPF capture; CAP_NET_RAW alone →
// AF_PACKET capture. Both must classify the fleet.
func TestScanCapabilities(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, BPF")
	setpriv := testenv.Tool(t, "setpriv", "util-linux")
	bin := testenv.Sonde(t)
	f, err := fleet.New(fleet.Config{
		Listen: []uint16{80},
		Reject: []netip.Prefix{netip.MustParsePrefix("198.18.0.128/25")},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	for _, tt := range []struct {
		caps, path string
	}{
		{"+net_raw,+bpf,+net_admin", "tcp path syn-bpf ("}, // (tcx), or (tc) before kernel 6.6
		{"+net_raw", "tcp path syn-packet,"},
	} {
		t.Run(tt.caps, func(t *testing.T) {
			cmd := netns.Command(f.ProberNS, setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
				"--inh-caps="+tt.caps, "--ambient-caps="+tt.caps, "--bounding-set="+tt.caps,
				bin, "scan", "-port", "80", "-timeout", "500ms", "198.18.0.0/24")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("scan: %v\n%s", err, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.path) {
				t.Errorf("summary lacks %q:\n%s", tt.path, stderr.String())
			}
			if s := stdout.String(); strings.Count(s, "\tsuccess\t") != 128 || strings.Count(s, "\trefused\t") != 128 {
				t.Errorf("want 128 success and 128 refused:\n%s", s)
			}
		})
	}
}
