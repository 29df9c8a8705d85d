package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/bench"
	"github.com/sondeprobe/sonde/internal/testenv"
)

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-scenario", "bogus"},
		{"-scenario", "sweep,nope"},
		{"-bogus"},
		{"extra-argument"},
		{"-fleet", "bogus"},
		{"-xdp-mode", "bogus"},
		{"-faults", "loss-5,bogus"},
		{"-fault-duration", "1s", "-scenario", "faults"},
		{"ceiling"},
		{"tls-loop"},
		{"tls-loop", "-port", "0", "198.18.0.0/24"},
		{"tls-loop", "-port", "443", "not-a-prefix"},
		{"tls-loop", "-port", "443", "-targets", "300", "198.18.0.0/24"},
		{"ceiling", "-port", "80", "-source", "192.0.2.1", "-next-hop-mac", "02:00:00:00:00:01", "-interface", "veth0", "not-a-prefix"},
		{"ceiling", "-port", "0", "-source", "192.0.2.1", "-next-hop-mac", "02:00:00:00:00:01", "-interface", "veth0", "198.18.0.0/16"},
		{"ceiling", "-port", "80", "-source", "bogus", "-next-hop-mac", "02:00:00:00:00:01", "-interface", "veth0", "198.18.0.0/16"},
		{"connect-load", "-port", "80"},
		{"connect-load", "127.0.0.0/24"},
		{"connect-load", "-port", "80", "not-a-prefix"},
		{"connect-load", "-port", "80", "2001:db8::/120"},
		{"connect-load", "-port", "80", "10.0.0.0/8"},
		{"connect-load", "-port", "80", "-duration", "1h", "127.0.0.0/24"},
		{"connect-load", "-port", "80", "-rate", "-5", "127.0.0.0/24"},
		{"connect-load", "-port", "80", "-workers", "0", "127.0.0.0/24"},
	} {
		var stderr bytes.Buffer
		err := runBench(context.Background(), args, &bytes.Buffer{}, &stderr)
		if code := report(err, &stderr); code != exitUsage {
			t.Errorf("%q: exit %d, want %d (%v)", args, code, exitUsage, err)
		}
	}
}

// TestBenchFaultsSmoke runs two faults of `sonde bench -scenario faults`
// briefly: loss through nftables and reordering through the user-space
// bridge, each with all three ways of probing and an outage; the table has
// a row for each, and the three namespaces go at the end.
func TestBenchFaultsSmoke(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, eBPF, nftables")
	testenv.Tool(t, "nft", "nftables")
	bin := testenv.Sonde(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := runBench(ctx, []string{"-scenario", "faults", "-quick", "-faults", "loss-5,reorder", "-fault-duration", "5s", "-json", "-q", "-sonde", bin}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("sonde bench: %v\n%s\n%s", err, stderr.String(), stdout.String())
	}
	var rep bench.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, stdout.String())
	}
	if len(rep.Scenarios) != 1 || rep.Scenarios[0].Status == bench.StatusFailed {
		t.Fatalf("scenarios %+v", rep.Scenarios)
	}
	s := rep.Scenarios[0]
	if len(s.Tables) != 1 || len(s.Tables[0].Rows) != 6 {
		t.Fatalf("tables %+v: want one with a row per fault and way of probing", s.Tables)
	}
	for _, r := range s.Tables[0].Rows {
		if r[7] != "16/16" {
			t.Errorf("row %v: the outage was not detected for every target of the slice", r)
		}
	}
	if len(rep.Fleets) != 1 || rep.Fleets[0].ImpairNS == "" {
		t.Fatalf("fleets %+v: want the impaired fleet", rep.Fleets)
	}
	for _, ns := range []string{rep.Fleets[0].ProberNS, rep.Fleets[0].FleetNS, rep.Fleets[0].ImpairNS} {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			t.Errorf("namespace %s left behind", ns)
		}
	}
}

// TestBenchSmoke runs `sonde bench -quick` end to end, every scenario on a
// small part of the fleet for a few seconds, so the harness cannot rot: each
// scenario must run on its fleets (sweep, steady and compare on the XDP
// fleet, sweep and compare on the kernel's too, with the same-run ceiling),
// report metrics, and leave no namespace behind. Goals are not checked: a
// smoke run measures nothing.
func TestBenchSmoke(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, eBPF")
	bin := testenv.Sonde(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	err := runBench(ctx, []string{"-quick", "-json", "-q", "-sonde", bin}, &stdout, &stderr)
	t.Logf("sonde bench -quick took %v", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("sonde bench: %v\n%s\n%s", err, stderr.String(), stdout.String())
	}
	var rep bench.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, stdout.String())
	}
	if rep.Machine.Cores == 0 || rep.Machine.Kernel == "" || rep.Machine.Go == "" || rep.Machine.Sonde == "" {
		t.Errorf("machine not described: %+v", rep.Machine)
	}
	var ran []string
	for _, s := range rep.Scenarios {
		ran = append(ran, s.Name+"/"+s.Fleet)
		switch {
		case s.Status == bench.StatusFailed:
			t.Errorf("scenario %s/%s failed: %s", s.Name, s.Fleet, s.Error)
		case s.Status == bench.StatusSkipped:
			t.Errorf("scenario %s/%s skipped", s.Name, s.Fleet)
		case len(s.Metrics) == 0:
			t.Errorf("scenario %s/%s reports no metric", s.Name, s.Fleet)
		}
		if s.Name == "sweep" || s.Name == "compare" {
			if m, ok := s.Metric("ceiling sent"); !ok || m.Value <= 0 {
				t.Errorf("%s/%s: no same-run ceiling: %+v", s.Name, s.Fleet, m)
			}
			if m, ok := s.Metric("sonde recall"); !ok || m.Value != 100 {
				t.Errorf("%s/%s: sonde recall %+v, want 100%%", s.Name, s.Fleet, m)
			}
		}
		t.Logf("%s/%s: %s, %d metrics, %.0fs", s.Name, s.Fleet, s.Status, len(s.Metrics), s.Seconds)
	}
	want := []string{"sweep/xdp-generic", "sweep/kernel", "steady/xdp-generic", "detect/kernel", "http/kernel", "compare/xdp-generic", "compare/kernel"}
	if !slices.Equal(ran, want) {
		t.Errorf("scenarios %v, want %v", ran, want)
	}
	if len(rep.Fleets) != 2 {
		t.Errorf("fleets %+v, want the XDP fleet and the kernel's", rep.Fleets)
	}
	for _, f := range rep.Fleets {
		for _, ns := range []string{f.ProberNS, f.FleetNS} {
			if ns == "" {
				t.Error("report does not name the fleet's namespaces")
				continue
			}
			if _, err := os.Stat("/run/netns/" + ns); err == nil {
				t.Errorf("namespace %s left behind", ns)
			}
		}
	}
}

func TestHasDefaultRoute(t *testing.T) {
	const head = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
	for _, tc := range []struct {
		name, table string
		want        bool
	}{
		{"default route", head + "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n", true},
		{"fleet prefix only, as in a prober namespace", head + "sp1\t000012C6\t020200C0\t0003\t0\t0\t0\t0000FEFF\t0\t0\t0\n", false},
		{"header only", head, false},
		{"empty", "", false},
	} {
		if got := hasDefaultRoute(tc.table); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
