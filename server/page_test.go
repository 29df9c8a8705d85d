package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sondeprobe/sonde/server/apiv1"
	"github.com/sondeprobe/sonde/server/web/api"
)

// bigPoolConfig is a pool of 2^(32-bits) disabled targets: listed, never
// probed.
func bigPoolConfig(bits int) string {
	return fmt.Sprintf(`
checks:
  web: {protocol: tcp, tcp_mode: connect, port: 9, interval: 60s}
pools:
  - {name: big, check: web, targets: ["198.18.0.0/%d"], disabled: ["198.18.0.0/%d"]}
  - {name: small, check: web, targets: ["127.0.0.1"], disabled: ["127.0.0.1"]}
`, bits, bits)
}

// TestTargetsPaging checks the page size cap (limit=0 and huge limits give
// apiv1.MaxPage), and that following next lists every target once, in order.
func TestTargetsPaging(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, bigPoolConfig(18)) // 16384 targets, and one more in pool small
	const all = 1<<14 + 1
	for _, tt := range []struct {
		query string
		want  int
	}{
		{"", apiv1.DefaultPage},
		{"limit=0", apiv1.MaxPage},
		{"limit=1000000", apiv1.MaxPage},
		{"limit=7", 7},
	} {
		var p api.TargetsPage
		td.getJSON(t, "/api/v1/targets?"+tt.query, &p)
		if len(p.Targets) != tt.want || p.Limit != tt.want || p.Total != all || p.Next == "" {
			t.Errorf("%q: %d targets, limit %d, total %d, next %q; want %d, %d, %d and a next", tt.query, len(p.Targets), p.Limit, p.Total, p.Next, tt.want, tt.want, all)
		}
	}
	seen := map[string]bool{}
	var last struct {
		pool string
		id   uint32
	}
	after, pages := "", 0
	for {
		var p api.TargetsPage
		td.getJSON(t, "/api/v1/targets?limit=0&after="+url.QueryEscape(after), &p)
		pages++
		for _, x := range p.Targets {
			key := x.Pool + "/" + x.Target
			if seen[key] {
				t.Fatalf("%s listed twice", key)
			}
			seen[key] = true
			if x.Pool == last.pool && x.ID <= last.id {
				t.Fatalf("id %d after %d in pool %s: not in id order", x.ID, last.id, x.Pool)
			}
			last.pool, last.id = x.Pool, x.ID
			if x.State != "disabled" || x.Route != "excluded" {
				t.Fatalf("target %+v: want disabled and excluded", x)
			}
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if len(seen) != all || pages != 2 {
		t.Fatalf("listed %d targets in %d pages, want %d in 2", len(seen), pages, all)
	}
	var small api.TargetsPage
	td.getJSON(t, "/api/v1/targets?pool=small", &small)
	if len(small.Targets) != 1 || small.Total != 1 || small.Next != "" {
		t.Fatalf("pool small: %+v, want its one target and no next", small)
	}
}

// TestTargetsScanBudget checks that a filter matching nothing in a pool
// larger than the scan budget ends each page early with a cursor, instead
// of walking the whole pool in one request.
func TestTargetsScanBudget(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, bigPoolConfig(15)) // 131072 targets
	var p api.TargetsPage
	td.getJSON(t, "/api/v1/targets?pool=big&state=healthy", &p)
	if len(p.Targets) != 0 || p.Next == "" || p.Total != 0 {
		t.Fatalf("first page: %d targets, next %q, total %d; want none, a next, total 0", len(p.Targets), p.Next, p.Total)
	}
	var q api.TargetsPage
	td.getJSON(t, "/api/v1/targets?pool=big&state=healthy&after="+url.QueryEscape(p.Next), &q)
	if len(q.Targets) != 0 || q.Next != "" {
		t.Fatalf("second page: %d targets, next %q; want none and the end", len(q.Targets), q.Next)
	}
}

// TestListErrors checks the answers to bad paging parameters, and to a
// cursor of another pool layout.
func TestListErrors(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, bigPoolConfig(24))
	var p api.TargetsPage
	td.getJSON(t, "/api/v1/targets?limit=10", &p)
	layout, _, _ := strings.Cut(p.Next, ".")
	n, err := strconv.ParseUint(layout, 10, 32)
	if err != nil {
		t.Fatalf("next %q: %v", p.Next, err)
	}
	other := strconv.FormatUint(n^1, 10)
	for _, tt := range []struct {
		path string
		want int
	}{
		{"/api/v1/targets?offset=10", http.StatusBadRequest},
		{"/api/v1/targets?limit=-1", http.StatusBadRequest},
		{"/api/v1/targets?limit=x", http.StatusBadRequest},
		{"/api/v1/targets?after=1.2", http.StatusBadRequest},
		{"/api/v1/targets?after=" + layout + ".9.0", http.StatusBadRequest}, // no pool 9
		{"/api/v1/targets?after=" + other + ".0.0", http.StatusGone},
		{"/api/v1/targets?after=" + p.Next, http.StatusOK},
		{"/api/v1/pools?after=x", http.StatusBadRequest},
		{"/api/v1/pools?after=" + other + ".1.0", http.StatusGone},
		{"/api/v1/pools?limit=-5", http.StatusBadRequest},
	} {
		if got, _ := td.get(t, tt.path, new(any)); got != tt.want {
			t.Errorf("GET %s: status %d, want %d", tt.path, got, tt.want)
		}
	}
}

