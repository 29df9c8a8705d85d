package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/config/discovery"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/server/apiv1"
	"github.com/sondeprobe/sonde/server/web/api"
)

// sdGroup is one target group in Prometheus's file and HTTP SD format.
type sdGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// writeSD replaces the file at path with groups, atomically, as a tool that
// writes file_sd files should.
func writeSD(t testing.TB, path string, groups []sdGroup) {
	t.Helper()
	b, err := json.Marshal(groups)
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// waitTargets polls the targets of pool until ok says they are as wanted.
func (td *testDaemon) waitTargets(t *testing.T, pool, want string, ok func(map[string]api.TargetJSON) bool) map[string]api.TargetJSON {
	t.Helper()
	return testenv.Eventually(t, "pool "+pool+": "+want, func() (map[string]api.TargetJSON, bool) {
		var page struct {
			Targets []api.TargetJSON `json:"targets"`
		}
		td.getJSON(t, "/api/v1/targets?limit=0&pool="+pool, &page)
		got := map[string]api.TargetJSON{}
		for _, x := range page.Targets {
			got[x.Target] = x
		}
		return got, ok(got)
	})
}

// TestFileSD checks a pool fed by file_sd_configs: edits of its file are
// followed without a reload, targets it keeps keep their state and id,
// relabeling and labels apply, labels show in the API and filter it, and
// a file that cannot be read keeps the pool's targets.
func TestFileSD(t *testing.T) {
	t.Parallel()
	a, b, c := newGate(t), newGate(t), newGate(t)
	dir := t.TempDir()
	sd := filepath.Join(dir, "web.json")
	writeSD(t, sd, []sdGroup{{Targets: []string{a.addr(), b.addr()}, Labels: map[string]string{"zone": "a", "__meta_rack": "r1"}}})
	td := startDaemonWith(t, fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 100ms, timeout: 2s, rise: 1, fall: 2}
pools:
  - name: web
    check: web
    labels: {team: edge}
    metric_labels: [zone]
    file_sd_configs: [{files: [%q]}]
    relabel_configs:
      - {source_labels: [__meta_rack], target_label: rack}
`, sd), func(o *Options) { o.DiscoveryDebounce = 10 * time.Millisecond })
	got := td.waitTargets(t, "web", "a and b healthy", func(m map[string]api.TargetJSON) bool {
		return len(m) == 2 && m[a.addr()].State == "healthy" && m[b.addr()].State == "healthy"
	})
	wantLabels := map[string]string{"team": "edge", "zone": "a", "rack": "r1"}
	if l := got[a.addr()].Labels; fmt.Sprint(l) != fmt.Sprint(wantLabels) {
		t.Errorf("labels of %s = %v, want %v", a.addr(), l, wantLabels)
	}
	keep := got[b.addr()]
	time.Sleep(4 * sinceSlack) // a state started afresh by the update would have a later since

	// The file changes: a goes, c comes, b moves to another zone.
	writeSD(t, sd, []sdGroup{{Targets: []string{b.addr(), c.addr()}, Labels: map[string]string{"zone": "b"}}})
	got = td.waitTargets(t, "web", "b and c, c healthy", func(m map[string]api.TargetJSON) bool {
		_, hasA := m[a.addr()]
		return len(m) == 2 && !hasA && m[c.addr()].State == "healthy" && m[b.addr()].Labels["zone"] == "b"
	})
	if k := got[b.addr()]; k.ID != keep.ID || k.State != "healthy" || k.StateSince.Sub(keep.StateSince).Abs() > sinceSlack {
		t.Errorf("kept target %s: id %d %s since %v, want id %d healthy since %v", b.addr(), k.ID, k.State, k.StateSince, keep.ID, keep.StateSince)
	}
	var page struct {
		Targets []api.TargetJSON `json:"targets"`
		Total   int              `json:"total"`
	}
	td.getJSON(t, "/api/v1/targets?pool=web&label=zone%3Db&label=team!%3Dcore", &page)
	if len(page.Targets) != 2 || page.Total != -1 {
		t.Errorf("label filter zone=b, team!=core: %d targets (total %d), want 2 (total -1)", len(page.Targets), page.Total)
	}
	td.getJSON(t, "/api/v1/targets?pool=web&label=zone%3Da", &page)
	if len(page.Targets) != 0 {
		t.Errorf("label filter zone=a: %d targets, want none", len(page.Targets))
	}
	if code, body := td.get(t, "/api/v1/targets?label=zone", nil); code != http.StatusBadRequest || !strings.Contains(body, "NAME=VALUE") {
		t.Errorf("label=zone: %d %q, want 400 naming the form", code, body)
	}
	_, metrics := td.scrape(t, "/metrics", nil)
	if want := fmt.Sprintf(`sonde_target_healthy{pool="web",target=%q,zone="b"} 1`, c.addr()); !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s", want)
	}

	// A file that cannot be parsed keeps the targets, and the source says
	// it fails.
	if err := os.WriteFile(sd, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := testenv.Eventually(t, "the discovery source of web failing", func() (discovery.PoolStatus, bool) {
		st := discoveryOf(t, td, "web")
		return st, len(st.Sources) == 1 && st.Sources[0].State == "failing"
	})
	if st.Sources[0].LastError == "" {
		t.Errorf("failing source without an error: %+v", st.Sources[0])
	}
	td.waitTargets(t, "web", "b and c still", func(m map[string]api.TargetJSON) bool { return len(m) == 2 })
}

// discoveryOf returns the discovery status of pool.
func discoveryOf(t *testing.T, td *testDaemon, pool string) discovery.PoolStatus {
	t.Helper()
	var st struct {
		Pools []discovery.PoolStatus `json:"pools"`
	}
	td.getJSON(t, "/api/v1/discovery", &st)
	for _, p := range st.Pools {
		if p.Pool == pool {
			return p
		}
	}
	t.Fatalf("no discovery status for pool %s: %+v", pool, st)
	return discovery.PoolStatus{}
}

// TestHTTPSD checks a pool fed by http_sd_configs: it follows the server,
// and a server that fails keeps the pool's targets and is reported.
func TestHTTPSD(t *testing.T) {
	t.Parallel()
	a, b := newGate(t), newGate(t)
	var mu sync.Mutex
	groups := []sdGroup{{Targets: []string{a.addr()}}}
	var fail atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if fail.Load() {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(groups)
	}))
	t.Cleanup(srv.Close)
	td := startDaemonWith(t, fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 100ms, timeout: 2s, rise: 1, fall: 2}
pools:
  - {name: web, check: web, http_sd_configs: [{url: %q, refresh_interval: 1s}]}
`, srv.URL), func(o *Options) { o.DiscoveryDebounce = 10 * time.Millisecond })
	td.waitTargets(t, "web", "a healthy", func(m map[string]api.TargetJSON) bool { return len(m) == 1 && m[a.addr()].State == "healthy" })
	mu.Lock()
	groups = []sdGroup{{Targets: []string{a.addr(), b.addr()}}}
	mu.Unlock()
	td.waitTargets(t, "web", "a and b healthy", func(m map[string]api.TargetJSON) bool { return len(m) == 2 && m[b.addr()].State == "healthy" })

	fail.Store(true)
	sourceState := func(want string) {
		t.Helper()
		testenv.Eventually(t, "the discovery source of web "+want, func() (discovery.PoolStatus, bool) {
			st := discoveryOf(t, td, "web")
			return st, st.Sources[0].State == want
		})
	}
	sourceState("failing")
	if st := discoveryOf(t, td, "web").Sources[0]; !strings.Contains(st.LastError, "500") {
		t.Errorf("failing source's error %q does not say the server answered 500", st.LastError)
	}
	td.waitTargets(t, "web", "a and b kept", func(m map[string]api.TargetJSON) bool { return len(m) == 2 })
	_, metrics := td.scrape(t, "/metrics", nil)
	if !strings.Contains(metrics, `sonde_discovery_source_healthy{mechanism="http",pool="web",source="http_sd_configs[0]"} 0`) {
		t.Errorf("/metrics does not show the failing source")
	}
	fail.Store(false)
	sourceState("ok")
}

