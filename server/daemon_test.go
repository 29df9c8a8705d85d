package server

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/server/web/api"
)

// backend is a loopback HTTP server whose answer can be switched, and which
// records when it answered each request with a failure.
type backend struct {
	srv     *httptest.Server
	failing atomic.Bool
	mu      sync.Mutex
	fails   []time.Time // when each failing answer was written
	oks     []time.Time
}

func newBackend(t *testing.T) *backend {
	b := &backend{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := b.failing.Load()
		if fail {
			w.WriteHeader(http.StatusInternalServerError)
		}
		io.WriteString(w, "Healthy")
		b.mu.Lock()
		if fail {
			b.fails = append(b.fails, time.Now())
		} else {
			b.oks = append(b.oks, time.Now())
		}
		b.mu.Unlock()
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// answeredBefore counts the failing (or successful) answers written at or
// before t.
func (b *backend) answeredBefore(t time.Time, failing bool) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	list := b.oks
	if failing {
		list = b.fails
	}
	n := 0
	for _, at := range list {
		if !at.After(t) {
			n++
		}
	}
	return n
}

func (b *backend) addr() string { return strings.TrimPrefix(b.srv.URL, "http://") }

// testDaemon runs a daemon over the config text and serves its handler.
type testDaemon struct {
	d    *Daemon
	http *httptest.Server
	path string
}

// startDaemon runs a daemon over the config text.
func startDaemon(t *testing.T, yaml string) *testDaemon {
	t.Helper()
	return startDaemonWith(t, yaml, nil)
}

// startDaemonWith is startDaemon with options changed by set (when not nil).
func startDaemonWith(t testing.TB, yaml string, set func(*Options)) *testDaemon {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sonde.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	var opt Options
	opt = Options{
		// The load resolves host names with the daemon's resolver.
		Load:   func() (*config.Config, error) { return config.Load(path, config.LoadOptions{Resolver: opt.Resolver}) },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Shards: 2,
		NoSyn:  true,
		Web:    WebOptions{EnableLifecycle: true},
	}
	if set != nil {
		set(&opt)
	}
	d, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	td := &testDaemon{d: d, http: httptest.NewServer(d.Handler()), path: path}
	t.Cleanup(func() {
		td.http.Close()
		if err := d.Stop(); err != nil {
			t.Error(err)
		}
	})
	return td
}

func (td *testDaemon) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	if code, body := td.get(t, path, v); code != http.StatusOK {
		t.Fatalf("GET %s: %d: %s", path, code, body)
	}
}

