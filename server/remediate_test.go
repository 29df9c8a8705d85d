package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/server/remediate"
)

// switchable serves 200 or, once failing is set, 500 on ip.
type switchable struct {
	addr    string
	failing atomic.Bool
}

func newSwitchable(t *testing.T, ip string) *switchable {
	s := &switchable{}
	s.addr = serve(t, ip, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	return s
}

// TestRemediationEndToEnd runs the daemon on loopback with a remediation
// over two pools (after 1 s, one firing an hour) and three instances:
// 127.0.0.1, in both pools, fails in app-a and is withheld by the
// multi-pool rule, then fails in app-b too and is replaced (R2: unhealthy
// in all its pools), by a command run without a shell that gets the firing
// on stdin and in its environment; 127.0.0.2 fails next and is withheld by
// max_per_hour (and so is 127.0.0.1, which stays unhealthy); 127.0.0.3
// fails in one pool but stays healthy in the other and is withheld by the
// multi-pool rule, never fired.
func TestRemediationEndToEnd(t *testing.T) {
	t.Parallel()
	oneA, oneB := newSwitchable(t, "127.0.0.1"), newSwitchable(t, "127.0.0.1")
	two := newSwitchable(t, "127.0.0.2")
	threeA, threeB := newSwitchable(t, "127.0.0.3"), newSwitchable(t, "127.0.0.3")
	dir := t.TempDir()
	out := filepath.Join(dir, "fired.jsonl")
	prog := filepath.Join(dir, "replace-instance")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n{ cat; echo \" $SONDE_INSTANCE $SONDE_POOLS $SONDE_REMEDIATION $1\"; } >> \"$2\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	td := startDaemon(t, fmt.Sprintf(`
checks:
  app: {preset: appservice, path: /health, interval: 100ms, fall: 2}
pools:
  - {name: app-a, check: app, targets: [%q, %q, %q]}
  - {name: app-b, check: app, targets: [%q, %q]}
remediation:
  - name: plan-a
    pools: [app-a, app-b]
    after: 1s
    max_per_hour: 1
    command: [%q, "plan-a", %q]
`, oneA.addr, two.addr, threeA.addr, oneB.addr, threeB.addr, prog, out))

	status := func() remediate.Status {
		var st remediate.Status
		td.getJSON(t, "/api/v1/remediations", &st)
		return st
	}
	waitRecord := func(instance, action, reason string) remediate.Record {
		t.Helper()
		var found remediate.Record
		testenv.Eventually(t, fmt.Sprintf("a finished %s record %q for %s", action, reason, instance), func() (remediate.Status, bool) {
			st := status()
			for _, r := range st.Records {
				if r.Instance == instance && r.Action == action && r.Reason == reason && r.Result != "running" {
					found = r
					return st, true
				}
			}
			return st, false
		})
		return found
	}

	oneA.failing.Store(true)
	threeA.failing.Store(true)
	for _, instance := range []string{"127.0.0.1", "127.0.0.3"} {
		multi := waitRecord(instance, "withheld", "multi_pool")
		if !slices.Equal(multi.UnhealthyPools, []string{"app-a"}) || !slices.Equal(multi.HealthyPools, []string{"app-b"}) {
			t.Fatalf("multi-pool record %+v", multi)
		}
	}
	for _, r := range status().Records {
		if r.Action == "fired" {
			t.Fatalf("firing %+v while 127.0.0.1 is healthy in app-b", r)
		}
	}
	oneB.failing.Store(true)
	fired := waitRecord("127.0.0.1", "fired", "")
	if fired.Result != "success" || !slices.Equal(fired.UnhealthyPools, []string{"app-a", "app-b"}) || fired.UnhealthySeconds < 1 || fired.LastOutcome != "http_status" {
		t.Fatalf("firing %+v: want both pools", fired)
	}
	two.failing.Store(true)
	waitRecord("127.0.0.2", "withheld", "max_per_hour")
	// 127.0.0.1 was not healed by the command: due again 1 s after its
	// firing, it waits for the hour too.
	waitRecord("127.0.0.1", "withheld", "max_per_hour")

	// Two more evaluations: nothing else fires.
	time.Sleep(2500 * time.Millisecond)
	st := status()
	for _, r := range st.Records {
		if r.Action == "fired" && r.Seq != fired.Seq {
			t.Errorf("second firing %+v", r)
		}
	}
	if rs := st.Remediations[0]; rs.FiredLastHour != 1 || rs.MaxPerHour != 1 || rs.MaxPerDay != 3 || len(rs.Instances) != 3 {
		t.Errorf("remediation status %+v: want one firing this hour, 3 instances watched", rs)
	}

	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) != 1 {
		t.Fatalf("command ran %d times: %q, want once", len(lines), lines)
	}
	var doc remediate.Firing
	dec := json.NewDecoder(strings.NewReader(lines[0]))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("stdin of the command %q: %v", lines[0], err)
	}
	rest := lines[0][dec.InputOffset():]
	if doc.Instance != "127.0.0.1" || doc.Remediation != "plan-a" || doc.Seq != fired.Seq || !slices.Equal(doc.Pools, []string{"app-a", "app-b"}) || len(doc.Targets) != 2 ||
		doc.Targets[0].Pool != "app-a" || doc.Targets[0].Target != oneA.addr || doc.Targets[1].Pool != "app-b" || doc.Targets[1].Target != oneB.addr {
		t.Errorf("firing document %+v: want 127.0.0.1's targets in app-a and app-b", doc)
	}
	if want := " 127.0.0.1 app-a,app-b plan-a plan-a"; rest != want {
		t.Errorf("environment and arguments %q, want %q", rest, want)
	}
	want := `
# HELP sonde_remediation_firings_total Remediation actions started, by remediation (R1); a failed action counts too.
# TYPE sonde_remediation_firings_total counter
sonde_remediation_firings_total{remediation="plan-a"} 1
# HELP sonde_remediation_withheld_total Remediation firings withheld, by remediation and reason: max_per_hour, max_per_12h, max_per_day (budgets), multi_pool (the instance is not unhealthy in every pool, R2).
# TYPE sonde_remediation_withheld_total counter
sonde_remediation_withheld_total{reason="max_per_12h",remediation="plan-a"} 0
sonde_remediation_withheld_total{reason="max_per_day",remediation="plan-a"} 0
sonde_remediation_withheld_total{reason="max_per_hour",remediation="plan-a"} 2
sonde_remediation_withheld_total{reason="multi_pool",remediation="plan-a"} 2
`
	if err := testutil.GatherAndCompare(td.d.metrics.reg, strings.NewReader(want), "sonde_remediation_firings_total", "sonde_remediation_withheld_total"); err != nil {
		t.Error(err)
	}

	// A reload keeps the budget: the hour's firing is still spent.
	if code := td.postReload(t); code != http.StatusOK {
		t.Fatalf("reload: status %d", code)
	}
	if rs := status().Remediations[0]; rs.FiredLastHour != 1 {
		t.Errorf("after a reload: %+v, want the hour's firing still counted", rs)
	}
}
