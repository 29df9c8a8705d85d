package status

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/sondeprobe/sonde/config/discovery"
	_ "github.com/sondeprobe/sonde/config/discovery/kinds" // static_configs
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/policy"
	"github.com/sondeprobe/sonde/server/ui"
	"github.com/sondeprobe/sonde/server/web/api"
)

// TestPoolListing pages through a pool of 1,024 unprobed targets forwards
// and backwards, sorted and filtered, and checks that every member shows
// once, in order, with the counts the page states.
func TestPoolListing(t *testing.T) {
	t.Parallel()
	f := newFake(t, `
checks:
  web: {protocol: http, path: /, interval: 1s, timeout: 1s}
pools:
  - {name: big, check: web, targets: ["198.18.0.0/22"], health_checks: false}
`)
	g := &view{f}
	pi, err := g.poolIndex("big")
	if err != nil {
		t.Fatal(err)
	}
	all := func(q poolQuery) []string {
		var seen []string
		for page := 0; ; page++ {
			l := g.listPool(pi, &q)
			if len(l.Rows) > q.Limit || page > 100 {
				t.Fatalf("page of %d rows for limit %d (page %d)", len(l.Rows), q.Limit, page)
			}
			if l.First != len(seen)+1 {
				t.Fatalf("page %d starts at %d, want %d", page, l.First, len(seen)+1)
			}
			for _, r := range l.Rows {
				seen = append(seen, r.Target)
			}
			if l.Next == nil {
				if len(seen) != l.Total {
					t.Fatalf("paged through %d of %d", len(seen), l.Total)
				}
				return seen
			}
			q.After, q.Before = l.Next, nil
		}
	}
	fwd := all(poolQuery{Sort: "target", Limit: 100})
	if len(fwd) != 1024 || fwd[0] != "198.18.0.0:80" || fwd[1023] != "198.18.3.255:80" {
		t.Fatalf("forward listing: %d rows from %s to %s", len(fwd), fwd[0], fwd[len(fwd)-1])
	}
	for i := 1; i < len(fwd); i++ {
		if fwd[i] == fwd[i-1] {
			t.Fatalf("row %d repeats %s", i, fwd[i])
		}
	}
	desc := all(poolQuery{Sort: "target", Desc: true, Limit: 300})
	rev := slices.Clone(fwd)
	slices.Reverse(rev)
	if !slices.Equal(desc, rev) {
		t.Error("descending listing is not the ascending one reversed")
	}
	// Backwards from the end, page by page.
	q := poolQuery{Sort: "target", Limit: 100}
	key := rowKey{addr: addrKey(g.Config().Targets[g.Pools()[pi].Members[1023]].AddrPort())}
	q.Before = &key
	var back []string
	for {
		l := g.listPool(pi, &q)
		var page []string
		for _, r := range l.Rows {
			page = append(page, r.Target)
		}
		back = append(page, back...)
		if l.First != 1024-len(back) {
			t.Fatalf("backward page starts at %d, want %d", l.First, 1024-len(back))
		}
		if l.Prev == nil {
			break
		}
		q.Before = l.Prev
	}
	if !slices.Equal(back, fwd[:1023]) {
		t.Errorf("backward listing (%d rows) differs from the forward one", len(back))
	}
	// A text filter.
	sub := all(poolQuery{Sort: "target", Text: "198.18.2.", Limit: 100})
	if len(sub) != 256 || sub[0] != "198.18.2.0:80" {
		t.Errorf("text 198.18.2.: %d rows from %v", len(sub), sub[:min(1, len(sub))])
	}
	if l := g.listPool(pi, &poolQuery{Sort: "target", State: "healthy", Limit: 10}); l.Total != 0 || l.States["unprobed"] != 1024 {
		t.Errorf("state filter healthy: total %d, states %v; want none of 1024 unprobed", l.Total, l.States)
	}
}

// probedFake is a pool of two probed targets: 198.18.0.1:80 unhealthy,
// removed, with an error full of markup and a certificate, and
// 198.18.0.2:80 healthy.
func probedFake(t *testing.T) *fake {
	t.Helper()
	f := newFake(t, `
checks:
  web: {protocol: http, path: /, interval: 2s, timeout: 1s}
pools:
  - {name: api, check: web, targets: ["198.18.0.1:80", "198.18.0.2:80"]}
`)
	ns := f.clock.Nanotime()
	bad, good := f.pools[0].Members[0], f.pools[0].Members[1]
	f.status[bad] = scheduler.TargetStatus{State: scheduler.Unhealthy, Probed: true, LastOutcome: probe.Refused,
		Streak: 4, Since: ns - int64(time.Minute), LastProbe: ns - int64(time.Second)}
	f.status[good] = scheduler.TargetStatus{State: scheduler.Healthy, Probed: true, LastOutcome: probe.Success,
		LastStatus: 200, Latency: 3 * time.Millisecond, Since: ns - int64(time.Hour), LastProbe: ns}
	f.routes[[2]int{0, 0}] = policy.Removed
	f.errs[bad] = "<b>refused</b>"
	f.certs[bad] = time.Date(2027, 1, 2, 0, 0, 0, 0, time.UTC).Unix()
	hs := 0.0012
	f.passive[bad] = api.PassiveJSON{Connected: 40, Refused: 7, Abandoned: 2, HandshakeSeconds: &hs, FailuresInARow: 7}
	f.history[bad] = []api.HistoryResult{
		{Time: f.clock.now.Add(-2 * time.Second), Outcome: "success", State: "healthy"},
		{Time: f.clock.now.Add(-time.Second), Outcome: "refused", State: "unhealthy"},
	}
	f.events = []api.Event{
		{Seq: 7, Time: f.clock.now, Kind: api.KindRoute, Target: "198.18.0.1:80", Pools: []string{"api"}, From: "routed", To: "removed"},
		{Seq: 6, Time: f.clock.now, Kind: api.KindState, Target: "198.18.0.1:80", Pools: []string{"api"}, From: "healthy", To: "unhealthy", Reason: "refused"},
		{Seq: 5, Time: f.clock.now, Kind: api.KindState, Target: "198.18.9.9:80", Pools: []string{"other"}, From: "unknown", To: "healthy"},
	}
	f.alert = "State file not saved."
	return f
}

