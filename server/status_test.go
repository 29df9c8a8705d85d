package server

import (
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sondeprobe/sonde/server/ui"
	"github.com/sondeprobe/sonde/server/web/api"
)

// page fetches path from the test daemon and returns the status, headers
// and body, whatever the status.
func (td *testDaemon) page(t *testing.T, path string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(td.http.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// markupBackend accepts TCP connections and answers each with a first line
// of markup instead of HTTP: the HTTP prober's error quotes it.
func markupBackend(t *testing.T, line string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				_, _ = c.Read(buf)
				_, _ = io.WriteString(c, line+"\r\n\r\n")
			}()
		}
	}()
	return l.Addr().String()
}

// xssLine is what a hostile backend answers: markup that would add an
// element with id "sonde-xss" if a page let it through.
// It has no space: the HTTP parser quotes the whole line in its error.
const xssLine = `<b/id=sonde-xss>pwned</b><img/src=/xss-fetched><script>document.title='xss'</script>`

// TestStatusPagesEscape checks that every page shows an error text full of
// markup as text: escaped, never as elements.
func TestStatusPagesEscape(t *testing.T) {
	t.Parallel()
	bad := markupBackend(t, xssLine)
	td := startDaemon(t, fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 50ms, timeout: 1s, rise: 1, fall: 1}
pools:
  - {name: api, check: web, targets: [%q]}
`, bad))
	td.waitEvent(t, bad, "unhealthy", 0)
	for _, path := range []string{"/", "/pool?name=api", "/pool?name=api&sort=error&q=sonde-xss", "/target?" + url.Values{"pool": {"api"}, "target": {bad}}.Encode(), "/events"} {
		code, h, body := td.page(t, path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, code, body)
		}
		if h.Get("Content-Security-Policy") != ui.ContentSecurityPolicy {
			t.Errorf("GET %s: Content-Security-Policy %q", path, h.Get("Content-Security-Policy"))
		}
		if strings.Contains(body, "<b/id") || strings.Contains(body, "<img") || strings.Contains(body, "<script>document") {
			t.Errorf("GET %s: markup from the backend is in the page:\n%s", path, body)
		}
		if path != "/" && !strings.Contains(body, "&lt;b/id=sonde-xss&gt;pwned&lt;/b&gt;&lt;img/src=/xss-fetched&gt;&lt;script&gt;document.title=&#39;xss&#39;&lt;/script&gt;") {
			t.Errorf("GET %s: the error text is not shown (escaped):\n%s", path, body)
		}
		if regexp.MustCompile(`(?i)<script>|\son\w+=|style=`).MatchString(body) {
			t.Errorf("GET %s: inline script, handler or style, which the policy forbids:\n%s", path, body)
		}
	}
}

// TestPoolPageSortsByState checks the pool view's order by state with
// probed targets: unhealthy first, and their error text shown.
func TestPoolPageSortsByState(t *testing.T) {
	t.Parallel()
	ok, bad := newBackend(t), newBackend(t)
	bad.failing.Store(true)
	td := startDaemon(t, fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 50ms, timeout: 1s, rise: 1, fall: 1}
pools:
  - {name: api, check: web, targets: [%q, %q]}
`, ok.addr(), bad.addr()))
	td.waitEvent(t, bad.addr(), "unhealthy", 0)
	td.waitEvent(t, ok.addr(), "healthy", 0)
	for _, c := range []struct {
		query string
		rows  []string // every row, in order: a filter keeps only its own
	}{
		{"sort=state", []string{bad.addr(), ok.addr()}},
		{"sort=state&desc=1", []string{ok.addr(), bad.addr()}},
		{"state=unhealthy", []string{bad.addr()}},
		{"state=healthy", []string{ok.addr()}},
		{"outcome=success", []string{ok.addr()}},
		{"outcome=http_status", []string{bad.addr()}},
		{"q=" + url.QueryEscape("status code"), []string{bad.addr()}},
		{"state=unknown", nil},
	} {
		code, _, body := td.page(t, "/pool?name=api&"+c.query)
		if code != http.StatusOK {
			t.Fatalf("%s: %d\n%s", c.query, code, body)
		}
		var rows []string
		for _, m := range regexp.MustCompile(`data-target-row="([^"]+)"`).FindAllStringSubmatch(body, -1) {
			rows = append(rows, m[1])
		}
		if !slices.Equal(rows, c.rows) {
			t.Errorf("%s: rows %v, want %v", c.query, rows, c.rows)
		}
	}
	_, _, body := td.page(t, "/pool?name=api&state=unhealthy")
	if !strings.Contains(body, "status code not in the healthy set: 500") {
		t.Errorf("the unhealthy row lacks its error text:\n%s", body)
	}
	// The latency shown is that of the last success, not of the last probe.
	if !regexp.MustCompile(`<th class="col-latency" title="latency of the last successful probe"><a href="[^"]+">latency \(last success\)</a></th>`).MatchString(body) {
		t.Errorf("the latency column does not say whose latency it shows:\n%s", body)
	}
	_, _, body = td.page(t, "/target?"+url.Values{"pool": {"api"}, "target": {bad.addr()}}.Encode())
	if !strings.Contains(body, "<dt>latency of the last success</dt>") {
		t.Errorf("the target page does not say whose latency it shows:\n%s", body)
	}
}

