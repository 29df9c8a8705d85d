package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/server/web/api"
)

// What discovery cannot do to the daemon: hold it while relabeling, empty a
// pool with an answer of invalid targets, or show a pool's targets in the
// discovery status long before the pool runs them.

// sourceJSON is a source in /api/v1/discovery, as a client reads it.
type sourceJSON struct {
	State     string         `json:"state"`
	Targets   int            `json:"targets"`
	Dropped   map[string]int `json:"dropped"`
	Updates   uint64         `json:"updates"`
	Refused   uint64         `json:"refused"`
	LastError string         `json:"last_error"`
}

// poolDiscoveryJSON is a pool in /api/v1/discovery.
type poolDiscoveryJSON struct {
	Pool         string       `json:"pool"`
	Targets      int          `json:"targets"`
	Sources      []sourceJSON `json:"sources"`
	PendingSince *time.Time   `json:"pending_since"`
}

// discoveryAnswer fetches /api/v1/discovery for pool, giving up after 2 s
// (ok false): the status must answer while discovery works.
func discoveryAnswer(t *testing.T, td *testDaemon, pool string) (poolDiscoveryJSON, bool) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(td.http.URL + "/api/v1/discovery")
	if err != nil {
		return poolDiscoveryJSON{}, false
	}
	defer resp.Body.Close()
	var st struct {
		Pools []poolDiscoveryJSON `json:"pools"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Pools {
		if p.Pool == pool && len(p.Sources) > 0 {
			return p, true
		}
	}
	t.Fatalf("no discovery status of pool %s: %+v", pool, st)
	return poolDiscoveryJSON{}, false
}

// waitDiscovery waits until pool's discovery status satisfies ok.
func waitDiscovery(t *testing.T, td *testDaemon, pool, want string, ok func(poolDiscoveryJSON) bool) poolDiscoveryJSON {
	t.Helper()
	return testenv.Eventually(t, "discovery of "+pool+": "+want, func() (poolDiscoveryJSON, bool) {
		st, answered := discoveryAnswer(t, td, pool)
		return st, answered && ok(st)
	})
}

// writeSlowSD writes a file_sd file of n targets whose label "big" holds
// size bytes, and returns the relabel rule that is slow over them: a regex
// the configuration accepts (31 states alive at once), tens of
// milliseconds a target.
func writeSlowSD(t *testing.T, path string, n, size int) string {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("[")
	big := strings.Repeat("a", size)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"targets": ["127.9.%d.%d:9"], "labels": {"big": %q}}`, i/256, i%256, big)
	}
	b.WriteString("]")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return `{source_labels: [big], regex: "(.*){30}b", target_label: x, replacement: "$1"}`
}