// TestPagesFromSnapshot renders every page from a fake snapshot and checks
// that each shows what the snapshot holds: the status page reads the
// daemon through Snapshot alone.
func TestPagesFromSnapshot(t *testing.T) {
	t.Parallel()
	f := probedFake(t)
	target := "target?" + url.Values{"pool": {"api"}, "target": {"198.18.0.1:80"}}.Encode()
	for _, c := range []struct {
		path string
		want []string
	}{
		{"/", []string{"v9.9.9-test", "State file not saved.", `href="pool?name=api"`, "1 healthy, routed", "1 unhealthy, removed", "198.18.9.9:80"}},
		{"/pool?name=api&sort=state", []string{`data-target-row="198.18.0.1:80"`, `data-target-row="198.18.0.2:80"`, "&lt;b&gt;refused&lt;/b&gt;", "removed"}},
		{"/" + target, []string{"198.18.0.1:80", "&lt;b&gt;refused&lt;/b&gt;", "2027-01-02", "unhealthy", "removed", "every 2s",
			"this host's connections", "40 connected (handshake 1.2 ms), 7 refused", "7 failed in a row"}},
		{"/events", []string{"198.18.9.9:80", "198.18.0.1:80"}},
		{"/discovery", []string{"Discovery"}},
	} {
		rec := f.serve(c.path)
		body := rec.Body.String()
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", c.path, rec.Code, body)
		}
		if rec.Header().Get("Content-Security-Policy") != ui.ContentSecurityPolicy {
			t.Errorf("GET %s: no Content-Security-Policy", c.path)
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: %q is not in the page:\n%s", c.path, w, body)
			}
		}
		if strings.Contains(body, "<b>refused") {
			t.Errorf("GET %s: the error's markup is in the page", c.path)
		}
	}
	// The state, then the healthy: the troubled first.
	body := f.serve("/pool?name=api&sort=state").Body.String()
	if i, j := strings.Index(body, `data-target-row="198.18.0.1:80"`), strings.Index(body, `data-target-row="198.18.0.2:80"`); i > j {
		t.Error("sorted by state, the unhealthy target is not first")
	}
	// The target view lists only the target's events, and asked for its
	// history, which keeps it.
	body = f.serve("/" + target).Body.String()
	if strings.Contains(body, "198.18.9.9:80") {
		t.Error("the target view lists another target's event")
	}
	if !slices.Contains(f.viewed, f.pools[0].Members[0]) {
		t.Error("the target view did not ask for the target's history")
	}
}

// TestStatusHistoryFromSnapshot answers /api/v1/history from a fake snapshot.
func TestStatusHistoryFromSnapshot(t *testing.T) {
	t.Parallel()
	f := probedFake(t)
	rec := f.serve("/api/v1/history?pool=api&target=198.18.0.1:80")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s\n%s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	var h api.HistoryJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &h); err != nil {
		t.Fatal(err)
	}
	if h.Target != "198.18.0.1:80" || h.Pool != "api" || h.Check != "web" || h.State != "unhealthy" ||
		!h.Recorded || h.Capacity != 100 || len(h.Results) != 2 || h.Results[1].Outcome != "refused" {
		t.Errorf("history %+v", h)
	}
	for path, code := range map[string]int{
		"/api/v1/history?pool=api&target=198.18.0.3:80":  http.StatusNotFound,
		"/api/v1/history?pool=nope&target=198.18.0.1:80": http.StatusNotFound,
	} {
		if rec := f.serve(path); rec.Code != code {
			t.Errorf("GET %s: %d, want %d", path, rec.Code, code)
		}
	}
}

