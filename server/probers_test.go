package server

import (
	"errors"
	"testing"

	"github.com/sondeprobe/sonde/config"
	httpprobe "github.com/sondeprobe/sonde/probe/http"
	"github.com/sondeprobe/sonde/probe/tcp"
)

// TestNewProber covers the one choice of a check's prober that the daemon
// and sonde probe share.
func TestNewProber(t *testing.T) {
	str := func(s string) *string { return &s }
	port := 22
	check := func(protocol, mode string) *config.Check {
		t.Helper()
		s := &config.CheckSpec{Protocol: str(protocol)}
		if protocol == "tcp" {
			s.Port = &port
		}
		if mode != "" {
			s.TCPMode = str(mode)
		}
		c, err := config.NewCheck("c", s, "")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		name     string
		c        *config.Check
		synReady bool
		want     string // "http", "connect", "syn" or "error"
	}{
		{"http", check("http", ""), true, "http"},
		{"https", check("https", ""), false, "http"},
		{"tcp auto with syn", check("tcp", ""), true, "syn"},
		{"tcp auto without syn", check("tcp", ""), false, "connect"},
		{"tcp connect with syn", check("tcp", "connect"), true, "connect"},
		{"tcp syn with syn", check("tcp", "syn"), true, "syn"},
		{"tcp syn without syn", check("tcp", "syn"), false, "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, useSyn, err := NewProber(tc.c, tc.synReady)
			got := "error"
			switch {
			case err != nil:
				if !errors.Is(err, ErrNoSyn) {
					t.Errorf("error %v does not wrap ErrNoSyn", err)
				}
			case useSyn && p == nil:
				got = "syn"
			case !useSyn:
				switch p.(type) {
				case *httpprobe.Prober:
					got = "http"
				case *tcp.Prober:
					got = "connect"
				}
			}
			if got != tc.want {
				t.Errorf("got %s (prober %T, useSyn %v, err %v), want %s", got, p, useSyn, err, tc.want)
			}
		})
	}
}

// TestConcurrencyAndFirstProbes checks a worker pool's size for a fleet of
// hanging servers in each cadence, and the pace of first probes it gives.
func TestConcurrencyAndFirstProbes(t *testing.T) {
	str := func(s string) *string { return &s }
	check := func(preset, cadence string) *config.Check {
		t.Helper()
		s := &config.CheckSpec{Preset: str(preset), Path: str("/")}
		if cadence != "" {
			s.Cadence = str(cadence)
		}
		c, err := config.NewCheck("c", s, "")
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