// TestPoolPageCursorAcrossEdits follows the pool view's next links while a
// discovery update and a reload change the pool: its cursors name the row a page
// ends at, not a position or an id, so the listing goes on after them,
// with each target there throughout listed once, in order.
func TestPoolPageCursorAcrossEdits(t *testing.T) {
	t.Parallel()
	conf := func(targets string) string {
		return fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 1s, timeout: 1s}
pools:
  - {name: api, check: web, targets: [%s], health_checks: false}
`, targets)
	}
	td := startDaemon(t, conf(`"198.18.0.1:80"`))
	if err := discover(td.d, "api", "198.18.0.2:80", "198.18.0.3:80", "198.18.0.4:80", "198.18.0.5:80", "198.18.0.6:80", "198.18.0.7:80"); err != nil {
		t.Fatal(err)
	}
	rowRE := regexp.MustCompile(`data-target-row="([^"]+)"`)
	nextRE := regexp.MustCompile(`<a href="([^"]+)" rel="next">`)
	page := func(path string) (rows []string, next string) {
		t.Helper()
		code, _, body := td.page(t, path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, code, body)
		}
		for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
			rows = append(rows, m[1])
		}
		if m := nextRE.FindStringSubmatch(body); m != nil {
			next = "/" + html.UnescapeString(m[1])
		}
		return rows, next
	}
	var seen []string
	rows, next := page("/pool?name=api&limit=3")
	seen = append(seen, rows...)
	// Discovery loses a target already listed and one not yet, and finds one.
	if err := discover(td.d, "api", "198.18.0.3:80", "198.18.0.4:80", "198.18.0.6:80", "198.18.0.7:80", "198.18.0.9:80"); err != nil {
		t.Fatal(err)
	}
	rows, next = page(next)
	seen = append(seen, rows...)
	// A reload adds a target before the cursor and one after it.
	td.rewrite(t, conf(`"198.18.0.0:80", "198.18.0.1:80", "198.18.0.3:80", "198.18.0.4:80", "198.18.0.6:80", "198.18.0.7:80", "198.18.0.8:80", "198.18.0.9:80"`))
	if err := td.d.Reload(); err != nil {
		t.Fatal(err)
	}
	for next != "" {
		rows, next = page(next)
		seen = append(seen, rows...)
	}
	want := []string{"198.18.0.1:80", "198.18.0.2:80", "198.18.0.3:80", "198.18.0.4:80", "198.18.0.6:80", "198.18.0.7:80", "198.18.0.8:80", "198.18.0.9:80"}
	if !slices.Equal(seen, want) {
		t.Errorf("listing across the edits: %v, want %v", seen, want)
	}
}

// unprobedConfig is a pool of one target that is never probed.
const unprobedConfig = `
checks:
  web: {protocol: http, path: /, interval: 1s, timeout: 1s}
pools:
  - {name: api, check: web, targets: ["198.18.0.1:80"], health_checks: false}
`

// TestStatusPageErrors checks that a page asked for something that does
// not exist or with a bad parameter says what, with 404 or 400.
func TestStatusPageErrors(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, unprobedConfig)
	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"/pool?name=nope", 404, `no pool &#34;nope&#34;`},
		{"/pool?name=api&sort=colour", 400, `sort=&#34;colour&#34;: want one of target, state`},
		{"/pool?name=api&state=sick", 400, `state=&#34;sick&#34;: want one of`},
		{"/pool?name=api&limit=0", 400, `limit=&#34;0&#34;: want a whole number 1..1000`},
		{"/pool?name=api&after=x", 400, `after=&#34;x&#34;: want the cursor of a page link`},
		{"/target?pool=api&target=198.18.0.2:80", 404, `pool &#34;api&#34; has no target 198.18.0.2:80`},
		{"/target?pool=api&target=junk", 404, `pool &#34;api&#34; has no target junk`},
		{"/target?pool=api", 404, `target=: want the address:port of a target, or the host:port of one listed by name`},
		{"/api/v1/history?pool=api&target=junk", 404, `pool "api" has no target junk`},
		{"/static/nope.js", 404, ""},
	} {
		code, _, body := td.page(t, c.path)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d, want %d with %q:\n%s", c.path, code, c.code, c.want, body)
		}
	}
}