// TestStatusWithoutSnapshot checks that every page answers 503 while no
// configuration runs.
func TestStatusWithoutSnapshot(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	New(func() Snapshot { return nil }, func(w http.ResponseWriter) (http.ResponseWriter, func()) { return w, func() {} }).Routes(mux)
	for _, path := range []string{"/", "/pool?name=api", "/target?pool=api&target=198.18.0.1:80", "/events", "/discovery", "/api/v1/history?pool=api&target=198.18.0.1:80"} {
		rec := httptestGet(mux, path)
		if rec.Code != http.StatusServiceUnavailable {
			t.Errorf("GET %s: %d, want 503", path, rec.Code)
		}
	}
}

// TestPoolPagingUnresolved pages through a pool of members with labels and
// targets without an address, by every column both ways, forwards and
// backwards, through the cursors' text: every row once, in order.
func TestPoolPagingUnresolved(t *testing.T) {
	t.Parallel()
	f := newFake(t, `
checks:
  web: {protocol: http, path: /, interval: 1s, timeout: 1s}
pools:
  - name: web
    check: web
    health_checks: false
    labels: {team: edge}
    targets: ["late.test:80"]
    static_configs: [{targets: ["198.18.0.1:80"]}]
`)
	// What the pool's discovery found: three labelled addresses, and two
	// names that do not resolve.
	zone := func(z string) labels.Labels { return labels.FromStrings("team", "edge", "zone", z) }
	var err error
	f.cfg, err = f.cfg.WithFound(map[string]discovery.Found{"web": {
		Targets: []discovery.Target{
			{Addr: netip.MustParseAddr("198.18.0.1"), Port: 80, Labels: zone("a")},
			{Addr: netip.MustParseAddr("198.18.0.2"), Port: 80, Labels: zone("a")},
			{Addr: netip.MustParseAddr("198.18.0.3"), Port: 80, Labels: zone("c")},
		},
		Unresolved: []discovery.Unresolved{
			{Host: "late.test", Port: 80, Labels: labels.FromStrings("team", "edge"), Err: "no such host"},
			{Host: "nohost.test", Port: 81, Labels: zone("b"), Err: "no such host"},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	f.indexPools()
	if n := len(f.cfg.Pools[0].Unresolved); n != 2 {
		t.Fatalf("%d unresolved targets, want 2", n)
	}
	g := &view{f}
	pi, err := g.poolIndex("web")
	if err != nil {
		t.Fatal(err)
	}
	for _, sort := range sortColumns {
		for _, desc := range []bool{false, true} {
			q := poolQuery{Sort: sort, Desc: desc, Limit: 2}
			one := q
			one.Limit = maxPoolPage
			want := rowTargets(g.listPool(pi, &one))
			var fwd []string
			for page := 0; ; page++ {
				l := g.listPool(pi, &q)
				if page > 5 {
					t.Fatalf("sort %s desc %v: more than 5 pages", sort, desc)
				}
				if l.Total != 5 || l.First != len(fwd)+1 || page > 5 {
					t.Fatalf("sort %s desc %v, page %d: total %d, first %d after %d rows", sort, desc, page, l.Total, l.First, len(fwd))
				}
				fwd = append(fwd, rowTargets(l)...)
				if l.Next == nil {
					break
				}
				// The cursor goes through its text, as a link carries it.
				k, err := parseRowKey(l.Next.String())
				if err != nil {
					t.Fatal(err)
				}
				q.After = &k
			}
			if !slices.Equal(fwd, want) || len(fwd) != 5 {
				t.Errorf("sort %s desc %v: paged %v, want %v", sort, desc, fwd, want)
			}
			// From the last page back to the first.
			q = poolQuery{Sort: sort, Desc: desc, Limit: 2}
			l := g.listPool(pi, &q)
			for l.Next != nil {
				q.After = l.Next
				l = g.listPool(pi, &q)
			}
			back := rowTargets(l)
			for i := 0; l.Prev != nil && i < 5; i++ {
				q.After, q.Before = nil, l.Prev
				l = g.listPool(pi, &q)
				back = append(rowTargets(l), back...)
			}
			if !slices.Equal(back, want) {
				t.Errorf("sort %s desc %v: paged backwards %v, want %v", sort, desc, back, want)
			}
		}
	}
}

func rowTargets(l poolListing) []string {
	var out []string
	for _, r := range l.Rows {
		out = append(out, r.Target)
	}
	return out
}

// BenchmarkPoolPage measures one page of the pool view of a pool of
// 131,072 targets (health checks off: nothing is probed): the pass over the
// pool that every page costs, by the default order, by state, and with a
// text filter.
func BenchmarkPoolPage(b *testing.B) {
	f := newFake(b, `
checks:
  web: {protocol: http, path: /, interval: 1s, timeout: 1s}
pools:
  - {name: big, check: web, targets: ["198.18.0.0/15"], health_checks: false}
`)
	g := &view{f}
	for _, c := range []struct {
		name string
		q    poolQuery
	}{
		{"target", poolQuery{Sort: "target", Limit: defaultPoolPage}},
		{"state", poolQuery{Sort: "state", Limit: defaultPoolPage}},
		{"text", poolQuery{Sort: "target", Text: "198.19.7", Limit: defaultPoolPage}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if l := g.listPool(0, &c.q); len(l.Rows) == 0 {
					b.Fatal("empty page")
				}
			}
		})
	}
}