// flakyResolver answers names from a table that a test changes.
type flakyResolver struct {
	mu    sync.Mutex
	addrs map[string][]netip.Addr
}

func (r *flakyResolver) set(name string, addrs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var as []netip.Addr
	for _, a := range addrs {
		as = append(as, netip.MustParseAddr(a))
	}
	r.addrs[name] = as
}

func (r *flakyResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	as, ok := r.addrs[host]
	if !ok {
		return nil, fmt.Errorf("lookup %s: no such host", host)
	}
	return as, nil
}

// TestUnresolvableName checks that a host name that does not resolve
// leaves the daemon running and the other targets probed, is listed as
// unknown with why, and is probed once it resolves.
func TestUnresolvableName(t *testing.T) {
	t.Parallel()
	a := newGate(t)
	_, port, _ := strings.Cut(a.addr(), ":")
	res := &flakyResolver{addrs: map[string][]netip.Addr{}}
	res.set("good.test", "127.0.0.1")
	yaml := fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, port: %s, interval: 100ms, timeout: 2s, rise: 1, fall: 2}
pools:
  - {name: web, check: web, targets: ["good.test", "late.test"]}
`, port)
	td := startDaemonWith(t, yaml, func(o *Options) {
		o.Resolver = res
		o.DiscoveryDebounce = 10 * time.Millisecond
	})
	got := td.waitTargets(t, "web", "good.test healthy, late.test unresolved", func(m map[string]api.TargetJSON) bool {
		return m["127.0.0.1:"+port].State == "healthy" && m["late.test:"+port].Unresolved
	})
	u := got["late.test:"+port]
	if u.State != "unknown" || !strings.Contains(u.LastError, `cannot resolve "late.test"`) || u.ID < apiv1.UnresolvedBase {
		t.Errorf("unresolved target: %+v, want unknown with the lookup's error", u)
	}
	if p := td.pool(t, "web"); p.Unresolved != 1 || p.Targets != 1 {
		t.Errorf("pool: %d targets, %d unresolved; want 1 and 1", p.Targets, p.Unresolved)
	}
	// The name resolves: it is retried and probed. Retries back off up to
	// discovery.RetryMax, which a slow start may have reached.
	res.set("late.test", "127.0.0.1")
	testenv.Eventually(t, "good.test and late.test healthy", func() ([]api.TargetJSON, bool) {
		var page struct {
			Targets []api.TargetJSON `json:"targets"`
		}
		td.getJSON(t, "/api/v1/targets?pool=web", &page)
		healthy := 0
		for _, x := range page.Targets {
			if x.State == "healthy" && x.Target == "127.0.0.1:"+port && (x.Host == "good.test" || x.Host == "late.test") {
				healthy++
			}
		}
		return page.Targets, healthy == 2 && len(page.Targets) == 2
	})
}

// BenchmarkDiscoveryUpdate100k measures what a discovery update of 100,000
// targets costs end to end: a file_sd file rewritten with 100,000 targets
// next to 100,000 running ones, read by Prometheus's file discovery,
// relabeled, deduplicated, matched with the running targets and applied to
// the engine; then emptied again. Those pools' health checks are off, so
// the measure holds the update and not the probes that follow. It reports
// process CPU time per update; with live, 256 other targets are probed
// every 100 ms meanwhile (connect() to a closed loopback port), and it
// reports the latest any of their probes left during the updates.
func BenchmarkDiscoveryUpdate100k(b *testing.B) {
	for _, live := range []bool{false, true} {
		b.Run(map[bool]string{false: "quiet", true: "live"}[live], func(b *testing.B) { benchDiscoveryUpdate(b, live) })
	}
}

func benchDiscoveryUpdate(b *testing.B, live bool) {
	const n = 100_000
	dir := b.TempDir()
	sd := filepath.Join(dir, "disc.json")
	writeSD(b, sd, nil)
	targets := make([]string, n)
	for i := range targets {
		targets[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, byte(8 + i>>16), byte(i >> 8), byte(i)}), 9).String()
	}
	livePool := ""
	if live {
		livePool = `
  - {name: live, check: fast, targets: ["127.6.0.0/24"]}`
	}
	td := startDaemonWith(b, fmt.Sprintf(`
