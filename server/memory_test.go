package server

import (
	"bytes"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
)

const memoryConfig = `
checks:
  web: {protocol: http, path: /, interval: 1s, timeout: 1s}
pools:
  - {name: api, check: web, targets: ["127.0.0.1:1"]}
`

// TestMemoryLimit checks that a load sets the runtime's memory limit to the
// memory in use plus headroom, that a reload sets it again, and that
// NoMemoryLimit leaves it alone.
func TestMemoryLimit(t *testing.T) {
	if _, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		t.Skip("GOMEMLIMIT is set: the daemon leaves the limit to it")
	}
	orig := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(orig) })

	debug.SetMemoryLimit(math.MaxInt64)
	td := startDaemon(t, memoryConfig)
	limit := debug.SetMemoryLimit(-1)
	if limit == math.MaxInt64 || limit < minMemoryHeadroom || limit > 1<<30 {
		t.Fatalf("memory limit after a load of one target = %d, want the memory in use plus at least %d", limit, minMemoryHeadroom)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	if err := td.d.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Error("a reload of an unchanged file set the memory limit: it must do nothing")
	}
	td.rewrite(t, strings.Replace(memoryConfig, "interval: 1s", "interval: 2s", 1))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := td.d.Reload(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := debug.SetMemoryLimit(-1); got == math.MaxInt64 {
		t.Error("reload did not set the memory limit")
	}
	if after.NumForcedGC != before.NumForcedGC {
		t.Errorf("a reload forced %d collections, want none", after.NumForcedGC-before.NumForcedGC)
	}

	debug.SetMemoryLimit(math.MaxInt64)
	d, err := New(Options{
		Load:          func() (*config.Config, error) { return config.Parse([]byte(memoryConfig), "", config.LoadOptions{}) },
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		NoSyn:         true,
		NoMemoryLimit: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("NoMemoryLimit: limit changed to %d", got)
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
	changes := []scheduler.RouteEvent{
		{Kind: scheduler.RouteChanged, From: scheduler.Routed, To: scheduler.Removed, Cause: scheduler.CauseState, State: scheduler.Unhealthy},
		{Kind: scheduler.PreferredChanged, On: true, Cause: scheduler.CauseLatency, State: scheduler.Healthy},
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