// get fetches path and, when the answer is 200, decodes it into v; it
// returns the status, and the body of any other answer.
func (td *testDaemon) get(t *testing.T, path string, v any) (int, string) {
	t.Helper()
	resp, err := http.Get(td.http.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, ""
}

// waitEvent polls the events API until an event for target reaches state to,
// and returns it.
func (td *testDaemon) waitEvent(t *testing.T, target, to string, after uint64) api.Event {
	t.Helper()
	return testenv.Eventually(t, fmt.Sprintf("an event for %s to %s", target, to), func() (api.Event, bool) {
		var page struct {
			Events []api.Event `json:"events"`
		}
		td.getJSON(t, fmt.Sprintf("/api/v1/events?since=%d", after), &page)
		for _, e := range page.Events {
			if e.Target == target && e.To == to {
				return e, true
			}
		}
		return api.Event{}, false
	})
}

func (td *testDaemon) pool(t *testing.T, name string) api.PoolJSON {
	t.Helper()
	var page struct {
		Pools []api.PoolJSON `json:"pools"`
	}
	td.getJSON(t, "/api/v1/pools", &page)
	for _, p := range page.Pools {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no pool %q", name)
	return api.PoolJSON{}
}

// waitPool polls /api/v1/pools until pool name satisfies ok: the router
// publishes a pool's decisions just after the state change behind them.
func (td *testDaemon) waitPool(t *testing.T, name, want string, ok func(api.PoolJSON) bool) {
	t.Helper()
	testenv.Eventually(t, "pool "+name+": "+want, func() (api.PoolJSON, bool) {
		p := td.pool(t, name)
		return p, ok(p)
	})
}

// TestDaemonEndToEnd runs the daemon against loopback servers with short
// intervals, makes one fail, and checks through /api/v1/events that it
// turned unhealthy after exactly fall failed probes and healthy after exactly
// rise successful ones, with the pool's routable count following P1 and P2.
func TestDaemonEndToEnd(t *testing.T) {
	t.Parallel()
	const rise, fall = 2, 3
	b := []*backend{newBackend(t), newBackend(t), newBackend(t), newBackend(t)}
	var targets []string
	for _, x := range b {
		targets = append(targets, fmt.Sprintf("%q", x.addr()))
	}
	td := startDaemon(t, fmt.Sprintf(`
checks:
  web:
    protocol: http
    path: /health
    interval: 50ms
    timeout: 1s
    rise: %d
    fall: %d
    initial_state: healthy
pools:
  - name: api
    check: web
    max_unhealthy_percent: 50
    targets: [%s]
`, rise, fall, strings.Join(targets, ", ")))

	p := td.pool(t, "api")
	if p.Routable != 4 || p.Healthy != 4 {
		t.Fatalf("pool at start: %+v, want 4 healthy and routable", p)
	}
	var next struct {
		Next uint64 `json:"next"`
	}
	td.getJSON(t, "/api/v1/events", &next)

	// One target fails: unhealthy after exactly fall failed probes.
	b[0].failing.Store(true)
	ev := td.waitEvent(t, b[0].addr(), "unhealthy", next.Next)
	if ev.Streak != fall || ev.Reason != "http_status" || ev.Status != 500 {
		t.Fatalf("event %+v: want %d consecutive http_status 500 failures", ev, fall)
	}
	if n := b[0].answeredBefore(ev.Time, true); n != fall {
		t.Fatalf("%d failing answers before the unhealthy event, want exactly %d", n, fall)
	}
	td.waitPool(t, "api", "one unhealthy: 1 removed, 3 routable", func(p api.PoolJSON) bool {
		return p.Unhealthy == 1 && p.Removed == 1 && p.Routable == 3
	})

	// Three of four unhealthy: 50 % caps the removal at two (P1).
	b[1].failing.Store(true)
	b[2].failing.Store(true)
	td.waitEvent(t, b[1].addr(), "unhealthy", next.Next)
	td.waitEvent(t, b[2].addr(), "unhealthy", next.Next)
	td.waitPool(t, "api", "three unhealthy: 2 removed, 2 routable (P1)", func(p api.PoolJSON) bool {
		return p.Unhealthy == 3 && p.Removed == 2 && p.Routable == 2
	})

	// All four unhealthy: fail open (P2).
	b[3].failing.Store(true)
	td.waitEvent(t, b[3].addr(), "unhealthy", next.Next)
	td.waitPool(t, "api", "all unhealthy: failing open with 4 routable (P2)", func(p api.PoolJSON) bool {
		return p.FailingOpen && p.Removed == 0 && p.Routable == 4
	})

	// Recovery: healthy after exactly rise successful probes.
	td.getJSON(t, "/api/v1/events", &next)
	recoverAt := time.Now()
	b[0].failing.Store(false)
	ev = td.waitEvent(t, b[0].addr(), "healthy", next.Next)
	if ev.Streak != rise {
		t.Fatalf("event %+v: want %d consecutive successes", ev, rise)
	}
	oks := b[0].answeredBefore(ev.Time, false) - b[0].answeredBefore(recoverAt, false)
	if oks != rise {
		t.Fatalf("%d successful answers before the healthy event, want exactly %d", oks, rise)
	}
	td.waitPool(t, "api", "one recovered: normal selection with 2 removed", func(p api.PoolJSON) bool {
		return !p.FailingOpen && p.Healthy == 1 && p.Removed == 2 && p.Routable == 2
	})

	var tl struct {
		Targets []api.TargetJSON `json:"targets"`
		Total   int              `json:"total"`
	}
	td.getJSON(t, "/api/v1/targets?pool=api&state=unhealthy", &tl)
	if tl.Total != 3 {
		t.Fatalf("unhealthy targets: %d, want 3", tl.Total)
	}
	for _, x := range tl.Targets {
		if x.LastOutcome != "http_status" || x.LastStatus != 500 || x.LastError == "" {
			t.Fatalf("target %+v: want last outcome http_status 500 with an error", x)
		}
	}
}

func TestMetricsLint(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	td := startDaemon(t, fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 50ms, timeout: 1s, rise: 1, fall: 1}
pools:
  - {name: api, check: web, targets: [%q]}
`, b.addr()))
	td.waitEvent(t, b.addr(), "healthy", 0)
	lint, err := testutil.CollectAndLint(&stateCollector{d: td.d})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range lint {
		t.Errorf("lint of the state collector: %s: %s", p.Metric, p.Text)
	}
	problems, err := testutil.GatherAndLint(td.d.metrics.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP sonde_pool_routable_targets Targets of a pool that receive traffic after the pool policy: healthy ones and unhealthy ones kept by max_unhealthy_percent or fail-open.
# TYPE sonde_pool_routable_targets gauge
sonde_pool_routable_targets{pool="api"} 1
# HELP sonde_target_healthy 1 when the target is healthy, 0 when unhealthy; absent while undecided or disabled.
# TYPE sonde_target_healthy gauge
sonde_target_healthy{pool="api",target="` + b.addr() + `"} 1
# HELP sonde_check_failure_window_seconds W1: longest time from the send of the first failing probe to unhealthy, t*k + i*(k-1) after completion, i*(k-1) + t at a fixed rate.
# TYPE sonde_check_failure_window_seconds gauge
sonde_check_failure_window_seconds{check="web"} 1
`
	if err := testutil.GatherAndCompare(td.d.metrics.reg, strings.NewReader(want),
		"sonde_pool_routable_targets", "sonde_target_healthy", "sonde_check_failure_window_seconds"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(td.d.metrics.probes.WithLabelValues("api", "http", "success")); n < 1 {
		t.Fatalf("sonde_probes_total success = %v, want ≥ 1", n)
	}
}
