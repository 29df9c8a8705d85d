package server

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func (td *testDaemon) rewrite(t *testing.T, yaml string) {
	t.Helper()
	if err := os.WriteFile(td.path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (td *testDaemon) postReload(t *testing.T) int {
	t.Helper()
	resp, err := http.Post(td.http.URL+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestReload checks that a reload keeps the state of unchanged targets, adds
// and removes pools (deleting the removed pool's series), and that an invalid
// configuration is rejected while the running one goes on.
func TestReload(t *testing.T) {
	a, b := newBackend(t), newBackend(t)
	check := `
checks:
  web: {protocol: http, path: /, interval: 50ms, timeout: 1s, rise: 2, fall: 2}
`
	td := startDaemon(t, check+fmt.Sprintf(`
pools:
  - {name: one, check: web, targets: [%q]}
  - {name: gone, check: web, targets: [%q]}
`, a.addr(), b.addr()))
	a.failing.Store(true)
	td.waitEvent(t, a.addr(), "unhealthy", 0)
	td.waitEvent(t, b.addr(), "healthy", 0)

	// Reload with pool "gone" removed and pool "two" added.
	td.rewrite(t, check+fmt.Sprintf(`
pools:
  - {name: one, check: web, targets: [%q]}
  - {name: two, check: web, targets: [%q]}
`, a.addr(), b.addr()))
	var next struct {
		Next uint64 `json:"next"`
	}
	td.getJSON(t, "/api/v1/events", &next)
	if code := td.postReload(t); code != http.StatusOK {
		t.Fatalf("reload: status %d", code)
	}
	if p := td.pool(t, "one"); p.Unhealthy != 1 {
		t.Fatalf("pool one after reload: %+v, want its target still unhealthy", p)
	}
	if p := td.pool(t, "two"); p.Healthy != 1 {
		t.Fatalf("pool two after reload: %+v, want the shared target still healthy", p)
	}
	var evs struct {
		Events []Event `json:"events"`
	}
	td.getJSON(t, fmt.Sprintf("/api/v1/events?since=%d", next.Next), &evs)
	for _, e := range evs.Events {
		if e.Target == a.addr() {
			t.Fatalf("event %+v after reload: an unchanged target must keep its state", e)
		}
	}
	if n := testutil.CollectAndCount(td.d.metrics.probes, "sonde_probes_total"); n == 0 {
		t.Fatal("no sonde_probes_total series")
	}
	if strings.Contains(gatherText(t, td), `pool="gone"`) {
		t.Fatal("series of the removed pool are still exported")
	}

	// An invalid configuration is rejected; the running one goes on.
	td.rewrite(t, check+`
pools:
  - {name: one, check: nope, targets: ["127.0.0.1:1"]}
`)
	if code := td.postReload(t); code != http.StatusBadRequest {
		t.Fatalf("reload of an invalid config: status %d, want 400", code)
	}
	if v := testutil.ToFloat64(td.d.metrics.reloadOK); v != 0 {
		t.Fatalf("sonde_config_last_reload_successful = %v after a rejected reload, want 0", v)
	}
	if p := td.pool(t, "two"); p.Healthy != 1 {
		t.Fatalf("pool two after a rejected reload: %+v, want it running", p)
	}
	if v := testutil.ToFloat64(td.d.metrics.reloads.WithLabelValues("failure")); v != 1 {
		t.Fatalf("failed reloads = %v, want 1", v)
	}
}

// TestReloadProtocolChange checks that the series of a pool's old protocol
// go away when its check changes protocol, and the new protocol's appear.
func TestReloadProtocolChange(t *testing.T) {
	a := newBackend(t)
	pool := fmt.Sprintf("\npools:\n  - {name: one, check: web, targets: [%q]}\n", a.addr())
	td := startDaemon(t, "checks:\n  web: {protocol: http, interval: 50ms, timeout: 1s}"+pool)
	td.waitEvent(t, a.addr(), "healthy", 0)
	if text := gatherText(t, td); !strings.Contains(text, `sonde_probes_total{outcome="success",pool="one",protocol="http"}`) {
		t.Fatalf("no http series before the change:\n%s", text)
	}
	td.rewrite(t, "checks:\n  web: {protocol: tcp, tcp_mode: connect, interval: 50ms, timeout: 1s}"+pool)
	if code := td.postReload(t); code != http.StatusOK {
		t.Fatalf("reload: status %d", code)
	}
	text := gatherText(t, td)
	if strings.Contains(text, `protocol="http"`) {
		t.Errorf("series of the old protocol remain:\n%s", text)
	}
	if !strings.Contains(text, `pool="one",protocol="tcp"`) {
		t.Errorf("no series of the new protocol:\n%s", text)
	}
}

func gatherText(t *testing.T, td *testDaemon) string {
	t.Helper()
	_, body := td.scrape(t, "/metrics", nil)
	return body
}

// TestReloadRouteEvents checks that a reload that changes a pool's policy
// reports the routes it changes, so a load balancer following events stays
// right: with 49 % instead of 50 % of two targets, none may be removed.
func TestReloadRouteEvents(t *testing.T) {
	good, bad := newBackend(t), newBackend(t)
	bad.failing.Store(true)
	cfg := func(percent int) string {
		return fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 50ms, timeout: 1s, rise: 1, fall: 1}
pools:
  - {name: api, check: web, max_unhealthy_percent: %d, targets: [%q, %q]}
`, percent, good.addr(), bad.addr())
	}
	td := startDaemon(t, cfg(50))
	td.waitPool(t, "api", "one removed", func(p PoolJSON) bool { return p.Removed == 1 && p.Healthy == 1 })
	var page EventsPage
	td.getJSON(t, "/api/v1/events", &page)

	td.rewrite(t, cfg(49))
	if code := td.postReload(t); code != http.StatusOK {
		t.Fatalf("reload: status %d", code)
	}
	td.getJSON(t, fmt.Sprintf("/api/v1/events?since=%d", page.Next), &page)
	var got []string
	for _, e := range page.Events {
		if e.Kind == KindRoute {
			got = append(got, fmt.Sprintf("%s %s>%s %s", e.Target, e.From, e.To, e.Reason))
		}
	}
	want := bad.addr() + " removed>routed reload"
	if len(got) != 1 || got[0] != want {
		t.Fatalf("route events of the reload: %q, want [%q]", got, want)
	}
	if p := td.pool(t, "api"); p.Removed != 0 || p.Routable != 2 {
		t.Fatalf("pool after the reload: %+v, want nothing removed", p)
	}
}