checks:
  web: {protocol: tcp, port: 9, tcp_mode: connect, interval: 1h, timeout: 1s}
  fast: {protocol: tcp, port: 9, tcp_mode: connect, interval: 100ms, timeout: 1s}
pools:
  - {name: base, check: web, health_checks: false, targets: ["127.4.0.0/16", "127.5.0.0/17", "127.5.128.0/19"]}
  - name: disc
    check: web
    health_checks: false
    file_sd_configs: [{files: [%q]}]
    relabel_configs:
      - {source_labels: [__address__], regex: "127\\.\\d+\\.(\\d+)\\..*", target_label: rack, replacement: "r$1"}%s
`, sd, livePool), func(o *Options) {
		o.NoMemoryTuning = true
		o.DiscoveryDebounce = time.Millisecond
	})
	d := td.d
	members := func() int {
		g := d.cur.Load()
		return len(g.cfg.Pools[1].Members)
	}
	// The wait is timed: polled every millisecond, it adds at most that.
	wait := func(want int) {
		testenv.EventuallyEvery(b, fmt.Sprintf("pool disc with %d members", want), time.Millisecond, func() (int, bool) {
			m := members()
			return m, m == want
		})
	}
	if live {
		// The updates are measured once the live targets' first probes,
		// which go out at once, are done and the next are spread over
		// their interval.
		testenv.Eventually(b, "every live target probed", func() (int, bool) {
			g := d.cur.Load()
			probed := 0
			for _, id := range g.cfg.Pools[2].Members {
				if g.engine.Status(id).Probed {
					probed++
				}
			}
			return probed, probed == len(g.cfg.Pools[2].Members)
		})
	}
	group := []sdGroup{{Targets: targets, Labels: map[string]string{"zone": "a"}}}
	before := d.engine.Stats().LatenessCounts
	var addCPU, removeCPU, addWall time.Duration
	b.ReportAllocs()
	for b.Loop() {
		c0, w0 := processCPU(), time.Now()
		writeSD(b, sd, group)
		wait(n)
		c1 := processCPU()
		addWall += time.Since(w0)
		writeSD(b, sd, nil)
		wait(0)
		addCPU += c1 - c0
		removeCPU += processCPU() - c1
	}
	after := d.engine.Stats().LatenessCounts
	if live {
		worst := time.Duration(0)
		for i := range after {
			if after[i] > before[i] {
				worst = 10 * time.Second // the overflow bucket: beyond the last bound
				if i < len(scheduler.LatenessBuckets) {
					worst = scheduler.LatenessBuckets[i]
				}
			}
		}
		b.ReportMetric(float64(worst.Microseconds())/1e3, "max-late-ms")
		return
	}
	b.ReportMetric(float64(addCPU.Milliseconds())/float64(b.N), "add-cpu-ms/100k")
	b.ReportMetric(float64(addWall.Milliseconds())/float64(b.N), "add-wall-ms/100k")
	b.ReportMetric(float64(removeCPU.Milliseconds())/float64(b.N), "remove-cpu-ms/100k")
}

// processCPU returns the process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
