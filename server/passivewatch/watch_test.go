package passivewatch

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
)

// fleet is a configuration as a Fleet, each target in its own check's pools.
type fleet struct{ cfg *config.Config }

func (f fleet) Config() *config.Config { return f.cfg }
func (f fleet) PoolsOf(id uint32, fn func(pi int)) {
	for pi, p := range f.cfg.Pools {
		for _, m := range p.Members {
			if m == id {
				fn(pi)
			}
		}
	}
}

func parse(t *testing.T, yaml string) fleet {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), t.TempDir(), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return fleet{cfg}
}

type nopEngine struct{}

func (nopEngine) Recheck(uint32, time.Duration) bool         { return true }
func (nopEngine) Evidence(uint32, probe.Outcome, int64) bool { return true }

// TestUnavailable: when the observer cannot be opened, the watch says so
// once, watches nothing, and the daemon goes on; a configuration without a
// passive block does not even try.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	tries := 0
	var log strings.Builder
	w := New(Options{Engine: nopEngine{}, Logger: testLogger(&log), Open: func(bpf.PassiveOptions) (*bpf.Passive, error) {
		tries++
		return nil, errors.New("no BPF here")
	}})
	reg := prometheus.NewRegistry()
	w.Register(reg)
	plain := parse(t, "checks:\n  c: {protocol: tcp, port: 80}\npools:\n  - {name: p, check: c, targets: [127.0.0.1]}\n")
	w.Use(plain)
	if tries != 0 || w.Describe() != "off" || w.Runs() {
		t.Fatalf("without a passive block: %d opens, %q, runs %v; want none, off, false", tries, w.Describe(), w.Runs())
	}
	watched := parse(t, "checks:\n  c: {protocol: tcp, port: 80, passive: {}}\npools:\n  - {name: p, check: c, targets: [127.0.0.1]}\n")
	w.Use(watched)
	w.Use(watched)
	if tries != 2 || w.Describe() != "unavailable" || w.Runs() {
		t.Errorf("observer that cannot open: %d opens, %q, runs %v; want one per load, unavailable, false", tries, w.Describe(), w.Runs())
	}
	if n := strings.Count(log.String(), "passive evidence unavailable"); n != 1 {
		t.Errorf("the same failure logged %d times, want once:\n%s", n, log.String())
	}
	if _, ok := w.Target(0); ok {
		t.Error("a target is reported watched without an observer")
	}
	if _, err := reg.Gather(); err != nil {
		t.Errorf("scrape without an observer: %v", err)
	}
	w.Stop()
}

// TestEventOf: the observer's records become the tracker's events;
// abandoned and reset are no evidence.
func TestEventOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in      bpf.PassiveOutcome
		failure bool
		out     probe.Outcome
		ok      bool
	}{
		{bpf.PassiveConnected, false, probe.Success, true},
		{bpf.PassiveRefused, true, probe.Refused, true},
		{bpf.PassiveTimedOut, true, probe.Timeout, true},
		{bpf.PassiveUnreachable, true, probe.Unreachable, true},
		{bpf.PassiveAbandoned, false, 0, false},
		{bpf.PassiveReset, false, 0, false},
	} {
		ev, ok := eventOf(bpf.PassiveEvent{At: 7, Slot: 3, Outcome: tt.in, Run: 2})
		if ok != tt.ok || ok && (ev.Failure != tt.failure || ev.Outcome != tt.out || ev.At != 7 || ev.Slot != 3 || ev.Run != 2) {
			t.Errorf("%v: event %+v, %v; want failure %v, outcome %v, %v", tt.in, ev, ok, tt.failure, tt.out, tt.ok)
		}
	}
}

// testLogger logs text to b.
func testLogger(b *strings.Builder) *slog.Logger {
	return slog.New(slog.NewTextHandler(b, nil))
}
