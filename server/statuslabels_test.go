package server

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/server/web/api"
	xhtml "golang.org/x/net/html"
)

// markupResolver answers the names of its table and fails every other
// lookup with an error full of markup, as a hostile name server might.
type markupResolver struct{ *flakyResolver }

// markupErr is the failed lookups' error.
const markupErr = `<b/id=sonde-xss>pwned</b><img/src=/xss-fetched>`

func (r markupResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if as, err := r.flakyResolver.LookupNetIP(ctx, network, host); err == nil {
		return as, nil
	}
	return nil, fmt.Errorf("%s for %s", markupErr, host)
}

// hostileLabel is a label value that would add an element, a handler and a
// request if a page let it through.
const hostileLabel = `"><b id=sonde-xss onclick=alert(1)>x</b><img src=/xss-label>`

// labelledConfig is a pool whose targets come from static_configs with
// labels (one hostile), and two targets without an address: a name its
// file lists and one a static group gives. Its health checks are off, so
// nothing is probed: its addresses are never sent anything.
const labelledConfig = `
checks:
  web: {protocol: http, path: /, interval: 1s, timeout: 1s}
  tcp: {protocol: tcp, tcp_mode: connect}
pools:
  - name: web
    check: web
    health_checks: false
    labels: {team: edge}
    targets: ["late.test:80"]
    static_configs:
      - {targets: ["198.18.0.1:80", "198.18.0.2:80"], labels: {zone: a}}
      - targets: ["198.18.0.3:80"]
        labels: {zone: '` + hostileLabel + `'}
      - {targets: ["nohost.test:81"], labels: {zone: b}}
  - {name: plain, check: web, targets: ["198.18.1.1:80"], health_checks: false}
  - {name: ports, check: tcp, static_configs: [{targets: ["198.18.3.1"]}], health_checks: false}
`

// startLabelled starts a daemon with labelledConfig, whose names resolve
// only as res says, and waits for its discovery.
func startLabelled(t *testing.T) (*testDaemon, *flakyResolver) {
	t.Helper()
	res := &flakyResolver{addrs: map[string][]netip.Addr{}}
	td := startDaemonWith(t, labelledConfig, func(o *Options) {
		o.Resolver = markupResolver{res}
		o.DiscoveryDebounce = 10 * time.Millisecond
	})
	td.waitTargets(t, "web", "3 addresses and 2 unresolved names, looked up", func(m map[string]api.TargetJSON) bool {
		return len(m) == 5 && strings.Contains(m["late.test:80"].LastError, "pwned") && strings.Contains(m["nohost.test:81"].LastError, "pwned")
	})
	return td, res
}

var rowRE = regexp.MustCompile(`data-target-row="([^"]+)"`)

// rows returns the targets of a pool view's rows, in order.
func rows(body string) []string {
	var out []string
	for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
		out = append(out, html.UnescapeString(m[1]))
	}
	return out
}

// okPage fetches a page that must be there.
func (td *testDaemon) okPage(t *testing.T, path string) string {
	t.Helper()
	code, _, body := td.page(t, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", path, code, body)
	}
	return body
}

// assertInert fails for markup of a hostile label or error that a page let
// through: parsed as a browser would, the page has no element or attribute
// its templates do not make, and no inline script, handler or style.
func assertInert(t *testing.T, path, body string) {
	t.Helper()
	z := xhtml.NewTokenizer(strings.NewReader(body))
	for {
		tt := z.Next()
		if tt == xhtml.ErrorToken {
			return
		}
		if tt != xhtml.StartTagToken && tt != xhtml.SelfClosingTagToken {
			continue
		}
		tok := z.Token()
		src := false
		for _, a := range tok.Attr {
			switch {
			case a.Key == "id" && strings.Contains(a.Val, "xss"), strings.HasPrefix(a.Key, "on"), a.Key == "style":
				t.Errorf("GET %s: <%s> has %s=%q, from hostile text or inline", path, tok.Data, a.Key, a.Val)
			case a.Key == "src":
				src = true
			}
		}
		if tok.Data == "img" || tok.Data == "b" || tok.Data == "i" || tok.Data == "script" && !src {
			t.Errorf("GET %s: a <%s> element, from hostile text or inline", path, tok.Data)
		}
	}
}

