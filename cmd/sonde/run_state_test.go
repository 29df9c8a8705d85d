package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/server/web/api"
)

// kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *sondeProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.done <- <-p.done // stop, at cleanup, sees it ended
}

// onlyTarget returns the one target of the daemon p.
func (p *sondeProc) onlyTarget(t *testing.T) api.TargetJSON {
	t.Helper()
	var page struct {
		Targets []api.TargetJSON `json:"targets"`
	}
	p.get(t, "/api/v1/targets", &page)
	if len(page.Targets) != 1 {
		t.Fatalf("targets: %+v, want one", page)
	}
	return page.Targets[0]
}

// metric returns the value of series (a metric name with its labels, as
// /metrics writes them) in the daemon p's /metrics, failing t when it is
// not there.
func (p *sondeProc) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("/metrics: %s: %v", sc.Text(), err)
			}
			return f
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	t.Fatalf("/metrics has no %s", series)
	return 0
}

// TestRunStateSurvivesKill is a crash and restart: `sonde run -state-file`
// is killed with SIGKILL and started again, and its target, which an App
// Gateway check starts unhealthy, is healthy and routed at once, since the
// time it became so, before any probe of the new process has answered (the
// backend hangs by then); the lock of the killed process is gone with it.
// A corrupt state file is reported and ignored: the daemon starts, its
// target in the initial state.
func TestRunStateSurvivesKill(t *testing.T) {
	t.Parallel()
	var hang atomic.Bool
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(func() {
		close(release)
		backend.Close()
	})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sonde.yaml")
	state := filepath.Join(dir, "state")
	yaml := fmt.Sprintf(`
checks:
  gw: {preset: appgateway, protocol: http, interval: 500ms, timeout: 500ms}
pools:
  - {name: gw, check: gw, targets: [%q]}
`, strings.TrimPrefix(backend.URL, "http://"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-state-file", state, "-state-interval", "100ms"}

	p := startSonde(t, cfg, args...)
	before := testenv.Eventually(t, "the target healthy", func() (api.TargetJSON, bool) {
		tj := p.onlyTarget(t)
		return tj, tj.State == "healthy"
	})
	// Two more saves: the second began after the target was seen healthy.
	const saves = `sonde_state_saves_total{result="success"}`
	n := p.metric(t, saves)
	testenv.Eventually(t, fmt.Sprintf("two saves of the state file beyond %v", n), func() (float64, bool) {
		m := p.metric(t, saves)
		return m, m >= n+2
	})
	hang.Store(true)
	p.kill(t)

	p = startSonde(t, cfg, args...)
	after := p.onlyTarget(t)
	// Times cross the restart as wall-clock time, read beside the monotonic
	// clock: a loaded machine may stretch the pair of reads by milliseconds.
	if after.State != "healthy" || after.Route != "routed" || after.StateSince.Sub(before.StateSince).Abs() > 50*time.Millisecond {
		t.Fatalf("after kill -9 and restart: %+v, want healthy and routed since %v", after, before.StateSince)
	}
	if !strings.Contains(p.log(), "states restored") {
		t.Errorf("no restore logged:\n%s", p.log())
	}

	p.kill(t)
	if err := os.WriteFile(state, []byte("SONDEST1 and garbage"), 0o644); err != nil { // sonde's, by its magic
		t.Fatal(err)
	}
	p = startSonde(t, cfg, args...)
	if x := p.onlyTarget(t); x.State != "unhealthy" {
		t.Errorf("with a corrupt state file: %+v, want the check's initial state, unhealthy", x)
	}
	if !strings.Contains(p.log(), "state file ignored") {
		t.Errorf("a corrupt state file was not reported:\n%s", p.log())
	}
}
