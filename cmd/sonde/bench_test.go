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
	"github.com/sondeprobe/sonde/bench/testenv"
)

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-scenario", "bogus"},
		{"-scenario", "sweep,nope"},
		{"-bogus"},
		{"extra-argument"},
	} {
		var stderr bytes.Buffer
		err := runBench(context.Background(), args, &bytes.Buffer{}, &stderr)
		if code := report(err, &stderr); code != exitUsage {
			t.Errorf("%q: exit %d, want %d (%v)", args, code, exitUsage, err)
		}
	}
}

// TestBenchSmoke runs `sonde bench -quick` end to end, every scenario on a
// small part of the fleet for a few seconds, so the harness cannot rot: each
// scenario must run (compare may be skipped when zmap, masscan and
// blackbox_exporter are not installed), report metrics, and leave no
// namespace behind. Goals are not checked: a smoke run measures nothing.
func TestBenchSmoke(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, eBPF")
	bin := testenv.Sonde(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
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
	var names []string
	for _, s := range rep.Scenarios {
		names = append(names, s.Name)
		switch {
		case s.Status == bench.StatusFailed:
			t.Errorf("scenario %s failed: %s", s.Name, s.Error)
		case s.Status == bench.StatusSkipped && s.Name != "compare":
			t.Errorf("scenario %s skipped", s.Name)
		case s.Status != bench.StatusSkipped && len(s.Metrics) == 0:
			t.Errorf("scenario %s reports no metric", s.Name)
		}
		t.Logf("%s: %s, %d metrics, %.0fs", s.Name, s.Status, len(s.Metrics), s.Seconds)
	}
	if !slices.Equal(names, bench.Scenarios) {
		t.Errorf("scenarios %v, want %v", names, bench.Scenarios)
	}
	for _, ns := range []string{rep.Fleet.ProberNS, rep.Fleet.FleetNS} {
		if ns == "" {
			t.Error("report does not name the fleet's namespaces")
			continue
		}
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			t.Errorf("namespace %s left behind", ns)
		}
	}
}