// TestPoolPageLabels checks the pool view's labels: each row shows its
// target's, escaped; the label filter keeps exactly the rows the API's
// label= would, repeatable, with the pool's label names offered; a label's
// link adds it to the filters, or takes it out.
func TestPoolPageLabels(t *testing.T) {
	t.Parallel()
	td, _ := startLabelled(t)
	all := []string{"198.18.0.1:80", "198.18.0.2:80", "198.18.0.3:80", "late.test:80", "nohost.test:81"}
	for _, c := range []struct {
		labels []string
		rows   []string
	}{
		{nil, all},
		{[]string{"zone=a"}, all[:2]},
		{[]string{"zone!=a"}, all[2:]},
		{[]string{"zone=b"}, all[4:]},
		{[]string{"zone="}, all[3:4]}, // a missing label is the empty value
		{[]string{"team=edge", "zone=a"}, all[:2]},
		{[]string{"team=edge", "zone!=a", "zone!=b"}, all[2:4]},
		{[]string{"zone=" + hostileLabel}, all[2:3]},
		{[]string{"team=core"}, nil},
		{[]string{"zone=a", ""}, all[:2]}, // a form's blank field
	} {
		v := url.Values{"name": {"web"}, "label": c.labels}
		path := "/pool?" + v.Encode()
		body := td.okPage(t, path)
		if got := rows(body); !slices.Equal(got, c.rows) {
			t.Errorf("label=%q: rows %v, want %v", c.labels, got, c.rows)
		}
		assertInert(t, path, body)
		// The API agrees.
		var page struct {
			Targets []api.TargetJSON `json:"targets"`
		}
		api := url.Values{"pool": {"web"}, "label": slices.DeleteFunc(slices.Clone(c.labels), func(s string) bool { return s == "" })}
		td.getJSON(t, "/api/v1/targets?"+api.Encode(), &page)
		var got []string
		for _, x := range page.Targets {
			got = append(got, x.Target)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.rows) {
			t.Errorf("API label=%q: %v, the pool view %v", c.labels, got, c.rows)
		}
	}

	body := td.okPage(t, "/pool?name=web")
	for _, want := range []string{
		// Chips, the hostile value as text.
		`<span class="ln">zone</span>=<span class="lv">a</span>`,
		`<span class="ln">team</span>=<span class="lv">edge</span>`,
		`<span class="lv">&#34;&gt;&lt;b id=sonde-xss onclick=alert(1)&gt;x&lt;/b&gt;&lt;img src=/xss-label&gt;</span>`,
		// Links that filter by them.
		`<a class="label" href="pool?label=zone%3Da&amp;name=web" title="filter by zone=a">`,
		// The pool's label names, offered.
		`<datalist id="label-names"><option value="team="></option><option value="zone="></option></datalist>`,
		`<th class="col-labels">labels</th>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the pool view lacks %s:\n%s", want, body)
		}
	}
	// Filtered by zone=a: its field shows it, and its chips' links take it out.
	body = td.okPage(t, "/pool?name=web&label=zone%3Da&sort=state")
	for _, want := range []string{
		`<input type="text" name="label" value="zone=a"`,
		`data-labels="label=zone%3Da"`,
		`<a class="label on" href="pool?name=web&amp;sort=state" title="stop filtering by zone=a">`,
		`<a class="label" href="pool?label=zone%3Da&amp;label=team%3Dedge&amp;name=web&amp;sort=state" title="filter by team=edge">`,
		`<a href="pool?desc=1&amp;label=zone%3Da&amp;name=web&amp;sort=state"`, // the sort links keep the filter
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the pool view filtered by zone=a lacks %s:\n%s", want, body)
		}
	}
	// A pool without labels offers no label filter and has no labels column.
	if body := td.okPage(t, "/pool?name=plain"); strings.Contains(body, `name="label"`) || strings.Contains(body, "col-labels") {
		t.Errorf("a pool without labels shows a label filter or column:\n%s", body)
	}
	code, _, body := td.page(t, "/pool?name=web&label=zone")
	if code != http.StatusBadRequest || !strings.Contains(body, `label=&#34;zone&#34;: want NAME=VALUE or NAME!=VALUE`) {
		t.Errorf("label=zone: %d, want 400 saying the form:\n%s", code, body)
	}
}

