package server

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// move renames from to to: at once, so that no save in progress sees half
// a directory.
func move(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

// TestStateSaveFailureReported: saves that fail because the state file's
// directory went are counted and shown in the metrics and on the status
// page, logged once when they start failing and once when they work again,
// and a save that fails at Stop is Stop's error. They used to be one
// warning, then silence.
func TestStateSaveFailureReported(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	logs := &testenv.SyncBuffer{}
	td := startDaemonWith(t, stateTestConfig, func(o *Options) {
		o.StateFile, o.StateInterval = state, 5*time.Millisecond
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	metric := func(name string, labels map[string]string) float64 {
		return metricValue(t, td.d.metrics.reg, name, labels)
	}
	testenv.Eventually(t, "a first save", func() (float64, bool) {
		n := metric("sonde_state_saves_total", map[string]string{"result": "success"})
		return n, n > 0
	})
	if v := metric("sonde_state_last_save_success_timestamp_seconds", nil); v < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("sonde_state_last_save_success_timestamp_seconds = %v, want about now", v)
	}

	move(t, dir, dir+".gone") // every save fails from now on
	failures := func() float64 { return metric("sonde_state_saves_total", map[string]string{"result": "failure"}) }
	testenv.Eventually(t, "three failed saves", func() (float64, bool) { n := failures(); return n, n >= 3 })
	if v := metric("sonde_state_last_save_successful", nil); v != 0 {
		t.Errorf("sonde_state_last_save_successful = %v while saves fail, want 0", v)
	}
	if n := strings.Count(logs.String(), "saving the state file failed"); n != 1 {
		t.Errorf("%d log lines for %v failed saves, want 1:\n%s", n, failures(), logs.String())
	}
	page := td.okPage(t, "/")
	if want := "State file " + state + " not saved"; !strings.Contains(page, want) {
		t.Errorf("the overview does not say %q:\n%s", want, page)
	}

	move(t, dir+".gone", dir)
	testenv.Eventually(t, "a save after the directory came back", func() (float64, bool) {
		v := metric("sonde_state_last_save_successful", nil)
		return v, v == 1
	})
	if !strings.Contains(logs.String(), "state file saved again") {
		t.Errorf("the recovery was not logged:\n%s", logs.String())
	}
	if page := td.okPage(t, "/"); strings.Contains(page, "not saved") {
		t.Errorf("the overview still warns after a save succeeded:\n%s", page)
	}

	move(t, dir, dir+".gone")
	if err := td.d.Stop(); err == nil || !strings.Contains(err.Error(), "the states were not saved at stop") {
		t.Fatalf("Stop with the state directory gone: %v, want the failed save", err)
	}
}