// TestRecentEventBounds checks that each page's event list is made with as
// many events as its script keeps when new ones arrive: the newest 200 on
// the events page (as docs/status-page.md says), 10 on the overview, 50 for a target.
func TestRecentEventBounds(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, unprobedConfig)
	for range 300 {
		td.d.events.Add(api.Event{Kind: api.KindState, Target: "198.18.0.1:80", Pools: []string{"api"}, From: "unknown", To: "healthy"})
	}
	keepRE := regexp.MustCompile(`<div id="recent" data-keep="(\d+)">`)
	for path, want := range map[string]int{"/events": 200, "/": 10, "/target?pool=api&target=198.18.0.1:80": 50} {
		code, _, body := td.page(t, path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, code, body)
		}
		m := keepRE.FindStringSubmatch(body)
		if rows := strings.Count(body, `<tr class="ev `); rows != want || m == nil || m[1] != strconv.Itoa(want) {
			t.Errorf("GET %s: %d events, keeps %v; want %d and %d", path, rows, m, want, want)
		}
	}
}

// TestRoutePrefix checks that with a route prefix every endpoint moves
// under it, the bare prefix redirects, and the page links relatively.
func TestRoutePrefix(t *testing.T) {
	t.Parallel()
	td := startDaemonWith(t, unprobedConfig, func(o *Options) { o.Web.RoutePrefix = "/ops/sonde/" })
	for _, c := range []struct {
		path string
		code int
	}{
		{"/ops/sonde/", 200}, {"/ops/sonde/pool?name=api", 200}, {"/ops/sonde/api/v1/pools", 200},
		{"/ops/sonde/metrics", 200}, {"/ops/sonde/static/sonde.js", 200}, {"/ops/sonde/-/healthy", 200},
		{"/", 404}, {"/api/v1/pools", 404}, {"/ops/sondex", 404},
	} {
		if code, _, body := td.page(t, c.path); code != c.code {
			t.Errorf("GET %s: %d, want %d\n%s", c.path, code, c.code, body)
		}
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(td.http.URL + "/ops/sonde")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ops/sonde/" {
		t.Errorf("GET /ops/sonde: %s to %q, want 302 to /ops/sonde/", resp.Status, resp.Header.Get("Location"))
	}
	_, _, body := td.page(t, "/ops/sonde/")
	for _, href := range regexp.MustCompile(`(?:href|src)="([^"]*)"`).FindAllStringSubmatch(body, -1) {
		if strings.HasPrefix(href[1], "/") || strings.Contains(href[1], "://") {
			t.Errorf("link %q is not relative: it would leave the prefix", href[1])
		}
	}
	for _, bad := range []string{"ops", "/a?b", "/a/../b", "//x"} {
		if _, err := New(Options{Load: td.d.opt.Load, Web: WebOptions{RoutePrefix: bad}}); err == nil {
			t.Errorf("RoutePrefix %q accepted", bad)
		}
	}
}

// TestStatic checks the assets' types, security headers and revalidation.
func TestStatic(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, unprobedConfig)
	for name, ctype := range map[string]string{"sonde.js": "javascript", "sonde.css": "text/css", "favicon.svg": "image/svg+xml"} {
		resp, err := http.Get(td.http.URL + "/static/" + name)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if !strings.Contains(resp.Header.Get("Content-Type"), ctype) || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: Content-Type %q, nosniff %q", name, resp.Header.Get("Content-Type"), resp.Header.Get("X-Content-Type-Options"))
		}
		req, _ := http.NewRequest("GET", td.http.URL+"/static/"+name, nil)
		req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
		again, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		again.Body.Close()
		if again.StatusCode != http.StatusNotModified {
			t.Errorf("%s with its ETag: %s, want 304", name, again.Status)
		}
	}
}

// BenchmarkPoolPage measures one page of the pool view of a pool of
// 131,072 targets (health checks off: nothing is probed) over HTTP, sorted
// by latency (the pass over the pool alone: BenchmarkPoolPage of package
// status).
func BenchmarkPoolPage(b *testing.B) {
	td := startDaemonWith(b, `
checks:
  web: {protocol: http, path: /, interval: 1s, timeout: 1s}
pools:
  - {name: big, check: web, targets: ["198.18.0.0/15"], health_checks: false}
`, nil)
	for b.Loop() {
		resp, err := http.Get(td.http.URL + "/pool?name=big&sort=latency")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
