package server

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/policy"
)

const memoryConfig = `
checks:
  web: {protocol: http, path: /, interval: 1s, timeout: 1s}
pools:
  - {name: api, check: web, targets: ["127.0.0.1:1"]}
`

// TestMemoryTuning checks that a load sets the collector's goal (GOGC) and
// leaves the memory limit alone, that a reload of a changed file sets it
// again without a forced collection while a reload of an unchanged file does
// nothing, and that NoMemoryTuning leaves the runtime alone.
func TestMemoryTuning(t *testing.T) {
	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		if _, ok := os.LookupEnv(env); ok {
			t.Skipf("%s is set: the daemon leaves the collector to it", env)
		}
	}
	const marker = 7 // a GOGC the daemon never sets for a small heap
	origGC := debug.SetGCPercent(marker)
	origLimit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(origGC); debug.SetMemoryLimit(origLimit) })
	gogc := func() int { p := debug.SetGCPercent(marker); debug.SetGCPercent(p); return p }

	td := startDaemon(t, memoryConfig)
	if got := gogc(); got == marker || got < 1 || got > 100 {
		t.Fatalf("GOGC after a load = %d, want the daemon's goal, 1..100", got)
	}
	if got := debug.SetMemoryLimit(-1); got != origLimit {
		t.Errorf("a load changed the memory limit from %d to %d: a limit fixed at load time stalls the process once the live heap grows past it", origLimit, got)
	}
	debug.SetGCPercent(marker)
	if err := td.d.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := gogc(); got != marker {
		t.Errorf("a reload of an unchanged file set GOGC to %d: it must do nothing", got)
	}
	td.rewrite(t, strings.Replace(memoryConfig, "interval: 1s", "interval: 2s", 1))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := td.d.Reload(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := gogc(); got == marker {
		t.Error("a reload did not set GOGC")
	}
	if after.NumForcedGC != before.NumForcedGC {
		t.Errorf("a reload forced %d collections, want none", after.NumForcedGC-before.NumForcedGC)
	}

	debug.SetGCPercent(marker)
	d, err := New(Options{
		Load:           func() (*config.Config, error) { return config.Parse([]byte(memoryConfig), "", config.LoadOptions{}) },
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		NoSyn:          true,
		NoMemoryTuning: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	if got := gogc(); got != marker {
		t.Errorf("NoMemoryTuning: GOGC changed to %d", got)
	}
}

// TestGCPercent checks the goal: a sixty-fourth of a large heap, at least
// minMemoryHeadroom, never above the runtime's default doubling.
func TestGCPercent(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 100},
		{1 << 20, 100},              // 32 MiB over 1 MiB: capped at the default
		{64 << 20, 50},              // 32 MiB over 64 MiB
		{1 << 30, 4},                // 32 MiB over 1 GiB: 3.125%, rounded up
		{10 << 30, 2},               // a sixty-fourth: 1.5625%, rounded up
		{25 * minMemoryHeadroom, 4}, // exactly 4%
	} {
		if got := gcPercent(c.live); got != c.want {
			t.Errorf("gcPercent(%d) = %d, want %d", c.live, got, c.want)
		}
	}
}

// TestTransitionAllocations bounds the garbage of a state change when state
// changes are not logged: a million targets change state at start-up.
func TestTransitionAllocations(t *testing.T) {
	ob := testObserver(t, memoryConfig)
	if ob.info {
		t.Fatal("observer logs state changes at level warn")
	}
	ev := scheduler.Event{Target: 0, From: scheduler.Unknown, To: scheduler.Healthy, Outcome: probe.Success}
	allocs := testing.AllocsPerRun(1000, func() { ob.Transition(ev) })
	// The event kept for the API: its target string and its pool list.
	// Logging arguments added about a dozen more.
	t.Logf("%v allocations per state change", allocs)
	if allocs > 4 {
		t.Errorf("%v allocations per state change, want at most 4", allocs)
	}
}

// TestRouteLogs checks that route and preference changes are logged at
// info, like state changes, and that at warn they box no log arguments.
func TestRouteLogs(t *testing.T) {
	changes := []policy.RouteEvent{
		{Kind: policy.RouteChanged, From: policy.Routed, To: policy.Removed, Cause: policy.CauseState, State: scheduler.Unhealthy},
		{Kind: policy.PreferredChanged, On: true, Cause: policy.CauseLatency, State: scheduler.Healthy},
	}
	var logs bytes.Buffer
	ob := testObserverWith(t, memoryConfig, slog.New(slog.NewTextHandler(&logs, nil)))
	ro := &routeObserver{o: ob, g: ob.d.cur.Load()}
	for _, e := range changes {
		ro.Route(e)
	}
	for _, want := range []string{
		`level=INFO msg="route change" pool=api target=127.0.0.1:1 from=routed to=removed reason=unhealthy`,
		`level=INFO msg="preference change" pool=api target=127.0.0.1:1 from=not_preferred to=preferred reason=latency`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %s:\n%s", want, logs.String())
		}
	}

	quiet := testObserver(t, memoryConfig)
	ro = &routeObserver{o: quiet, g: quiet.d.cur.Load()}
	for _, e := range changes {
		// The event kept for the API: its target string and its pool list.
		// Logging arguments would add about a dozen more.
		if allocs := testing.AllocsPerRun(1000, func() { ro.Route(e) }); allocs > 2 {
			t.Errorf("%v: %v allocations, want at most 2 when it is not logged", e.Kind, allocs)
		}
	}
}

// testObserver returns the observer of a daemon started over the config
// text yaml, with logging at level warn; its targets probe an address that
// refuses, once a minute.
func testObserver(t *testing.T, yaml string) *observer {
	t.Helper()
	return testObserverWith(t, yaml, slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// testObserverWith is testObserver with the daemon logging to log.
func testObserverWith(t *testing.T, yaml string, log *slog.Logger) *observer {
	t.Helper()
	d, err := New(Options{
		Load:   func() (*config.Config, error) { return config.Parse([]byte(yaml), "", config.LoadOptions{}) },
		Logger: log,
		NoSyn:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	return &d.obs
}
