package server

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// removeDir removes dir while saves write into it.
func removeDir(t *testing.T, dir string) {
	t.Helper()
	waitFor(t, "removing "+dir, func() bool { return os.RemoveAll(dir) == nil })
}

// TestStateSaveFailureReported: saves that fail because the state file's
// directory went are counted and shown in the metrics and on the status
// page, logged once when they start failing and once when they work again,
// and a save that fails at Stop is Stop's error. They used to be one
// warning, then silence.
func TestStateSaveFailureReported(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	logs := &syncBuffer{}
	td := startDaemonWith(t, stateTestConfig, func(o *Options) {
		o.StateFile, o.StateInterval = state, 5*time.Millisecond
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	metric := func(name string, labels map[string]string) float64 {
		return metricValue(t, td.d.metrics.reg, name, labels)
	}
	waitFor(t, "a first save", func() bool { return metric("sonde_state_saves_total", map[string]string{"result": "success"}) > 0 })
	if v := metric("sonde_state_last_save_success_timestamp_seconds", nil); v < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("sonde_state_last_save_success_timestamp_seconds = %v, want about now", v)
	}

	removeDir(t, dir)
	failures := func() float64 { return metric("sonde_state_saves_total", map[string]string{"result": "failure"}) }
	waitFor(t, "three failed saves", func() bool { return failures() >= 3 })
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

	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a save after the directory came back", func() bool { return metric("sonde_state_last_save_successful", nil) == 1 })
	if !strings.Contains(logs.String(), "state file saved again") {
		t.Errorf("the recovery was not logged:\n%s", logs.String())
	}
	if page := td.okPage(t, "/"); strings.Contains(page, "not saved") {
		t.Errorf("the overview still warns after a save succeeded:\n%s", page)
	}

	removeDir(t, dir)
	if err := td.d.Stop(); err == nil || !strings.Contains(err.Error(), "the states were not saved at stop") {
		t.Fatalf("Stop with the state directory gone: %v, want the failed save", err)
	}
}
