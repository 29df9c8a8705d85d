package server

import (
	"testing"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/server/prober"
)

// TestConcurrencyAndFirstProbes checks a worker pool's size for a fleet of
// hanging servers in each cadence, and the pace of first probes it gives.
func TestConcurrencyAndFirstProbes(t *testing.T) {
	t.Parallel()
	str := func(s string) *string { return &s }
	check := func(preset, cadence string) *config.Check {
		t.Helper()
		s := &config.CheckSpec{Preset: str(preset), Path: str("/")}
		if cadence != "" {
			s.Cadence = str(cadence)
		}
		c, err := config.NewCheck(t.Context(), "c", s, "")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// App Gateway, 30 s timeout: at a fixed rate every 30 s, each stream has
	// a probe out all the time; after completion, half the time.
	if got := concurrencyFor(check("appgateway", ""), 1000); got != 1254 {
		t.Errorf("fixed rate: concurrency %d, want 1000 × 1.25 + 4", got)
	}
	if got := concurrencyFor(check("appgateway", "after_completion"), 1000); got != 629 {
		t.Errorf("after completion: concurrency %d, want 500 × 1.25 + 4", got)
	}
	// A small pool: every first probe at once.
	c := check("appgateway", "")
	n := concurrencyFor(c, 3)
	if p := firstProbePace(c, 3, n, float64(n)/c.Timeout.Seconds()); p.Burst < 3 {
		t.Errorf("pace %+v for 3 streams: want them all in the burst", p)
	}
	// A pool bigger than its workers can take at once: never slower than
	// one interval for all.
	if p := firstProbePace(c, 100_000, 4096, 4096/30.0); p.Rate != 100_000/30.0 {
		t.Errorf("pace %+v: want the check's steady rate of %v/s", p, 100_000/30.0)
	}
}

// TestSynFirstPace checks the one pace of the SYN prober's first probes:
// its comfortable rate, or the steady rate of all its checks' streams
// together, whichever is higher; connect() and HTTP checks do not count.
func TestSynFirstPace(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`checks:
  a: {protocol: tcp, port: 1, interval: 10s}
  b: {protocol: tcp, port: 2, interval: 60s}
  c: {protocol: tcp, port: 3, tcp_mode: connect, interval: 1s}
  d: {protocol: http, interval: 1s}
pools:
  - {name: a, check: a, targets: [198.18.0.1]}
  - {name: b, check: b, targets: [198.18.0.1]}
  - {name: c, check: c, targets: [198.18.0.1]}
  - {name: d, check: d, targets: [198.18.0.1]}
`), "", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	syn := make([]bool, len(cfg.Checks))
	for ci, c := range cfg.Checks {
		if _, syn[ci], err = prober.New(t.Context(), c, true); err != nil {
			t.Fatal(err)
		}
	}
	streams := []int{1_000_000, 6_000_000, 5_000_000, 5_000_000} // checks sorted by name: a, b, c, d
	if p := synFirstPace(cfg, streams, syn); p.Rate != 200_000 || p.Burst != synFirstBurst {
		t.Errorf("pace %+v, want 100,000/s + 100,000/s of the two SYN checks", p)
	}
	if p := synFirstPace(cfg, []int{10, 10, 10, 10}, syn); p.Rate != synFirstRate {
		t.Errorf("pace %+v for a small fleet, want %d/s", p, synFirstRate)
	}
}
