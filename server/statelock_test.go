package server

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/server/statefile"
)

// stateTestConfig is a configuration of one target that never answers in
// time, for the tests of the state file's guards.
const stateTestConfig = `
checks:
  web: {protocol: http, path: /, interval: 1h, timeout: 1s}
pools:
  - {name: web, check: web, targets: ["127.0.0.1:1"]}
`

// newStateDaemon returns a daemon over stateTestConfig saving to state
// every few milliseconds, not started; it is stopped when the test ends.
func newStateDaemon(t *testing.T, state string) *Daemon {
	return newStateDaemonEvery(t, state, 5*time.Millisecond)
}

// newStateDaemonEvery is newStateDaemon saving every interval.
func newStateDaemonEvery(t *testing.T, state string, interval time.Duration) *Daemon {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sonde.yaml")
	if err := os.WriteFile(path, []byte(stateTestConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{
		Load:      func() (*config.Config, error) { return config.Load(path, config.LoadOptions{}) },
		Logger:    slog.New(slog.DiscardHandler),
		Shards:    1,
		NoSyn:     true,
		StateFile: state, StateInterval: interval,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	return d
}

// TestStateFileForeign: a -state-file that names an existing file that is
// not a state file (here the configuration itself) stops the start, and
// the file is left as it was, where it used to be reported as ignored and
// overwritten at the next save. An empty file, or a state file, is taken.
func TestStateFileForeign(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	foreign := filepath.Join(dir, "sonde.yaml")
	if err := os.WriteFile(foreign, []byte(stateTestConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	d := newStateDaemon(t, foreign)
	err := d.Start()
	if err == nil {
		time.Sleep(100 * time.Millisecond) // twenty saves' time: the file is overwritten
		d.Stop()
	}
	if b, _ := os.ReadFile(foreign); string(b) != stateTestConfig {
		t.Errorf("the foreign file was overwritten with %q", b)
	}
	if !errors.Is(err, ErrStateFile) || !strings.Contains(err.Error(), foreign+" is not a sonde state file") {
		t.Fatalf("Start over a foreign state file: %v, want ErrStateFile naming it", err)
	}

	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d = newStateDaemon(t, empty)
	if err := d.Start(); err != nil {
		t.Fatalf("Start over an empty state file: %v", err)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(empty); !strings.HasPrefix(string(b), statefile.Magic) {
		t.Fatalf("the empty file was not saved into: %q", b)
	}
	d = newStateDaemon(t, empty) // a state file now
	if err := d.Start(); err != nil {
		t.Fatalf("Start over a state file: %v", err)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
}

// TestStateFileLocked: a second daemon over the state file another runs
// fails at its start, where it used to restore the other's states and save
// over them; once the first stops, the file is free.
func TestStateFileLocked(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state")
	first := newStateDaemon(t, state)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	second := newStateDaemon(t, state)
	err := second.Start()
	if err == nil {
		second.Stop()
	}
	if !errors.Is(err, ErrStateFile) || !strings.Contains(err.Error(), fmt.Sprintf("%s is in use by another sonde", state)) {
		t.Fatalf("a second daemon over the same state file: %v, want ErrStateFile saying it is in use", err)
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	third := newStateDaemon(t, state)
	if err := third.Start(); err != nil {
		t.Fatalf("Start after the holder stopped: %v", err)
	}
	if err := third.Stop(); err != nil {
		t.Fatal(err)
	}
}

// TestStateFileDirectoryMissing: a state file in a directory that does not
// exist stops the start with a clear error, rather than a warning at the
// first save.
func TestStateFileDirectoryMissing(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "gone", "state")
	d := newStateDaemon(t, state)
	err := d.Start()
	if err == nil {
		d.Stop()
	}
	if !errors.Is(err, ErrStateFile) || !strings.Contains(err.Error(), "no such file or directory") {
		t.Fatalf("Start with a missing state directory: %v, want ErrStateFile saying the directory is missing", err)
	}
}

// TestStopWhileSaving: Stop returns while periodic saves run. It used to
// hold the daemon's lock while it waited for the state saver to end, and a
// save that began then waited for that lock: neither ever returned.
func TestStopWhileSaving(t *testing.T) {
	t.Parallel()
	for i := range 20 {
		d := newStateDaemonEvery(t, filepath.Join(t.TempDir(), "state"), time.Millisecond)
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i%5) * time.Millisecond) // a few saves, and Stop at another point of the period
		testenv.ReturnsWithin(t, fmt.Sprintf("Stop %d", i), func() {
			if err := d.Stop(); err != nil {
				t.Error(err)
			}
		})
	}
}