// TestPoolPageUnresolved checks that a pool's unresolved targets are rows
// of its view, after its members: unknown, excluded, outcome unresolved,
// the lookup's error (escaped) as their error; counted in the filter menus,
// kept by the filters as the API lists them, and paged through once each,
// either way and in every order.
func TestPoolPageUnresolved(t *testing.T) {
	t.Parallel()
	td, _ := startLabelled(t)
	body := td.okPage(t, "/pool?name=web")
	row := regexp.MustCompile(`(?s)<tr class="row row-unknown unresolved" data-target-row="late.test:80">.*?</tr>`).FindString(body)
	for _, want := range []string{
		`<a href="target?pool=web&amp;target=late.test%3A80">late.test:80</a>`,
		`<span class="st st-unknown">unknown</span>`,
		`<td class="col-route">excluded</td>`,
		`<td class="col-outcome">unresolved</td>`,
		`&lt;b/id=sonde-xss&gt;pwned&lt;/b&gt;&lt;img/src=/xss-fetched&gt; for late.test`,
		`<span class="ln">team</span>=<span class="lv">edge</span>`,
	} {
		if !strings.Contains(row, want) {
			t.Errorf("the row of late.test lacks %s:\n%s", want, row)
		}
	}
	assertInert(t, "/pool?name=web", body)
	for _, want := range []string{`<option value="unknown">unknown (2)</option>`, `<option value="unprobed">unprobed (3)</option>`,
		`<option value="excluded">excluded (2)</option>`, `<option value="unresolved">unresolved (2)</option>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the filter menus lack %s", want)
		}
	}
	members, names := []string{"198.18.0.1:80", "198.18.0.2:80", "198.18.0.3:80"}, []string{"late.test:80", "nohost.test:81"}
	for _, c := range []struct {
		query string
		rows  []string
	}{
		{"outcome=unresolved", names},
		{"state=unknown", names},
		{"route=excluded", names},
		{"state=unprobed", members},
		{"outcome=none", members},
		{"q=nohost", names[1:]},
		{"q=xss-fetched", names},
		{"sort=outcome&desc=1", []string{names[1], names[0], members[2], members[1], members[0]}},
		{"sort=error", append(slices.Clone(members), names...)},
		{"outcome=unresolved&label=zone%3Db", names[1:]},
	} {
		if got := rows(td.okPage(t, "/pool?name=web&"+c.query)); !slices.Equal(got, c.rows) {
			t.Errorf("%s: rows %v, want %v", c.query, got, c.rows)
		}
	}
}

// TestTargetPageUnresolved checks the view of a target without an address:
// addressed by its pool and host:port, it says why, since when and when the
// name is looked up next, shows its labels and no timeline; once the name
// resolves, the same link shows the target it resolved to.
func TestTargetPageUnresolved(t *testing.T) {
	t.Parallel()
	td, res := startLabelled(t)
	path := "/target?pool=web&target=late.test%3A80"
	body := td.okPage(t, path)
	for _, want := range []string{
		`<strong>unresolved</strong>`,
		`<dd class="err" id="target-error">cannot resolve &#34;late.test&#34;: &lt;b/id=sonde-xss&gt;pwned&lt;/b&gt;&lt;img/src=/xss-fetched&gt; for late.test</dd>`,
		`<dt>next lookup</dt>`,
		`, the name's first lookup</dd>`,
		`<dt>name</dt><dd>late.test</dd>`,
		`<a class="label" href="pool?label=team%3Dedge&amp;name=web" title="filter by team=edge">`,
		`<dt>W1 (to unhealthy)</dt>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the unresolved target's view lacks %s:\n%s", want, body)
		}
	}
	if !regexp.MustCompile(`<dd id="next-lookup">(in \d+s, at <time datetime="[^"]+">[0-9:]{8} UTC</time>|due now)</dd>`).MatchString(body) {
		t.Errorf("the unresolved target's view does not say when the name is looked up next:\n%s", body)
	}
	if strings.Contains(body, `id="timeline"`) {
		t.Errorf("an unresolved target has a timeline:\n%s", body)
	}
	assertInert(t, path, body)
	if code, _, body := td.page(t, "/api/v1/history?pool=web&target=late.test%3A80"); code != http.StatusNotFound || !strings.Contains(body, "no address to probe yet") {
		t.Errorf("history of an unresolved target: %d %q, want 404 saying why", code, body)
	}
	// A target that is no name but cannot be probed (no port): no lookup.
	body = td.okPage(t, "/target?pool=ports&target=198.18.3.1")
	if !strings.Contains(body, `no port, and check &#34;tcp&#34; has none`) || !strings.Contains(body, "<dt>until</dt>") || strings.Contains(body, "next lookup") {
		t.Errorf("the view of a target without a port:\n%s", body)
	}
	// A member's view shows its labels.
	body = td.okPage(t, "/target?pool=web&target=198.18.0.3%3A80")
	if !strings.Contains(body, `<dt>labels in web</dt>`) || !strings.Contains(body, `<span class="lv">&#34;&gt;&lt;b id=sonde-xss`) {
		t.Errorf("a member's view lacks its labels:\n%s", body)
	}
	assertInert(t, "/target?pool=web&target=198.18.0.3:80", body)

	// The name resolves (to an address never probed: health checks are off).
	res.set("late.test", "198.18.0.9")
	testenv.Eventually(t, "GET "+path+" to show late.test resolved", func() (string, bool) {
		code, _, body := td.page(t, path)
		return fmt.Sprintf("%d\n%s", code, body),
			code == http.StatusOK && !strings.Contains(body, "unresolved") && strings.Contains(body, `<h1>198.18.0.9:80 <span class="host">late.test</span></h1>`)
	})
}

