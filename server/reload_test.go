package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/server/web/api"
)

// rewrite replaces the daemon's config file, at once (a reload never reads
// half of it).
func (td *testDaemon) rewrite(t *testing.T, yaml string) {
	t.Helper()
	tmp := td.path + ".new"
	if err := os.WriteFile(tmp, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, td.path); err != nil {
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
	t.Parallel()
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
		Events []api.Event `json:"events"`
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

// TestReloadFIFO replaces the config's targets file, then the config file,
// by a FIFO that nobody writes: POST /-/reload must answer at once with the
// reason (reading the FIFO would wait for a writer, holding every other
// reload and the daemon's stop), the running configuration go on, and the
// daemon stop.
func TestReloadFIFO(t *testing.T) {
	t.Parallel()
	a := newBackend(t)
	dir := t.TempDir()
	targets := filepath.Join(dir, "targets.txt")
	if err := os.WriteFile(targets, []byte(a.addr()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	td := startDaemon(t, fmt.Sprintf(`
checks:
  web: {protocol: http, interval: 50ms, timeout: 1s}
pools:
  - {name: one, check: web, targets_file: %q}
`, targets))
	td.waitEvent(t, a.addr(), "healthy", 0)
	for _, file := range []string{targets, td.path} {
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(file, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { // a reader that waits for a writer gets one, and EOF
			if f, err := os.OpenFile(file, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		})
		done := make(chan int, 1)
		go func() { done <- td.postReload(t) }()
		select {
		case code := <-done:
			if code != http.StatusBadRequest {
				t.Errorf("reload with %s a FIFO: status %d, want 400", filepath.Base(file), code)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("reload with %s a FIFO: no answer after 10 s", filepath.Base(file))
		}
		if p := td.pool(t, "one"); p.Healthy != 1 {
			t.Errorf("pool one after the rejected reload: %+v, want it running", p)
		}
	}
	stopped := make(chan error, 1)
	go func() { stopped <- td.d.Stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the daemon does not stop")
	}
}

// TestReloadEditDuringLoad edits the config file while a load reads it
// (the test's Load rewrites it right after parsing it), at the start and at
// a reload: the edit must not count as applied, so the next reload reads
// it, where a digest taken after the load would find the file unchanged.
func TestReloadEditDuringLoad(t *testing.T) {
	t.Parallel()
	a := newBackend(t)
	yaml := func(pools ...string) string {
		y := "checks:\n  web: {protocol: http, interval: 50ms, timeout: 1s}\npools:\n"
		for _, p := range pools {
			y += fmt.Sprintf("  - {name: %s, check: web, targets: [%q]}\n", p, a.addr())
		}
		return y
	}
	var edit atomic.Pointer[string] // written over the file after the next load
	td := startDaemonWith(t, yaml("one"), func(o *Options) {
		load := o.Load
		o.Load = func() (*config.Config, error) {
			cfg, err := load()
			if next := edit.Swap(nil); next != nil && err == nil {
				path := cfg.Files[0].Path
				if err := os.WriteFile(path+".new", []byte(*next), 0o644); err != nil {
					return nil, err
				}
				if err := os.Rename(path+".new", path); err != nil {
					return nil, err
				}
			}
			return cfg, err
		}
		b := yaml("one", "two")
		edit.Store(&b)
	})
	pools := func() []string {
		var page struct {
			Pools []api.PoolJSON `json:"pools"`
		}
		td.getJSON(t, "/api/v1/pools", &page)
		var names []string
		for _, p := range page.Pools {
			names = append(names, p.Name)
		}
		return names
	}
	if diff := cmp.Diff([]string{"one"}, pools()); diff != "" {
		t.Fatalf("pools after the start (-want +got):\n%s", diff)
	}
	if code := td.postReload(t); code != http.StatusOK {
		t.Fatalf("reload: status %d", code)
	}
	if diff := cmp.Diff([]string{"one", "two"}, pools()); diff != "" {
		t.Fatalf("pools after a reload that follows an edit made while the start read the file (-want +got):\n%s", diff)
	}

	c := yaml("one", "three")
	edit.Store(&c)
	td.rewrite(t, yaml("one", "two")+"# edited\n")
	if code := td.postReload(t); code != http.StatusOK {
		t.Fatalf("reload: status %d", code)
	}
	if code := td.postReload(t); code != http.StatusOK {
		t.Fatalf("reload: status %d", code)
	}
	if diff := cmp.Diff([]string{"one", "three"}, pools()); diff != "" {
		t.Fatalf("pools after a reload that follows an edit made while a reload read the file (-want +got):\n%s", diff)
	}
}

// TestReloadProtocolChange checks that the series of a pool's old protocol
// go away when its check changes protocol, and the new protocol's appear.
func TestReloadProtocolChange(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	td.waitPool(t, "api", "one removed", func(p api.PoolJSON) bool { return p.Removed == 1 && p.Healthy == 1 })
	var page api.EventsPage
	td.getJSON(t, "/api/v1/events", &page)

	td.rewrite(t, cfg(49))
	if code := td.postReload(t); code != http.StatusOK {
		t.Fatalf("reload: status %d", code)
	}
	td.getJSON(t, fmt.Sprintf("/api/v1/events?since=%d", page.Next), &page)
	var got []string
	for _, e := range page.Events {
		if e.Kind == api.KindRoute {
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

// gate is a loopback HTTP backend that answers at once, or after a delay, or
// hangs (accepts the request and never answers) while hang is set.
type gate struct {
	srv    *httptest.Server
	delay  atomic.Int64 // ns before answering
	hang   atomic.Bool
	active atomic.Int64 // requests being answered
	served atomic.Int64 // requests answered
	stop   chan struct{}
}

func newGate(t *testing.T) *gate {
	g := &gate{stop: make(chan struct{})}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.active.Add(1)
		defer g.active.Add(-1)
		if g.hang.Load() {
			select {
			case <-g.stop:
			case <-r.Context().Done():
			}
			return
		}
		if d := time.Duration(g.delay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "ok")
		g.served.Add(1)
	}))
	t.Cleanup(func() {
		close(g.stop)
		g.srv.Close()
	})
	return g
}

func (g *gate) addr() string { return strings.TrimPrefix(g.srv.URL, "http://") }

// target returns the target at addr in pool (any pool for ""), or false.
func (td *testDaemon) target(t *testing.T, pool, addr string) (api.TargetJSON, bool) {
	t.Helper()
	var page struct {
		Targets []api.TargetJSON `json:"targets"`
	}
	td.getJSON(t, "/api/v1/targets?limit=0&pool="+pool, &page)
	for _, x := range page.Targets {
		if x.Target == addr {
			return x, true
		}
	}
	return api.TargetJSON{}, false
}

// waitState polls until the target at addr in pool is in state.
func (td *testDaemon) waitState(t *testing.T, pool, addr, state string) api.TargetJSON {
	t.Helper()
	return testenv.Eventually(t, fmt.Sprintf("%s in pool %s %s", addr, pool, state), func() (api.TargetJSON, bool) {
		x, ok := td.target(t, pool, addr)
		return x, ok && x.State == state
	})
}

// sinceSlack bounds how far two API readings of one state_since may differ:
// it is turned into wall-clock time with a pair of clock reads, which a
// loaded machine may stretch by milliseconds.
const sinceSlack = 50 * time.Millisecond

// TestReloadInPlace checks that a reload edits the running engine: a probe
// in flight during the reload finishes and counts (nothing is abandoned or
// sent again), the worker pool of an unchanged check keeps running, an
// unchanged target keeps its id and state, an added target is probed at
// once, a removed one leaves the API and its series, and a target whose
// probe changed starts afresh.
func TestReloadInPlace(t *testing.T) {
	t.Parallel()
	slow, fast, gone, added := newGate(t), newGate(t), newGate(t), newGate(t)
	slow.delay.Store(int64(600 * time.Millisecond))
	conf := func(altPath string, pools string) string {
		return fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 100ms, timeout: 3s, rise: 1, fall: 2}
  alt: {protocol: http, path: %s, interval: 100ms, timeout: 3s, rise: 2, fall: 2}
pools:
%s`, altPath, pools)
	}
	before := fmt.Sprintf("  - {name: keep, check: web, targets: [%q, %q]}\n  - {name: gone, check: web, targets: [%q]}\n  - {name: alt, check: alt, targets: [%q]}\n",
		slow.addr(), fast.addr(), gone.addr(), fast.addr())
	td := startDaemon(t, conf("/a", before))
	keep := td.waitState(t, "keep", slow.addr(), "healthy")
	td.waitState(t, "keep", fast.addr(), "healthy")
	td.waitState(t, "gone", gone.addr(), "healthy")
	td.waitState(t, "alt", fast.addr(), "healthy")
	pool := td.d.probers.pools["web"]
	if pool.lw == nil {
		t.Fatal("the plain-HTTP check does not run on the HTTP event loops")
	}
	time.Sleep(4 * sinceSlack) // a state started afresh at the reload would have a later since

	after := fmt.Sprintf("  - {name: keep, check: web, targets: [%q, %q]}\n  - {name: new, check: web, targets: [%q]}\n  - {name: alt, check: alt, targets: [%q]}\n",
		slow.addr(), fast.addr(), added.addr(), fast.addr())
	td.rewrite(t, conf("/b", after))
	// Reload while the slow target's probe is out.
	testenv.Eventually(t, "a probe of the slow target out", func() (int64, bool) { n := slow.active.Load(); return n, n > 0 })
	servedBefore := slow.served.Load()
	reloaded := time.Now()
	if err := td.d.Reload(); err != nil {
		t.Fatal(err)
	}

	x := td.waitState(t, "new", added.addr(), "healthy")
	if x.LastProbe == nil || x.LastProbe.Sub(reloaded) > 3*time.Second {
		t.Errorf("added target first probed at %v, reload at %v: want at once", x.LastProbe, reloaded)
	}
	if x, ok := td.target(t, "alt", fast.addr()); !ok || x.StateSince.Before(reloaded.Add(-time.Millisecond)) {
		t.Errorf("target whose probe changed: %+v, want it started afresh at the reload (%v)", x, reloaded)
	}
	if _, ok := td.target(t, "", gone.addr()); ok {
		t.Error("a target of a removed pool is still listed")
	}
	testenv.Eventually(t, "the slow target's probe answered", func() (int64, bool) { n := slow.served.Load(); return n, n > servedBefore })
	// Time for its answer to be applied: a state wrongly started afresh by
	// it would show a later since.
	time.Sleep(300 * time.Millisecond)
	k := td.waitState(t, "keep", slow.addr(), "healthy")
	if d := k.StateSince.Sub(keep.StateSince).Abs(); k.ID != keep.ID || d > sinceSlack {
		t.Errorf("unchanged target after reload: id %d since %v, want id %d since %v", k.ID, k.StateSince, keep.ID, keep.StateSince)
	}
	if td.d.probers.pools["web"] != pool {
		t.Error("the worker pool of an unchanged check was replaced")
	}
	// A probe of the removed target handed to the launcher just before the
	// reload finds its target gone when it starts, and is abandoned; no
	// probe of a kept target may be.
	if ws := pool.stats().Stats(); ws.Abandoned > 1 {
		t.Errorf("worker stats %+v: the reload abandoned probes of kept targets", ws)
	}
	// Only the removed target's and the changed target's probes may have
	// been out at the reload: their answers find no probe in flight and
	// count as stale, by design. Any more means a kept probe was lost.
	if st := td.d.engine.Stats(); st.Stale > 2 {
		t.Errorf("engine stats %+v: more answers found their probe gone than the reload removed", st)
	}
	text := gatherText(t, td)
	if strings.Contains(text, gone.addr()) || strings.Contains(text, `pool="gone"`) {
		t.Error("series of the removed target or pool are still exported")
	}
}

// TestReloadChangesLauncherKind checks that a check that moves from plain
// HTTP to connect() to HTTPS and back gets a launcher of the new kind each
// time, and that the old one stops.
func TestReloadChangesLauncherKind(t *testing.T) {
	g := newGate(t)
	conf := func(check string) string {
		return fmt.Sprintf("checks:\n  web: {%s, interval: 100ms, timeout: 2s, rise: 1, fall: 2}\npools:\n  - {name: p, check: web, targets: [%q]}\n", check, g.addr())
	}
	td := startDaemon(t, conf("protocol: http, path: /"))
	td.waitState(t, "p", g.addr(), "healthy")
	first := td.d.probers.pools["web"]
	prev := first
	for i, step := range []struct {
		check string
		kind  loopKind
	}{
		{"protocol: tcp, tcp_mode: connect", loopConnect},
		{"protocol: https, path: /", notOnLoops},
		{"protocol: http, path: /x", loopHTTP},
	} {
		td.rewrite(t, conf(step.check))
		if err := td.d.Reload(); err != nil {
			t.Fatal(err)
		}
		if step.kind != notOnLoops { // the gate answers plain HTTP only
			td.waitState(t, "p", g.addr(), "healthy")
		}
		wp := td.d.probers.pools["web"]
		if !wp.sameKind(step.kind) || wp == prev {
			t.Errorf("after reload %d to %q: pool %+v, want a new launcher of kind %d", i+1, step.check, wp, step.kind)
		}
		prev = wp
	}
	if st := first.lw.Stats(); st.InFlight != 0 {
		t.Errorf("the first launcher still has probes in flight: %+v", st)
	}
	now := probe.Nanotime()
	before := first.lw.Stats().Abandoned
	first.lw.Launch(0, []probe.Request{{ID: 0, Gen: 99, Sent: now, Deadline: now + int64(time.Second)}})
	if st := first.lw.Stats(); st.Abandoned != before+1 || st.Queued != first.lw.Stats().Queued {
		t.Errorf("the replaced launcher took a request: %+v", st)
	}
}

// TestReloadSpam is reload spam: POST /-/reload every 0.3 s to
// the daemon's own HTTP server (lifecycle endpoints on, as with
// -web.enable-lifecycle), each with a changed file, while a backend hangs.
// Reloads are coalesced and paced, probes in flight are kept, so the hung
// backend turns unhealthy within W3 from the hang (with slack for a loaded
// machine), where re-sent probes used to keep it healthy indefinitely, and
// every request is answered 200. An unchanged file's reloads do nothing at
// all.
func TestReloadSpam(t *testing.T) {
	hung, other := newGate(t), newGate(t)
	conf := func(extra bool) string {
		s := fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 500ms, timeout: 1s, rise: 1, fall: 3}
pools:
  - {name: web, check: web, targets: [%q]}
`, hung.addr())
		if extra {
			s += fmt.Sprintf("  - {name: extra, check: web, targets: [%q]}\n", other.addr())
		}
		return s
	}
	td := startDaemonWith(t, conf(false), func(o *Options) { o.Web.EnableLifecycle = true })
	reloadURL := "http://" + served(t, td.d) + "/-/reload"
	client := &http.Client{Timeout: 30 * time.Second}
	td.waitState(t, "web", hung.addr(), "healthy")
	c := td.d.cur.Load().cfg.Checks[0]
	w3 := c.FailureWindowFromOnset()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var asked atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			td.rewrite(t, conf(i%2 == 0))
			asked.Add(1)
			wg.Go(func() {
				resp, err := client.Post(reloadURL, "", nil)
				if err != nil {
					t.Errorf("POST /-/reload: %v", err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("POST /-/reload: %s: %s", resp.Status, body)
				}
			})
		}
	})
	testenv.Eventually(t, "the reload spam under way", func() (string, bool) {
		n, r := asked.Load(), testutil.ToFloat64(td.d.metrics.reloads.WithLabelValues("success"))
		return fmt.Sprintf("%d asked, %v reloads", n, r), n >= 3 && r >= 1
	})
	rounds0 := testutil.ToFloat64(td.d.metrics.reloads.WithLabelValues("success"))
	onset := time.Now()
	hung.hang.Store(true)
	x := td.waitState(t, "web", hung.addr(), "unhealthy")
	detected := time.Now()
	cancel()
	wg.Wait()
	if took := x.StateSince.Sub(onset); took > w3+time.Second {
		t.Errorf("the hung backend turned unhealthy %v after the hang, W3 is %v", took, w3)
	}
	if took := detected.Sub(onset); took > w3+5*time.Second {
		t.Errorf("the API showed it unhealthy %v after the hang, W3 is %v", took, w3)
	}
	rounds := testutil.ToFloat64(td.d.metrics.reloads.WithLabelValues("success")) - rounds0
	elapsed := time.Since(onset)
	if max := elapsed.Seconds()/DefaultReloadGap.Seconds() + 2; rounds > max {
		t.Errorf("%v reloads in %v, want at most %v: one per %v", rounds, elapsed, max, DefaultReloadGap)
	}
	if n := float64(asked.Load()); rounds >= n {
		t.Errorf("%v reloads for %v requests: want them coalesced", rounds, n)
	}
	t.Logf("detected %v after the hang (W3 %v) with %d reload requests, %v reloads", x.StateSince.Sub(onset), w3, asked.Load(), rounds)

	// An unchanged file: reloads change nothing, not even the generation.
	g := td.d.cur.Load()
	for range 3 {
		if err := td.d.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	if td.d.cur.Load() != g {
		t.Error("a reload of an unchanged file made a new generation")
	}
}

// TestReloadSecretBecomesFIFO: a secret file swapped for a FIFO between the
// load that checked it and the moment the daemon reads it makes the reload
// fail at once, and the daemon stops at once. Opening it used to wait for a
// writer: that reload never ended, no later one ran, and a stop waited for
// it.
func TestReloadSecretBecomesFIFO(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret := filepath.Join(dir, "hook.secret")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := func(timeout string) string {
		return fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 1h, timeout: 1s}
pools:
  - {name: web, check: web, targets: ["127.0.0.1:1"]}
webhooks:
  - {url: "http://127.0.0.1:1/", secret_file: %q, timeout: %s}
`, secret, timeout)
	}
	var swap atomic.Bool
	td := startDaemonWith(t, yaml("1s"), func(o *Options) {
		load := o.Load
		o.Load = func() (*config.Config, error) {
			cfg, err := load()
			if err == nil && swap.Load() { // the load read a regular file; now it is a FIFO
				if err := os.Remove(secret); err != nil {
					return nil, err
				}
				if err := syscall.Mkfifo(secret, 0o600); err != nil {
					return nil, err
				}
			}
			return cfg, err
		}
	})
	t.Cleanup(func() { // runs before the daemon's Stop: lets a blocked open go
		if f, err := os.OpenFile(secret, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	swap.Store(true)
	td.rewrite(t, yaml("2s")) // a new webhook: its secret is read
	var err error
	testenv.ReturnsWithin(t, "a reload reading a FIFO", func() { err = td.d.Reload() })
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("reload with the secret file a FIFO: %v, want not a regular file", err)
	}
	testenv.ReturnsWithin(t, "Stop after that reload", func() {
		if err := td.d.Stop(); err != nil {
			t.Error(err)
		}
	})
}