// within runs fn and reports whether it returned within d; fn goes on in
// the background when it did not.
func within(d time.Duration, fn func()) bool {
	done := make(chan struct{})
	go func() {
		fn()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// TestDiscoveryDoesNotHoldTheDaemon relabels 1,000 targets with a rule
// that takes tens of milliseconds each (most of a minute in all) and
// checks that meanwhile the discovery status answers, a reload is applied
// and the daemon stops, each within seconds: relabeling runs outside the
// daemon's lock and ends when the daemon stops.
func TestDiscoveryDoesNotHoldTheDaemon(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sd := filepath.Join(dir, "sd.json")
	rule := writeSlowSD(t, sd, 1000, 16<<10)
	yaml := fmt.Sprintf(`
checks:
  web: {protocol: tcp, port: 9, tcp_mode: connect, interval: 1h, timeout: 1s}
pools:
  - {name: base, check: web, health_checks: false, targets: ["127.8.0.1"]}
  - name: disc
    check: web
    health_checks: false
    file_sd_configs: [{files: [%q]}]
    relabel_configs: [%s]
`, sd, rule)
	td := startDaemonWith(t, yaml, func(o *Options) { o.DiscoveryDebounce = time.Millisecond })
	waitDiscovery(t, td, "disc", "the file read", func(st poolDiscoveryJSON) bool { return st.Sources[0].Updates >= 1 })

	td.rewrite(t, strings.Replace(yaml, `targets: ["127.8.0.1"]`, `targets: ["127.8.0.1", "127.8.0.2"]`, 1))
	var err error
	if !within(10*time.Second, func() { err = td.d.Reload() }) {
		t.Fatal("a reload waits 10 s for relabeling")
	}
	if err != nil {
		t.Fatal(err)
	}
	if n := len(td.d.cur.Load().cfg.Pools[0].Members); n != 2 {
		t.Errorf("pool base has %d targets after the reload, want 2", n)
	}
	if !within(10*time.Second, func() { err = td.d.Stop() }) {
		t.Fatal("stopping waits 10 s for relabeling")
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestDiscoveryRefusesInvalidAnswer has an HTTP SD server that gives three
// targets, then an answer whose one target is invalid: the pool keeps its
// three targets, and the refusal is reported in the discovery status, a
// metric and the log — it is not applied silently.
func TestDiscoveryRefusesInvalidAnswer(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	answer := `[{"targets": ["127.9.0.1:9", "127.9.0.2:9", "127.9.0.3:9"]}]`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	logs := &testenv.SyncBuffer{}
	td := startDaemonWith(t, fmt.Sprintf(`
checks:
  web: {protocol: tcp, port: 9, tcp_mode: connect, interval: 1h, timeout: 1s}
pools:
  - {name: web, check: web, health_checks: false, http_sd_configs: [{url: %q, refresh_interval: 100ms}]}
`, srv.URL), func(o *Options) {
		o.DiscoveryDebounce = time.Millisecond
		o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	td.waitPool(t, "web", "3 targets", func(p api.PoolJSON) bool { return p.Targets == 3 })

	mu.Lock()
	answer = `[{"targets": ["http://127.9.0.4:9/"]}]`
	mu.Unlock()
	st := waitDiscovery(t, td, "web", "an update refused", func(st poolDiscoveryJSON) bool {
		return st.Sources[0].Refused >= 1
	})
	src := st.Sources[0]
	if p := td.pool(t, "web"); p.Targets != 3 || st.Targets != 3 {
		t.Errorf("pool web has %d targets (discovery says %d) after an answer of one invalid target, want the 3 it had", p.Targets, st.Targets)
	}
	if src.State != "failing" || src.Targets != 3 || !strings.Contains(src.LastError, "update refused: 1 of the 1 targets it gave are invalid (bad __address__: 1; the first:") {
		t.Errorf("source %+v, want it failing with the refusal", src)
	}
	if _, body := td.scrape(t, "/metrics", nil); !strings.Contains(body, `sonde_discovery_refused_updates_total{pool="web",source="http_sd_configs[0]"} `) ||
		strings.Contains(body, `sonde_discovery_refused_updates_total{pool="web",source="http_sd_configs[0]"} 0`) {
		t.Error("sonde_discovery_refused_updates_total does not count the refusal")
	}
	if log := logs.String(); !strings.Contains(log, `msg="discovery update refused"`) || !strings.Contains(log, `pool=web source=http_sd_configs[0] reason="update refused: 1 of the 1 targets`) || !strings.Contains(log, "kept_targets=3") {
		t.Errorf("the log does not tell of the refusal:\n%s", logs)
	}
	if page := td.okPage(t, "/discovery"); !regexp.MustCompile(`<td class="wide">\d+ <span class="dim" title="updates not applied">\(\d+ refused\)</span></td>`).MatchString(page) {
		t.Errorf("the discovery page does not count the refusal:\n%s", page)
	}
	// A valid answer with fewer targets is believed.
	mu.Lock()
	answer = `[{"targets": ["127.9.0.1:9"]}]`
	mu.Unlock()
	td.waitPool(t, "web", "1 target", func(p api.PoolJSON) bool { return p.Targets == 1 })
}

// TestDiscoveryStatusMatchesPools checks that the discovery status tells
// the targets the pools run, and a newer set as pending until the daemon
// applies it: while the update cannot be applied (the test holds the
// daemon's update lock), the status still tells the old count.
func TestDiscoveryStatusMatchesPools(t *testing.T) {
	t.Parallel()
	sd := filepath.Join(t.TempDir(), "sd.json")
	writeSD(t, sd, []sdGroup{{Targets: []string{"127.9.0.1:9"}}})
	td := startDaemonWith(t, fmt.Sprintf(`
checks:
  web: {protocol: tcp, port: 9, tcp_mode: connect, interval: 1h, timeout: 1s}
pools:
  - {name: web, check: web, health_checks: false, file_sd_configs: [{files: [%q]}]}
`, sd), func(o *Options) { o.DiscoveryDebounce = time.Millisecond })
	td.waitPool(t, "web", "1 target", func(p api.PoolJSON) bool { return p.Targets == 1 })
	waitDiscovery(t, td, "web", "1 target", func(st poolDiscoveryJSON) bool { return st.Targets == 1 })

	var targets []string
	for i := range 1000 {
		targets = append(targets, fmt.Sprintf("127.9.%d.%d:9", i/256, i%256))
	}
	td.d.updateMu.Lock()
	writeSD(t, sd, []sdGroup{{Targets: targets}})
	st := waitDiscovery(t, td, "web", "the new targets found", func(st poolDiscoveryJSON) bool {
		return st.PendingSince != nil || st.Targets != 1
	})
	running := len(td.d.cur.Load().cfg.Pools[0].Members)
	page := td.okPage(t, "/discovery")
	td.d.updateMu.Unlock()
	if !strings.Contains(page, ", being applied</span></h2>") {
		t.Errorf("the discovery page does not tell of the update being applied:\n%s", page)
	}
	if st.Targets != running || st.Sources[0].Targets != running || st.PendingSince == nil {
		t.Errorf("while the update waits: discovery tells %d targets (source %d, pending since %v), the pool runs %d; want the running count, and the new one pending",
			st.Targets, st.Sources[0].Targets, st.PendingSince, running)
	}
	td.waitPool(t, "web", "1000 targets", func(p api.PoolJSON) bool { return p.Targets == 1000 })
	st = waitDiscovery(t, td, "web", "1000 targets, nothing pending", func(st poolDiscoveryJSON) bool {
		return st.Targets == 1000 && st.PendingSince == nil
	})
}