// TestOverviewDiscovery checks what the overview and the discovery page say
// of discovery: a pool's unresolved count, a failing source with since
// when, its error and the targets
// it keeps; and every source and unresolved name on the discovery page.
func TestOverviewDiscovery(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sd := filepath.Join(dir, "sd.json")
	writeSD(t, sd, []sdGroup{{Targets: []string{"198.18.2.1:80"}}})
	res := &flakyResolver{addrs: map[string][]netip.Addr{}}
	td := startDaemonWith(t, labelledConfig+fmt.Sprintf(`
  - {name: files, check: web, health_checks: false, file_sd_configs: [{files: [%q]}]}
`, sd), func(o *Options) {
		o.Resolver = markupResolver{res}
		o.DiscoveryDebounce = 10 * time.Millisecond
	})
	td.waitTargets(t, "files", "the file's target", func(m map[string]api.TargetJSON) bool { return len(m) == 1 })
	td.waitTargets(t, "web", "the names looked up", func(m map[string]api.TargetJSON) bool {
		return strings.Contains(m["late.test:80"].LastError, "pwned") && strings.Contains(m["nohost.test:81"].LastError, "pwned")
	})
	if err := os.WriteFile(sd, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	failing := regexp.MustCompile(`file_sd_configs\[0\] failing since \d\d:\d\d:\d\d UTC \(\d+s ago\): reading \S+sd\.json: want a JSON array of target groups, not \{ — keeping the 1 target it gave last\.`)
	body := testenv.Eventually(t, "the overview to warn of the failing source", func() (string, bool) {
		body := td.okPage(t, "/")
		return body, failing.MatchString(body)
	})
	assertInert(t, "/", body)
	card := regexp.MustCompile(`(?s)<section class="card[^"]*" data-pool-card="web">.*?</section>`).FindString(body)
	if !strings.Contains(card, `<dt>unresolved</dt><dd><a href="pool?name=web&amp;outcome=unresolved">2</a></dd>`) {
		t.Errorf("the card of web lacks its 2 unresolved targets:\n%s", card)
	}
	if plain := regexp.MustCompile(`(?s)data-pool-card="plain">.*?</section>`).FindString(body); strings.Contains(plain, "unresolved") {
		t.Errorf("the card of plain, all resolved, shows unresolved targets:\n%s", plain)
	}
	if !strings.Contains(td.okPage(t, "/pool?name=files"), `file_sd_configs[0] failing since`) {
		t.Error("the pool view of files does not warn of its failing source")
	}

	body = td.okPage(t, "/discovery")
	for _, want := range []string{
		`<a href="discovery" aria-current="page">Discovery</a>`,
		`<tr class="src src-ok" data-source="static_configs[0]">`,
		`<tr class="src src-ok" data-source="static_configs[2]">`,
		`<tr class="src src-failing" data-source="file_sd_configs[0]">`,
		`<tr data-unresolved="late.test:80"><td><a href="target?pool=web&amp;target=late.test%3A80">late.test:80</a></td><td class="err">cannot resolve &#34;late.test&#34;: &lt;b/id=sonde-xss&gt;`,
		`<tr data-unresolved="nohost.test:81">`,
		`<tr data-unresolved="198.18.3.1"><td><a href="target?pool=ports&amp;target=198.18.3.1">198.18.3.1</a></td><td class="err">no port`,
		`Pools whose targets are all addresses from the configuration: plain.`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the discovery page lacks %s:\n%s", want, body)
		}
	}
	src := regexp.MustCompile(`(?s)<tr class="src src-failing" data-source="file_sd_configs\[0\]">.*?</tr>`).FindString(body)
	for _, want := range []string{`<td>file</td>`, `<span class="st st-failing">failing</span> <span class="dim">since <time`, `<td>1</td>`, `<td class="wide err">reading `, `sd.json: want a JSON array of target groups, not {`} {
		if !strings.Contains(src, want) {
			t.Errorf("the failing source's row lacks %s:\n%s", want, src)
		}
	}
	assertInert(t, "/discovery", body)
}

