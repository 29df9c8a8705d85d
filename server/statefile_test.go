package server

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/server/statefile"
	"github.com/sondeprobe/sonde/server/web/api"
)

// TestStateFileAcrossRestart stops a daemon whose target is healthy and
// starts another over the same state file: the target is healthy at once,
// since the same time, before any probe of the new daemon (its backend now
// hangs), though its check starts targets unhealthy. A corrupt state file
// (sonde's, by its magic) is reported and the daemon starts all the same.
func TestStateFileAcrossRestart(t *testing.T) {
	t.Parallel()
	b := newGate(t)
	state := filepath.Join(t.TempDir(), "state")
	yaml := fmt.Sprintf(`
checks:
  gw: {preset: appgateway, protocol: http, interval: 200ms, timeout: 200ms}
pools:
  - {name: gw, check: gw, targets: [%q]}
`, b.addr())
	withState := func(o *Options) { o.StateFile = state }
	td := startDaemonWith(t, yaml, withState)
	before := td.waitState(t, "gw", b.addr(), "healthy")
	time.Sleep(4 * sinceSlack) // a since made up at the restart would be this much later
	if err := td.d.Stop(); err != nil {
		t.Fatal(err)
	}
	b.hang.Store(true)
	td2 := startDaemonWith(t, yaml, withState)
	x, ok := td2.target(t, "gw", b.addr())
	if !ok || x.State != "healthy" || x.Route != "routed" || x.StateSince.Sub(before.StateSince).Abs() > sinceSlack {
		t.Fatalf("after the restart: %+v, want healthy and routed since %v", x, before.StateSince)
	}
	if err := td2.d.Stop(); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(state, []byte(statefile.Magic+"but corrupt"), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.SyncBuffer{}
	td3 := startDaemonWith(t, yaml, func(o *Options) {
		withState(o)
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	if x, _ := td3.target(t, "gw", b.addr()); x.State != "unhealthy" {
		t.Errorf("with a corrupt state file: %+v, want the check's initial state", x)
	}
	if !strings.Contains(logs.String(), "state file ignored") {
		t.Errorf("a corrupt state file was not reported; log:\n%s", logs.String())
	}
}

// TestStateFileDiscoveredTargets checks that discovered targets, which come
// after the start, resume their saved states too, and that a save made
// before they came keeps those states for a later start.
func TestStateFileDiscoveredTargets(t *testing.T) {
	t.Parallel()
	b := newGate(t)
	state := filepath.Join(t.TempDir(), "state")
	// A target that is healthy after 3 successes at 1 h: only a resumed
	// state is healthy soon after a start.
	conf := func(source string) string {
		return fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 1h, timeout: 1s, rise: 3, fall: 3, initial_state: healthy}
pools:
  - {name: web, check: web, %s}
`, source)
	}
	static := conf(fmt.Sprintf("static_configs: [{targets: [%q]}]", b.addr()))
	withState := func(o *Options) {
		o.StateFile = state
		o.DiscoveryDebounce = time.Millisecond
	}
	td := startDaemonWith(t, static, withState)
	before := td.waitTargets(t, "web", "healthy after its first probe", func(m map[string]api.TargetJSON) bool {
		return m[b.addr()].State == "healthy" && m[b.addr()].Consecutive == 1
	})[b.addr()]
	time.Sleep(4 * sinceSlack) // a since made up at the restart would be this much later
	if err := td.d.Stop(); err != nil {
		t.Fatal(err)
	}

	// A start whose discovery finds nothing keeps the state for later.
	sdDir := t.TempDir()
	discovered := conf(fmt.Sprintf("file_sd_configs: [{files: [%q]}]", filepath.Join(sdDir, "*.json")))
	td2 := startDaemonWith(t, discovered, withState)
	if err := td2.d.Stop(); err != nil {
		t.Fatal(err)
	}

	// After another start that finds nothing, the target comes back by
	// discovery: it resumes its state, though the check would start it
	// healthy anyway; the since tells.
	b.hang.Store(true) // a probe would fail: it stays healthy only as resumed (fall 3)
	td3 := startDaemonWith(t, discovered, withState)
	writeSD(t, filepath.Join(sdDir, "web.json"), []sdGroup{{Targets: []string{b.addr()}}})
	x := td3.waitState(t, "web", b.addr(), "healthy")
	if x.StateSince.Sub(before.StateSince).Abs() > sinceSlack || x.Consecutive != before.Consecutive {
		t.Errorf("discovered target after two restarts: since %v streak %d, want its saved since %v and streak %d",
			x.StateSince, x.Consecutive, before.StateSince, before.Consecutive)
	}
}
