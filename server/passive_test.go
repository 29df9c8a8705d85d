package server

import (
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"strings"
	"testing"

	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/server/web/api"
)

// connectFrom makes n connections to addr from another process (bash's
// /dev/tcp), closing each at once, 50 ms apart: the passive observer leaves
// the test's own connects out, as it does sonde's probes, and past a
// target's threshold it sends about one failure in 25 ms.
func connectFrom(t *testing.T, addr string, n int) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	script := fmt.Sprintf(`for i in $(seq %d); do (exec 3<>/dev/tcp/%s/%s) 2>/dev/null; sleep 0.05; done; true`, n, host, port)
	if out, err := exec.Command(testenv.Tool(t, "bash", "bash"), "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("connections from bash: %v: %s", err, out)
	}
}

// closedTarget returns a loopback address that answered at first (the daemon
// sees its target healthy) and a function that closes it: from then on it
// refuses connections.
func closedTarget(t *testing.T) (addr string, close func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testenv.AcceptAndClose(l)
	t.Cleanup(func() { l.Close() })
	return l.Addr().String(), func() { l.Close() }
}

// passiveConfig probes addr once an hour: only passive evidence can find it
// down within a test.
func passiveConfig(addr, passive string) string {
	return fmt.Sprintf(`checks:
  c: {protocol: tcp, tcp_mode: connect, interval: 1h, timeout: 1s, rise: 1, fall: 2, passive: %s}
pools:
  - {name: p, check: c, targets: [%q]}
`, passive, addr)
}

// TestPassiveRecheck: refused connections of another process make
// triggers, each pulls a probe forward, and the probes find the target
// down long before the interval; the trigger is an event and counted.
func TestPassiveRecheck(t *testing.T) {
	testenv.RequirePrivileged(t, "the passive observer needs CAP_BPF and CAP_PERFMON")
	addr, closeTarget := closedTarget(t)
	td := startDaemon(t, passiveConfig(addr, "{failures: 2, window: 10s, recheck_gap: 20ms}"))
	td.waitState(t, "p", addr, "healthy")
	if !td.d.PassiveRuns() {
		t.Fatal("the passive observer does not run as root")
	}
	closeTarget()
	before := td.lastSeq(t)
	testenv.Eventually(t, "the target unhealthy through passive rechecks", func() (api.TargetJSON, bool) {
		connectFrom(t, addr, 2)
		x, _ := td.target(t, "p", addr)
		return x, x.State == "unhealthy"
	})
	ev := td.waitEvent(t, addr, "recheck", before)
	if ev.Kind != api.KindPassive || ev.Reason != "refused" || ev.Streak != 2 || len(ev.Pools) != 1 || ev.Pools[0] != "p" {
		t.Errorf("passive event %+v, want kind passive, reason refused, consecutive 2, pool p", ev)
	}
	if st := td.waitEvent(t, addr, "unhealthy", before); st.Passive || st.Reason != "refused" {
		t.Errorf("state event %+v: the probes decided it, want reason refused and not passive", st)
	}
	if v := metricValue(t, td.d.metrics.reg, "sonde_passive_triggers_total", map[string]string{"pool": "p", "action": "recheck"}); v < 1 {
		t.Errorf("sonde_passive_triggers_total{action=recheck} = %v, want ≥ 1", v)
	}
	if v := metricValue(t, td.d.metrics.reg, "sonde_passive_connections_total", map[string]string{"pool": "p", "outcome": "refused"}); v < 2 {
		t.Errorf("sonde_passive_connections_total{outcome=refused} = %v, want ≥ 2", v)
	}
	if v := metricValue(t, td.d.metrics.reg, "sonde_passive_available", nil); v != 1 {
		t.Errorf("sonde_passive_available = %v, want 1", v)
	}
	// The target's timeline marks the triggers.
	var h api.HistoryJSON
	td.getJSON(t, "/api/v1/history?"+url.Values{"pool": {"p"}, "target": {addr}}.Encode(), &h)
	marks := 0
	for _, r := range h.Results {
		if r.Passive {
			marks++
			if r.Outcome != "refused" {
				t.Errorf("passive mark %+v, want outcome refused", r)
			}
		}
	}
	if marks == 0 {
		t.Errorf("history %+v has no passive mark", h.Results)
	}
}

// TestPassiveEject: with the eject action, each trigger counts as a failed
// probe; fall of them make the target unhealthy without any probe, and the
// state change says it was passive evidence.
func TestPassiveEject(t *testing.T) {
	testenv.RequirePrivileged(t, "the passive observer needs CAP_BPF and CAP_PERFMON")
	addr, closeTarget := closedTarget(t)
	td := startDaemon(t, passiveConfig(addr, "{failures: 1, action: eject}"))
	td.waitState(t, "p", addr, "healthy")
	closeTarget()
	before := td.lastSeq(t)
	connectFrom(t, addr, 2)
	st := td.waitEvent(t, addr, "unhealthy", before)
	if !st.Passive || !strings.Contains(st.Message, "passive") {
		t.Errorf("state event %+v, want it marked passive", st)
	}
	if v := metricValue(t, td.d.metrics.reg, "sonde_passive_triggers_total", map[string]string{"pool": "p", "action": "eject"}); v != 2 {
		t.Errorf("sonde_passive_triggers_total{action=eject} = %v, want 2", v)
	}
	if v := metricValue(t, td.d.metrics.reg, "sonde_probes_total", map[string]string{"pool": "p", "outcome": "refused"}); v != 0 {
		t.Errorf("sonde_probes_total{outcome=refused} = %v: passive evidence counted as probes", v)
	}
}

// TestPassiveObserveChangesNothing: observe only counts; the target stays
// healthy whatever the connections do, and its own connects (the test's,
// like sonde's) are no evidence.
func TestPassiveObserveChangesNothing(t *testing.T) {
	testenv.RequirePrivileged(t, "the passive observer needs CAP_BPF and CAP_PERFMON")
	addr, closeTarget := closedTarget(t)
	td := startDaemon(t, passiveConfig(addr, "{failures: 1, action: observe}"))
	td.waitState(t, "p", addr, "healthy")
	closeTarget()
	for range 3 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
		}
	}
	connectFrom(t, addr, 3)
	testenv.Eventually(t, "three observed triggers", func() (float64, bool) {
		v := metricValue(t, td.d.metrics.reg, "sonde_passive_triggers_total", map[string]string{"pool": "p", "action": "observe"})
		return v, v >= 3
	})
	if v := metricValue(t, td.d.metrics.reg, "sonde_passive_connections_total", map[string]string{"pool": "p", "outcome": "refused"}); v != 3 {
		t.Errorf("sonde_passive_connections_total{outcome=refused} = %v, want the other process's 3 only", v)
	}
	if x, _ := td.target(t, "p", addr); x.State != "healthy" {
		t.Errorf("target %s after observed failures, want healthy", x.State)
	}
}

// lastSeq returns the number of the newest event.
func (td *testDaemon) lastSeq(t *testing.T) uint64 {
	t.Helper()
	var page struct {
		Next uint64 `json:"next"`
	}
	td.getJSON(t, "/api/v1/events?since=0&limit=0", &page)
	return page.Next
}
