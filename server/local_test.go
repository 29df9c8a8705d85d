package server

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sondeprobe/sonde/probe"
)

// TestLocalErrorKeepsState probes a healthy backend from a source address
// this host does not have: every probe is a local_error, which must leave
// the target in its initial state, count in its own metric, show in the API
// and be logged once per period, not per probe.
func TestLocalErrorKeepsState(t *testing.T) {
	if b, _ := os.ReadFile("/proc/sys/net/ipv4/ip_nonlocal_bind"); strings.TrimSpace(string(b)) == "1" {
		t.Skip("net.ipv4.ip_nonlocal_bind is 1: any source address binds")
	}
	b := newBackend(t)
	logs, err := os.Create(filepath.Join(t.TempDir(), "log")) // the handler serialises writes
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	td := startDaemonWith(t, fmt.Sprintf(`
checks:
  web: {protocol: http, interval: 20ms, timeout: 1s, rise: 1, fall: 1, initial_state: healthy, source_address: 192.0.2.1}
pools:
  - {name: api, check: web, targets: [%q]}
`, b.addr()), func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	deadline := time.Now().Add(20 * time.Second)
	ports := td.d.metrics.local[probe.CausePorts]
	for testutil.ToFloat64(ports) < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("sonde_probe_local_errors_total{cause=\"ports\"} = %v after 20 s, want ≥ 5", testutil.ToFloat64(ports))
		}
		time.Sleep(20 * time.Millisecond)
	}
	var tl struct {
		Targets []TargetJSON `json:"targets"`
	}
	td.getJSON(t, "/api/v1/targets?pool=api", &tl)
	if len(tl.Targets) != 1 {
		t.Fatalf("targets %+v", tl.Targets)
	}
	x := tl.Targets[0]
	if x.State != "healthy" || x.Consecutive != 0 || x.LastOutcome != "local_error" || !strings.Contains(x.LastError, "cannot assign requested address") {
		t.Errorf("target %+v: want healthy (its initial state), no streak, last outcome local_error with the bind error", x)
	}
	if n := testutil.ToFloat64(td.d.metrics.probes.WithLabelValues("api", "http", "local_error")); n < 5 {
		t.Errorf("sonde_probes_total{outcome=\"local_error\"} = %v, want ≥ 5", n)
	}
	text, err := os.ReadFile(logs.Name())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(text), "probe could not run on this host"); n != 1 {
		t.Errorf("%d log lines about local errors within one period, want 1:\n%s", n, text)
	}
	if !strings.Contains(string(text), "cause=ports") {
		t.Errorf("log lacks the cause:\n%s", text)
	}
}
