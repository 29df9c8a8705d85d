package server

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/server/web/api"
)

// inNetnsEnv tells a test binary that it runs inside a network namespace
// its parent test made for it (see inOwnNamespace).
const inNetnsEnv = "SONDE_TEST_IN_NETNS"

// inOwnNamespace runs test name again, in a copy of this test binary inside
// a network namespace of its own with only lo up (see
// testenv.IsolatedNetwork: without root, in a user namespace too), and
// reports whether the caller is that copy: a test that changes the
// addresses of its network then goes on when it returns true, and returns
// when it returns false (the copy's result is the test's).
func inOwnNamespace(t *testing.T, name string) bool {
	t.Helper()
	if os.Getenv(inNetnsEnv) == "1" {
		return true
	}
	isolated := testenv.IsolatedNetwork(t, "a network namespace whose addresses the test changes")
	cmd := isolated(os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), inNetnsEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("%s in a namespace of its own: %v\n%s", name, err, out)
	}
	return false
}

// ip runs ip(8) with args, in the test's namespace.
func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(testenv.Tool(t, "ip", "iproute2"), args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// TestLocalErrorKeepsState probes a healthy backend from a source address
// that the test's namespace has, until the target has a streak of
// successes, then takes the address away: every probe is then a
// local_error, which must leave the target's state and streak as they were,
// count in its own metric, show in the API and be logged once per period,
// not per probe. A restart over the state file then resumes the streak as
// one of successes: failures turn the target unhealthy after fall of them.
func TestLocalErrorKeepsState(t *testing.T) {
	t.Parallel()
	if !inOwnNamespace(t, "TestLocalErrorKeepsState") {
		return
	}
	const source = "192.0.2.1"
	ip(t, "addr", "add", source+"/32", "dev", "lo")
	b := newBackend(t)
	logs, err := os.Create(filepath.Join(t.TempDir(), "log")) // the handler serialises writes
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	state := filepath.Join(t.TempDir(), "state")
	yaml := fmt.Sprintf(`
checks:
  web: {protocol: http, interval: 20ms, timeout: 1s, rise: 1, fall: 3, source_address: %s}
pools:
  - {name: api, check: web, targets: [%q]}
`, source, b.addr())
	td := startDaemonWith(t, yaml, func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
		o.StateFile = state
	})
	testenv.Eventually(t, "the target healthy with a streak of 5 successes", func() (api.TargetJSON, bool) {
		x, _ := td.target(t, "api", b.addr())
		return x, x.State == "healthy" && x.LastOutcome == "success" && x.Consecutive >= 5
	})

	ip(t, "addr", "del", source+"/32", "dev", "lo")
	ports := td.d.metrics.local[probe.CausePorts]
	waitLocal := func(n float64) api.TargetJSON {
		t.Helper()
		testenv.Eventually(t, fmt.Sprintf(`sonde_probe_local_errors_total{cause="ports"} ≥ %v`, n), func() (float64, bool) {
			v := testutil.ToFloat64(ports)
			return v, v >= n
		})
		x, ok := td.target(t, "api", b.addr())
		if !ok {
			t.Fatal("target gone")
		}
		return x
	}
	first := waitLocal(5)
	// A probe in flight as the address goes may time out (the answer is
	// for an address no longer local): that one failure is the network's
	// verdict of the moment, within fall. From then on every probe is a
	// local error, which changes nothing.
	if first.State != "healthy" || first.LastOutcome != "local_error" || !strings.Contains(first.LastError, "cannot assign requested address") {
		t.Errorf("target %+v: want healthy, last outcome local_error with the bind error", first)
	}
	if first.Consecutive < 5 && first.Consecutive > 1 {
		t.Errorf("target %+v: want its streak of successes, or one failure of a probe in flight as the address went", first)
	}
	if x := waitLocal(10); x.State != first.State || x.Consecutive != first.Consecutive {
		t.Errorf("after 5 more local errors: %+v, want state and streak as they were (%s, %d)", x, first.State, first.Consecutive)
	}
	if n := testutil.ToFloat64(td.d.metrics.probes.WithLabelValues("api", "http", "local_error")); n < 10 {
		t.Errorf("sonde_probes_total{outcome=\"local_error\"} = %v, want ≥ 10", n)
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

	// The state file keeps the streak, as one of successes.
	if err := td.d.Stop(); err != nil {
		t.Fatal(err)
	}
	b.failing.Store(true)
	ip(t, "addr", "add", source+"/32", "dev", "lo")
	td2 := startDaemonWith(t, yaml, func(o *Options) { o.StateFile = state })
	if e := td2.waitEvent(t, b.addr(), "unhealthy", 0); e.Streak != 3 {
		t.Errorf("unhealthy after %d failures, want fall (3): the resumed streak of successes counted as failures", e.Streak)
	}
}
