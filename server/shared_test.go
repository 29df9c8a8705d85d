package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/server/web/api"
)

// TestSharedStreamDetail checks that a target shared by two pools whose
// checks differ only in timing (one probe stream, P4) shows the detail of
// its failures in both: last_error in /api/v1/targets, the error text of
// its events, and the HTTP phase histograms of both pools.
func TestSharedStreamDetail(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	b.failing.Store(true)
	td := startDaemon(t, fmt.Sprintf(`
checks:
  fast: {protocol: http, path: /, interval: 50ms, timeout: 1s, rise: 1, fall: 1}
  slow: {protocol: http, path: /, interval: 80ms, timeout: 1s, rise: 1, fall: 2}
pools:
  - {name: leader, check: fast, targets: [%q]}
  - {name: follower, check: slow, targets: [%q]}
`, b.addr(), b.addr()))
	g := td.d.cur.Load()
	if l := g.cfg.Targets[1].Leader(); l != 0 {
		t.Fatalf("target 1 is led by %d, want 0: the test needs a shared stream", l)
	}

	for _, check := range []string{"fast", "slow"} {
		ev := td.waitEventOf(t, b.addr(), check, "unhealthy")
		if ev.Message == "" {
			t.Errorf("unhealthy event of check %s has no error text: %+v", check, ev)
		}
	}
	for _, pool := range []string{"leader", "follower"} {
		var tl struct {
			Targets []api.TargetJSON `json:"targets"`
		}
		td.getJSON(t, "/api/v1/targets?pool="+pool, &tl)
		if len(tl.Targets) != 1 {
			t.Fatalf("pool %s lists %d targets, want 1", pool, len(tl.Targets))
		}
		if x := tl.Targets[0]; x.LastOutcome != "http_status" || x.LastError == "" {
			t.Errorf("pool %s: target %+v, want last outcome http_status with its last_error", pool, x)
		}
		count := fmt.Sprintf(`sonde_http_phase_duration_seconds_count{phase="first_byte",pool=%q} `, pool)
		if text := gatherText(t, td); !strings.Contains(text, count) || strings.Contains(text, count+"0\n") {
			t.Errorf("pool %s: no first_byte phase observed", pool)
		}
	}
}

// waitEventOf polls the events API until an event for target's check
// reaches state to.
func (td *testDaemon) waitEventOf(t *testing.T, target, check, to string) api.Event {
	t.Helper()
	return testenv.Eventually(t, fmt.Sprintf("an event for %s (check %s) to %s", target, check, to), func() (api.Event, bool) {
		var page struct {
			Events []api.Event `json:"events"`
		}
		td.getJSON(t, "/api/v1/events", &page)
		for _, e := range page.Events {
			if e.Target == target && e.Check == check && e.To == to {
				return e, true
			}
		}
		return api.Event{}, false
	})
}

// TestReportAllocations checks that recording the detail of a successful
// probe of a shared stream, phases included, allocates nothing: it runs
// once per HTTP probe.
func TestReportAllocations(t *testing.T) {
	yaml := `
checks:
  fast: {protocol: http, interval: 1s, rise: 1, fall: 1}
  slow: {protocol: http, interval: 5s, rise: 1, fall: 2}
pools:
  - {name: a, check: fast, targets: ["127.0.0.1:1"]}
  - {name: b, check: slow, targets: ["127.0.0.1:1"]}
  - {name: c, check: slow, targets: ["127.0.0.1:1"]}
`
	ob := testObserver(t, yaml)
	rep := &probe.Report{Result: probe.Result{Outcome: probe.Success}, Phases: probe.Phases{Connect: time.Millisecond, FirstByte: time.Millisecond}}
	if allocs := testing.AllocsPerRun(1000, func() { ob.report(0, rep) }); allocs != 0 {
		t.Errorf("%v allocations per report, want 0", allocs)
	}
}