// TestCursorAcrossReload checks that a listing goes on across a reload that
// keeps the pools: the targets the reload keeps keep their ids, and each is
// listed once; only targets of the new configuration are listed after it.
// A reload that adds a pool makes the cursor gone (410).
func TestCursorAcrossReload(t *testing.T) {
	t.Parallel()
	conf := func(big []string, more string) string {
		list := `["` + strings.Join(big, `", "`) + `"]`
		return fmt.Sprintf(`
checks:
  web: {protocol: tcp, tcp_mode: connect, port: 9, interval: 60s}
pools:
  - {name: big, check: web, targets: %s, disabled: %s}
  - {name: small, check: web, targets: ["127.0.0.1"], disabled: ["127.0.0.1"]}
%s`, list, list, more)
	}
	td := startDaemon(t, conf([]string{"198.18.0.0/26"}, ""))
	seen := map[string]int{}
	var page api.TargetsPage
	td.getJSON(t, "/api/v1/targets?pool=big&limit=20", &page)
	for _, x := range page.Targets {
		seen[x.Target]++
	}
	// Keep .0–.31 and .48–.63, remove .32–.47, add 198.18.1.0/28.
	after := []string{"198.18.0.0/27", "198.18.0.48/28", "198.18.1.0/28"}
	td.rewrite(t, conf(after, ""))
	if code := td.postReload(t); code != http.StatusOK {
		t.Fatalf("reload: %d", code)
	}
	for page.Next != "" {
		next := page.Next
		page = api.TargetsPage{}
		td.getJSON(t, "/api/v1/targets?pool=big&limit=20&after="+url.QueryEscape(next), &page)
		for _, x := range page.Targets {
			seen[x.Target]++
			if strings.HasPrefix(x.Target, "198.18.0.") {
				if a := netip.MustParseAddrPort(x.Target).Addr().As4(); a[3] >= 32 && a[3] < 48 {
					t.Errorf("%s listed after the reload that removed it", x.Target)
				}
			}
		}
	}
	for i := range 64 {
		if i >= 32 && i < 48 {
			continue
		}
		if k := fmt.Sprintf("198.18.0.%d:9", i); seen[k] != 1 {
			t.Errorf("%s, kept by the reload, listed %d times, want once", k, seen[k])
		}
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("%s listed %d times", k, n)
		}
	}

	td.getJSON(t, "/api/v1/targets?pool=big&limit=20", &page)
	td.rewrite(t, conf(after, `  - {name: third, check: web, targets: ["127.0.0.2"], disabled: ["127.0.0.2"]}`+"\n"))
	if code := td.postReload(t); code != http.StatusOK {
		t.Fatalf("reload: %d", code)
	}
	if got, body := td.get(t, "/api/v1/targets?pool=big&after="+url.QueryEscape(page.Next), new(any)); got != http.StatusGone {
		t.Errorf("cursor from before a reload that added a pool: status %d (%s), want 410", got, body)
	}
}

// TestPoolsPaging pages through pools two at a time.
func TestPoolsPaging(t *testing.T) {
	t.Parallel()
	var pools []string
	for i := range 5 {
		pools = append(pools, fmt.Sprintf("  - {name: p%d, check: web, targets: [\"127.0.0.%d\"], disabled: [\"127.0.0.%d\"]}", i, i+1, i+1))
	}
	td := startDaemon(t, "checks:\n  web: {protocol: tcp, tcp_mode: connect, port: 9}\npools:\n"+strings.Join(pools, "\n")+"\n")
	var names []string
	after := ""
	for range 10 {
		var page struct {
			Pools []api.PoolJSON `json:"pools"`
			Next  string         `json:"next"`
		}
		td.getJSON(t, "/api/v1/pools?limit=2&after="+after, &page)
		if len(page.Pools) > 2 {
			t.Fatalf("%d pools in a page of 2", len(page.Pools))
		}
		for _, p := range page.Pools {
			names = append(names, p.Name)
		}
		if after = page.Next; after == "" {
			break
		}
	}
	if got := strings.Join(names, ","); got != "p0,p1,p2,p3,p4" {
		t.Fatalf("pools %s, want p0..p4 once each", got)
	}
}

// TestListConcurrencyLimit checks that a list request beyond the running
// ones gets 503 with Retry-After.
func TestListConcurrencyLimit(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, bigPoolConfig(24))
	var releases []func()
	for range td.d.adm.List.Max() {
		_, release := td.d.adm.List.Enter(httptest.NewRecorder())
		releases = append(releases, release)
	}
	for _, path := range []string{"/api/v1/targets", "/api/v1/pools", "/"} {
		resp, err := http.Get(td.http.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Errorf("GET %s with every slot taken: %s, Retry-After %q; want 503 with Retry-After", path, resp.Status, resp.Header.Get("Retry-After"))
		}
	}
	releases[0]()
	if got, _ := td.get(t, "/api/v1/targets", new(any)); got != http.StatusOK {
		t.Errorf("with a free slot: status %d", got)
	}
}

// TestWireTypesCover decodes the API's pages with unknown fields refused:
// every field the daemon writes has its place in the wire types of
// server/web/api that clients decode with.
func TestWireTypesCover(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, bigPoolConfig(30))
	for _, c := range []struct {
		path string
		v    any
	}{
		{"/api/v1/targets?limit=1", &api.TargetsPage{}},
		{"/api/v1/pools?limit=1", &api.PoolsPage{}},
		{"/api/v1/events", &api.EventsPage{}},
	} {
		resp, err := http.Get(td.http.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(resp.Body)
		dec.DisallowUnknownFields()
		err = dec.Decode(c.v)
		resp.Body.Close()
		if err != nil {
			t.Errorf("GET %s: %v", c.path, err)
		}
	}
}