// TestDiscoveryPageWithout checks the discovery page of a daemon whose
// pools list only addresses.
func TestDiscoveryPageWithout(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, unprobedConfig)
	if body := td.okPage(t, "/discovery"); !strings.Contains(body, "No pool discovers its targets or lists host names") {
		t.Errorf("the discovery page without discovery:\n%s", body)
	}
}

// TestPoolPageNamesAtOneAddress checks a pool that probes one address by
// two names (an HTTP check sends each its own Host): each is a row of its
// own, a page boundary between them loses neither, and each row's link
// opens its own target.
func TestPoolPageNamesAtOneAddress(t *testing.T) {
	t.Parallel()
	res := &flakyResolver{addrs: map[string][]netip.Addr{}}
	res.set("a.test", "198.18.0.5")
	res.set("b.test", "198.18.0.5")
	td := startDaemonWith(t, `
checks:
  web: {protocol: http, path: /, interval: 1s, timeout: 1s}
pools:
  - {name: web, check: web, targets: ["a.test:80", "b.test:80"], health_checks: false}
`, func(o *Options) { o.Resolver = res })
	hostRE := regexp.MustCompile(`<a href="(target\?[^"]+)">198\.18\.0\.5:80</a> <span class="host">([ab]\.test)</span>`)
	var hosts []string
	path := "/pool?name=web&limit=1"
	for range 3 {
		body := td.okPage(t, path)
		m := hostRE.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("GET %s: no row of 198.18.0.5:80 with its name:\n%s", path, body)
		}
		hosts = append(hosts, m[2])
		if target := td.okPage(t, "/"+html.UnescapeString(m[1])); !strings.Contains(target, `<h1>198.18.0.5:80 <span class="host">`+m[2]+`</span></h1>`) {
			t.Errorf("the link of %s's row opens another target:\n%s", m[2], target)
		}
		next := regexp.MustCompile(`<a href="([^"]+)" rel="next">`).FindStringSubmatch(body)
		if next == nil {
			break
		}
		path = "/" + html.UnescapeString(next[1])
	}
	if !slices.Equal(hosts, []string{"a.test", "b.test"}) {
		t.Errorf("paged through %v, want a.test then b.test", hosts)
	}
}
