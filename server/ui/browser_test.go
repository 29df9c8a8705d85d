package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// These tests run `sonde run` and look at its status page in a real
// headless Chromium (Debian's chromium, which .ci/run installs), asserting
// what a person would see. Every request the browser makes is recorded and
// must go to loopback; the browser also resolves no name but 127.0.0.1, so
// nothing could leave the machine if the page tried.

func TestMain(m *testing.M) { testenv.Main(m) }

// browser is one headless Chromium with a tab, and what the tab did.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	requests []string // every URL the page requested
	problems []string // console errors, uncaught exceptions, error log entries
}

// newBrowser starts Chromium with a fresh profile; it is stopped when t ends.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := testenv.Tool(t, "chromium", "chromium")
	// Chromium writes outside its profile too: crash report settings under
	// the user's configuration and cache directories, a singleton socket's
	// directory in TMPDIR that it leaves behind. All go to a directory of
	// the test's, so a run leaves nothing in the user's home or in /tmp.
	home := t.TempDir()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.Env("HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
			"XDG_CACHE_HOME="+filepath.Join(home, ".cache"), "TMPDIR="+home),
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		// Names resolve to nothing: no request can leave the machine.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	b := &browser{t: t, ctx: ctx}
	b.listen(ctx)
	return b
}

// listen records the requests and problems of the tab of ctx.
func (b *browser) listen(ctx context.Context) {
	b.t.Helper()
	err := chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.requests = append(b.requests, ev.Request.URL)
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value))
				}
				b.problems = append(b.problems, "console."+string(ev.Type)+": "+strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			b.problems = append(b.problems, "exception: "+(&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError {
				b.problems = append(b.problems, fmt.Sprintf("log %s: %s (%s)", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		}
	})
	if err != nil {
		b.t.Fatalf("listen to the browser: %v", err)
	}
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatal(err)
	}
}

func (b *browser) open(url string) {
	b.t.Helper()
	b.do(chromedp.Navigate(url))
}

// eval evaluates a JavaScript expression in the tab.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// wait polls a JavaScript expression until it is true; it fails after
// timeout, saying what it waited for and, from describe (an expression
// whose value is shown), what the page showed.
// click clicks the first element that selector matches, in one step of the
// page's own script: a live refresh may replace the element between
// finding and clicking it, which a protocol-level click then fails on
// ("Could not find node with given id").
func (b *browser) click(selector string) {
	b.t.Helper()
	q, _ := json.Marshal(selector)
	b.wait("something to click at "+selector, `(e => e ? (e.click(), true) : false)(document.querySelector(`+string(q)+`))`,
		`document.body.innerText.slice(0, 200)`, 20*time.Second)
}

func (b *browser) wait(what, expr, describe string, timeout time.Duration) {
	b.t.Helper()
	testenv.EventuallyWithin(b.t, what, timeout, func() (string, bool) {
		if eval[bool](b, "!!("+expr+")") {
			return "", true
		}
		return "the page shows: " + eval[string](b, describe), false
	})
}

// check fails the test for every problem the page logged and every request
// that did not go to loopback, and checks that the page asked for each of
// want (parts of URLs) at least once: a capture that saw nothing proves
// nothing.
func (b *browser) check(want ...string) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		b.t.Errorf("the page logged a problem: %s", p)
	}
	for _, r := range b.requests {
		u, err := url.Parse(r)
		if err != nil {
			b.t.Errorf("request to %q: %v", r, err)
			continue
		}
		switch u.Scheme {
		case "data", "about", "blob":
			continue
		}
		host := u.Hostname()
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			b.t.Errorf("request to %s leaves loopback", r)
		}
	}
	for _, w := range want {
		if !slices.ContainsFunc(b.requests, func(r string) bool { return strings.Contains(r, w) }) {
			b.t.Errorf("the page never requested %s; requests: %v", w, b.requests)
		}
	}
}

// startSonde runs `sonde run` with args on a free loopback port and returns
// the process and the status page's address.
func startSonde(t *testing.T, args ...string) (*testenv.Process, string) {
	t.Helper()
	bin := testenv.Sonde(t)
	p := testenv.Start(t, exec.Command(bin, append([]string{"run", "-listen", "127.0.0.1:0", "-log-level", "info"}, args...)...))
	re := regexp.MustCompile(`msg=serving listen=(127\.0\.0\.1:\d+)`)
	var m []string
	testenv.Eventually(t, "sonde to start serving", func() (string, bool) {
		out := p.Output()
		m = re.FindStringSubmatch(out)
		return "output:\n" + out, m != nil
	})
	return p, "http://" + m[1] + "/"
}

// demoBackends reads the demo's backends (name → address) from its banner.
func demoBackends(t *testing.T, p *testenv.Process) map[string]string {
	t.Helper()
	out := map[string]string{}
	re := regexp.MustCompile(`(?m)^\s+(healthy|failing|slow|redirecting|flapping|refusing|tcp)\s+(127\.0\.0\.1:\d+)\s`)
	testenv.Eventually(t, "the demo banner to list 7 backends", func() (string, bool) {
		for _, m := range re.FindAllStringSubmatch(p.Output(), -1) {
			out[m[1]] = m[2]
		}
		return fmt.Sprintf("%v in\n%s", out, p.Output()), len(out) >= 7
	})
	return out
}

// memberRows reads the member table of a pool view.
const memberRows = `Array.from(document.querySelectorAll("#members tbody tr")).map(tr => ({
	target: tr.dataset.targetRow,
	state: tr.querySelector(".col-state").textContent.trim(),
	outcome: tr.querySelector(".col-outcome").textContent.trim(),
	error: tr.querySelector(".col-error").textContent.trim(),
}))`

type memberRow struct{ Target, State, Outcome, Error string }

// TestStatusPageDemo looks at `sonde run -demo` as an operator would: the
// four pools on the overview, every target of every pool with its state
// and reason, a failing target's timeline, a new event within seconds of a
// backend's flip, the overview without JavaScript and at phone width.
func TestStatusPageDemo(t *testing.T) {
	b := newBrowser(t)
	p, base := startSonde(t, "-demo")
	backends := demoBackends(t, p)
	name := map[string]string{}
	for n, a := range backends {
		name[a] = n
	}

	b.open(base)
	b.wait("the four demo pools, edge failing open",
		`["app","edge","gateway","fleet"].every(n => document.querySelector('[data-pool-card="' + n + '"]')) &&
		 /Failing open/.test(document.querySelector('[data-pool-card="edge"]').textContent)`,
		`document.querySelector("#pools").innerText`, 60*time.Second)

	// Every target of every pool, with its state and why.
	type want struct{ state, outcome, error string }
	pools := map[string]map[string]want{
		"app":     {"healthy": {"healthy", "success", ""}, "failing": {"unhealthy", "http_status", "500"}, "redirecting": {"unhealthy", "http_status", "302"}, "flapping": {}},
		"edge":    {"failing": {"unhealthy", "http_status", "500"}, "slow": {"unhealthy", "timeout", "?"}, "refusing": {"unhealthy", "refused", "refused"}},
		"gateway": {"healthy": {"healthy", "success", ""}, "redirecting": {"healthy", "success", ""}, "flapping": {}},
		"fleet":   {"tcp": {"healthy", "success", ""}, "refusing": {"unhealthy", "refused", "refused"}},
	}
	for pool, members := range pools {
		b.open(base + "pool?name=" + pool)
		testenv.Eventually(t, "the members of pool "+pool+" as the demo makes them", func() (string, bool) {
			rows := eval[[]memberRow](b, memberRows)
			var wrong []string
			seen := map[string]bool{}
			for _, r := range rows {
				n := name[r.Target]
				w, ok := members[n]
				seen[n] = true
				switch {
				case !ok:
					wrong = append(wrong, fmt.Sprintf("%s (%s) is not a member", r.Target, n))
				case w.state == "":
					if r.State != "healthy" && r.State != "unhealthy" {
						wrong = append(wrong, fmt.Sprintf("%s: %+v, want healthy or unhealthy", n, r))
					}
				case r.State != w.state || r.Outcome != w.outcome || (w.error == "") != (r.Error == "") ||
					w.error != "?" && !strings.Contains(r.Error, w.error):
					wrong = append(wrong, fmt.Sprintf("%s: %+v, want %+v", n, r, w))
				}
			}
			for n := range members {
				if !seen[n] {
					wrong = append(wrong, n+" is missing")
				}
			}
			return strings.Join(wrong, "; "), len(wrong) == 0
		})
	}

	// The app pool's targets carry zone labels (its static_configs): filter
	// by one in the form, then take the filter out with a label's link,
	// all without reloading the page.
	b.open(base + "pool?name=app")
	b.wait("the app pool's zone labels", `document.querySelectorAll("#members td.col-labels .label").length === 8`,
		`document.querySelector("#members").innerText`, 20*time.Second)
	rowNames := func(rows []memberRow) []string {
		var out []string
		for _, r := range rows {
			out = append(out, name[r.Target])
		}
		slices.Sort(out)
		return out
	}
	labelInputs := `Array.from(document.querySelectorAll('#label-filters input[name="label"]')).map(i => i.value).join(",")`
	b.do(chromedp.SendKeys(`#label-filters input[name="label"]`, "zone"+kb.Enter))
	if !eval[bool](b, `!!document.querySelector("#label-filters input:invalid") && !location.search.includes("label=")`) {
		t.Error(`the label filter "zone" (no value) was not refused in the form`)
	}
	b.do(chromedp.SendKeys(`#label-filters input[name="label"]`, "=eu-1"+kb.Enter))
	b.wait("the rows of zone eu-1, and the filter in the form and the address",
		`document.querySelectorAll("#members tbody tr").length === 2 && new URLSearchParams(location.search).get("label") === "zone=eu-1" && `+
			labelInputs+` === "zone=eu-1,"`, labelInputs+` + " / " + document.querySelector("#members").innerText`, 20*time.Second)
	if got := rowNames(eval[[]memberRow](b, memberRows)); !slices.Equal(got, []string{"failing", "healthy"}) {
		t.Errorf("zone=eu-1 keeps %v, want failing and healthy", got)
	}
	b.click(`#members a.label.on`)
	b.wait("every row again, the filter gone", `document.querySelectorAll("#members tbody tr").length === 4 && !location.search.includes("label=") && `+
		labelInputs+` === ""`, labelInputs, 20*time.Second)
	if n := eval[int](b, `performance.getEntriesByType("navigation").length`); n != 1 {
		t.Errorf("%d navigations: the label filter reloaded the page", n)
	}

	// A failing target: its timeline, its error, its events, its check.
	b.open(base + "target?" + url.Values{"pool": {"edge"}, "target": {backends["refusing"]}}.Encode())
	b.wait("a timeline of at least 3 results with an unhealthy band and failures",
		`(s => s && +s.dataset.results >= 3 && s.querySelector("rect.band.unhealthy") && s.querySelectorAll("rect.fail").length >= 3)(document.querySelector("#timeline svg"))`,
		`document.querySelector("#timeline").innerText`, 60*time.Second)
	for _, c := range []struct{ what, expr string }{
		{"the error", `/refused/.test(document.getElementById("target-error").textContent)`},
		{"the state", `document.querySelector(".headline .st").textContent === "unhealthy"`},
		{"its event to unhealthy", `!!document.querySelector("#recent tr.ev.k-state.to-unhealthy")`},
		{"its check's preset", `/globalaccelerator|frontdoor/.test(document.querySelector("dl.settings").textContent)`},
	} {
		b.wait(c.what, c.expr, `document.querySelector("main").innerText`, 10*time.Second)
	}

	// A backend flips; its state change shows in the live event list within
	// its check's detection window (plus a margin for a loaded machine),
	// brought by the event stream: the page is not reloaded.
	b.open(base + "events")
	b.wait("the event stream", `document.getElementById("live").textContent === "live"`, `document.getElementById("live").textContent`, 20*time.Second)
	since := eval[int](b, `+document.body.dataset.since`)
	flipAt, to := waitFlip(t, "http://"+backends["flapping"]+"/")
	bound := detectionWindow(t, base, to) + 5*time.Second
	row := fmt.Sprintf(`Array.from(document.querySelectorAll("#recent tr.ev.k-state.to-%s")).some(tr => +tr.dataset.seq > %d && tr.cells[2].textContent.startsWith(%q))`,
		to, since, backends["flapping"])
	b.wait(fmt.Sprintf("the flapping backend's change to %s", to), row, `document.querySelector("#recent").innerText`, bound+10*time.Second)
	delay := time.Since(flipAt)
	t.Logf("the flip to %s showed in the event list %s after the backend flipped (bound %s)", to, delay.Round(10*time.Millisecond), bound)
	if delay > bound {
		t.Errorf("the event showed %s after the flip; want at most %s", delay, bound)
	}
	if n := eval[int](b, `performance.getEntriesByType("navigation").length`); n != 1 {
		t.Errorf("%d navigations: the event list was reloaded", n)
	}

	// The flapping target's timeline shows both states it went through.
	b.open(base + "target?" + url.Values{"pool": {"app"}, "target": {backends["flapping"]}}.Encode())
	b.wait("healthy and unhealthy bands and latencies on the flapping target's timeline",
		`(s => s && s.querySelector("rect.band.healthy") && s.querySelector("rect.band.unhealthy") && s.querySelectorAll("circle.ok").length >= 2)(document.querySelector("#timeline svg"))`,
		`document.querySelector("#timeline").innerText`, 30*time.Second)
	shot(t, b, "status-target.png")

	// The overview at phone width: nothing wider than the screen.
	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)))
	b.open(base)
	b.wait("pools at phone width", `document.querySelectorAll("[data-pool-card]").length === 4`, `document.body.innerText`, 20*time.Second)
	if w := eval[[]int](b, `[document.documentElement.scrollWidth, window.innerWidth]`); w[0] > w[1] {
		t.Errorf("at phone width the page is %d px wide on a %d px screen", w[0], w[1])
	}
	b.do(chromedp.EmulateViewport(1280, 900))
	b.open(base)
	b.wait("the overview settled", `document.querySelectorAll("[data-pool-card]").length === 4 && document.querySelectorAll("#recent tr.ev").length >= 5`,
		`document.body.innerText`, 20*time.Second)
	if updatingScreenshots() {
		// The picture shows the page as refreshed (every 5 s): capacity
		// bars and times as the script keeps them.
		eval[bool](b, `(window.sondeBefore = document.getElementById("pools"), true)`)
		b.wait("a refresh of the pools", `document.getElementById("pools") !== window.sondeBefore`, `document.body.innerText`, 20*time.Second)
	}
	shot(t, b, "status.png")
	b.check("static/sonde.js", "static/sonde.css", "static/favicon.svg", "api/v1/events", "api/v1/history")

	// Without JavaScript the overview still shows every pool.
	noJS, cancel := chromedp.NewContext(b.ctx)
	defer cancel()
	nb := &browser{t: t, ctx: noJS}
	nb.listen(noJS)
	nb.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		return err
	}))
	nb.open(base)
	text := eval[string](nb, `document.body.innerText`)
	for _, want := range []string{"app", "edge", "gateway", "fleet", "routable", "Failing open", "W1", "Recent events"} {
		if !strings.Contains(text, want) {
			t.Errorf("without JavaScript the overview lacks %q:\n%s", want, text)
		}
	}
	if eval[bool](nb, `!document.getElementById("live").hidden`) {
		t.Error("without JavaScript the page claims to be live")
	}
	nb.check("static/sonde.css")
}

// waitFlip polls a demo backend until its answer changes between 200 and
// 500, and returns when it saw the change and the state the change leads to.
func waitFlip(t *testing.T, url string) (time.Time, string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	code := func() int {
		resp, err := client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	first := code()
	// Polled every 50 ms: when the change was seen is what it returns.
	c := testenv.EventuallyEvery(t, fmt.Sprintf("%s, which answered %d, to flap", url, first), 50*time.Millisecond, func() (int, bool) {
		c := code()
		return c, c != first
	})
	if c == http.StatusOK {
		return time.Now(), "healthy"
	}
	return time.Now(), "unhealthy"
}

// detectionWindow returns the shortest window of the demo's pools that
// list the flapping backend (app and gateway) for a change to state to:
// W1 for unhealthy, W2 for healthy.
func detectionWindow(t *testing.T, base, to string) time.Duration {
	t.Helper()
	resp, err := http.Get(base + "api/v1/pools")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page struct {
		Pools []struct {
			Name    string  `json:"name"`
			Failure float64 `json:"failure_window_seconds"`
			Success float64 `json:"success_window_seconds"`
		} `json:"pools"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		t.Fatalf("GET /api/v1/pools: %v", err)
	}
	var shortest time.Duration
	for _, p := range page.Pools {
		if p.Name != "app" && p.Name != "gateway" {
			continue
		}
		s := p.Failure
		if to == "healthy" {
			s = p.Success
		}
		if d := time.Duration(s * float64(time.Second)); shortest == 0 || d < shortest {
			shortest = d
		}
	}
	if shortest == 0 {
		t.Fatalf("no windows of pools app and gateway in /api/v1/pools: %+v", page)
	}
	return shortest
}

// updatingScreenshots reports whether this run writes the screenshots of
// docs/ (SONDE_UPDATE_SCREENSHOT=1).
func updatingScreenshots() bool { return os.Getenv("SONDE_UPDATE_SCREENSHOT") == "1" }

// shot writes a screenshot of the page into docs/ of the repository when
// updatingScreenshots, so ordinary runs leave the tree alone.
func shot(t *testing.T, b *browser, name string) {
	t.Helper()
	if !updatingScreenshots() {
		return
	}
	png := func() []byte {
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		defer cancel()
		v, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}()
	_, file, _, _ := goruntime.Caller(0) // .../server/ui/browser_test.go
	path := filepath.Join(filepath.Dir(file), "..", "..", "docs", name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}

// hostileBackend answers HTTP 200 until told otherwise, then a first line
// of markup instead of HTTP, which the HTTP prober quotes in its error.
type hostileBackend struct {
	addr    string
	hostile atomic.Bool
}

// hostileLine would add an element with id sonde-xss, fetch /xss-fetched
// and set the title if a page let it through. It has no space, so the HTTP
// parser quotes it whole.
const hostileLine = `<b/id=sonde-xss>pwned</b><img/src=/xss-fetched><script>document.title='xss'</script>`

func newHostileBackend(t *testing.T) *hostileBackend {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	hb := &hostileBackend{addr: l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, 4096)
				_, _ = c.Read(buf)
				if hb.hostile.Load() {
					_, _ = io.WriteString(c, hostileLine+"\r\n\r\n")
					return
				}
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
			}()
		}
	}()
	return hb
}

// TestStatusPageHostileTarget shows an error text full of markup, from a
// backend, on every page (the live event list builds its row in the
// browser, the other pages on the server) and checks that it is text: no
// element, no request, no script. It also pages, filters and sorts a pool
// of 131,072 targets (health checks off, so nothing is probed).
func TestStatusPageHostileTarget(t *testing.T) {
	b := newBrowser(t)
	hb := newHostileBackend(t)
	_, base := startSondeWith(t, fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 300ms, timeout: 1s, rise: 1, fall: 2}
pools:
  - {name: hostile, check: web, targets: [%q]}
  - {name: big, check: web, targets: ["198.18.0.0/15"], health_checks: false}
`, hb.addr))
	target := "target?" + url.Values{"pool": {"hostile"}, "target": {hb.addr}}.Encode()
	inert := `document.getElementById("sonde-xss") === null && !/xss/.test(document.title)`

	b.open(base + "events")
	b.wait("the event stream", `document.getElementById("live").textContent === "live"`, `document.getElementById("live").textContent`, 20*time.Second)
	hb.hostile.Store(true)
	b.wait("the hostile error text, as text, in a row the page built",
		fmt.Sprintf(`Array.from(document.querySelectorAll("#recent tr.ev.fresh.to-unhealthy td.err")).some(td => td.textContent.includes(%q))`, hostileLine),
		`document.querySelector("#recent").innerText`, 30*time.Second)
	if !eval[bool](b, inert) {
		t.Error("the live event list let markup through")
	}
	for _, page := range []struct{ path, cell string }{
		{"pool?name=hostile", "#members td.col-error"},
		{"pool?name=hostile&sort=error&q=sonde-xss", "#members td.col-error"},
		{target, "#target-error"},
		{"events", "#recent td.err"},
		{"", "#recent td.err"},
	} {
		b.open(base + page.path)
		b.wait("the hostile error text on "+page.path,
			fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).some(e => e.textContent.includes(%q))`, page.cell, hostileLine),
			`document.querySelector("main").innerText`, 20*time.Second)
		if !eval[bool](b, inert) {
			t.Errorf("%s let markup through", page.path)
		}
	}

	// A pool of 131,072 targets: a page at a time.
	paging := `document.querySelector("#members .paging").textContent.trim()`
	b.open(base + "pool?name=big")
	b.wait("the first page", `document.querySelectorAll("#members tbody tr").length === 100 && /targets 1–100 of 131072/.test(`+paging+`)`, paging, 20*time.Second)
	b.click(`a[rel="next"]`)
	b.wait("the second page", `/targets 101–200 of 131072/.test(`+paging+`) && location.search.includes("after=")`, paging, 20*time.Second)
	if first := eval[string](b, `document.querySelector("#members tbody tr").dataset.targetRow`); first != "198.18.0.100:80" {
		t.Errorf("the second page starts with %s, want 198.18.0.100:80", first)
	}
	b.click(`a[rel="prev"]`)
	b.wait("the first page again", `/targets 1–100 of 131072/.test(`+paging+`)`, paging, 20*time.Second)
	b.do(chromedp.SendKeys(`input[name="q"]`, "198.19.255."))
	b.wait("the text filter", `/targets 1–100 of 256/.test(`+paging+`)`, paging, 20*time.Second)
	b.click(`th.col-target a`)
	b.wait("descending order", `document.querySelector("#members tbody tr").dataset.targetRow === "198.19.255.255:80"`,
		`document.querySelector("#members tbody tr").dataset.targetRow`, 20*time.Second)
	if !eval[bool](b, `document.querySelector('#filters input[name="q"]').value === "198.19.255."`) {
		t.Error("the filter's text was lost")
	}
	b.check("static/sonde.js", "api/v1/events", "api/v1/history", "pool?name=big")
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.requests {
		if strings.Contains(r, "xss-fetched") {
			t.Errorf("the page requested %s: markup from the backend ran", r)
		}
	}
}

// switchBackend is a loopback HTTP server that answers 200, or 500 while
// failing is set.
type switchBackend struct {
	addr    string
	failing atomic.Bool
}

func newSwitchBackend(t *testing.T) *switchBackend {
	t.Helper()
	sb := &switchBackend{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sb.failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	sb.addr = srv.Listener.Addr().String()
	return sb
}

// startSwitchSonde starts a switch backend and a sonde that probes it every
// 200 ms in pool api, deciding on one probe; it returns the backend and
// sonde's base URL.
func startSwitchSonde(t *testing.T) (*switchBackend, string) {
	t.Helper()
	sb := newSwitchBackend(t)
	_, base := startSondeWith(t, fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 200ms, timeout: 1s, rise: 1, fall: 1}
pools:
  - {name: api, check: web, targets: [%q]}
`, sb.addr))
	return sb, base
}

// startSondeWith starts sonde on a configuration file of content config,
// as startSonde does.
func startSondeWith(t *testing.T, config string) (*testenv.Process, string) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "sonde.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return startSonde(t, "-config", cfg)
}

// tab opens a new tab of b, for test t, whose pages run script before
// their own.
func (b *browser) tab(t *testing.T, script string) *browser {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	t.Cleanup(cancel)
	nb := &browser{t: t, ctx: ctx}
	nb.listen(ctx)
	nb.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: script})
		return err
	}))
	return nb
}

// Scripts run before a page's own: a browser without EventSource, and a
// page made by a sonde that had numbered far more events than the one now
// running (as after a restart): its body says it saw up to event 1000000.
const (
	noEventSource = `delete window.EventSource;`
	seenMillion   = `new MutationObserver(function (_, o) {
		if (document.body) { document.body.dataset.since = "1000000"; o.disconnect(); }
	}).observe(document, {childList: true, subtree: true});`
)

// TestStatusPageFallbacks follows events where the event stream cannot be
// had (polling /api/v1/events), and after sonde restarted and numbers its
// events from 1 again, both by polling and by the stream: in each, a
// backend's state change shows in the live event list without a reload.
func TestStatusPageFallbacks(t *testing.T) {
	b := newBrowser(t)
	sb, base := startSwitchSonde(t)
	live := `document.getElementById("live").textContent`
	for _, c := range []struct {
		name, script, live string
		restarted          bool
		request            string // what the page must have asked for
	}{
		{"polling", noEventSource, "live (polling)", false, "api/v1/events?since="},
		{"polling after a restart", noEventSource + seenMillion, "live (polling)", true, "api/v1/events?since=1000000&limit="},
		{"stream after a restart", seenMillion, "live", true, "api/v1/events?since=1000000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := b.tab(t, c.script)
			// A zone 5:30 off UTC: a clock shown in local time would differ.
			tb.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				_, err := cdp.Call(ctx, tg, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Asia/Kolkata"})
				return err
			}))
			tb.open(base + "events")
			tb.wait(c.live, live+` === `+strconv.Quote(c.live), live, 20*time.Second)
			to := "unhealthy"
			if sb.failing.Load() {
				to = "healthy"
			}
			sb.failing.Store(to == "unhealthy")
			tb.wait("the backend's change to "+to+", added by the script",
				fmt.Sprintf(`Array.from(document.querySelectorAll("#recent tr.ev.fresh.k-state.to-%s")).some(tr => tr.cells[2].textContent.startsWith(%q))`, to, sb.addr),
				`document.querySelector("#recent").innerText`, 30*time.Second)
			// Every clock, the server's and the script's, in UTC as labelled.
			if h := eval[string](tb, `document.querySelector("#recent th").textContent`); h != "time (UTC)" {
				t.Errorf("the time column is headed %q, want time (UTC)", h)
			}
			if bad := eval[[]string](tb, `Array.from(document.querySelectorAll("#recent time.clock")).
				filter(e => e.textContent !== new Date(e.getAttribute("datetime")).toISOString().slice(11, 19)).
				map(e => e.getAttribute("datetime") + " shown as " + e.textContent)`); len(bad) > 0 || eval[int](tb, `document.querySelectorAll("#recent time.clock").length`) < 2 {
				t.Errorf("clocks not in UTC (or fewer than 2): %v", bad)
			}
			warned := eval[bool](tb, `Array.from(document.querySelectorAll("p.warning")).some(p => /sonde restarted/.test(p.textContent))`)
			if warned != c.restarted {
				t.Errorf("the page warns of a restart: %v, want %v", warned, c.restarted)
			}
			if n := eval[int](tb, `performance.getEntriesByType("navigation").length`); n != 1 {
				t.Errorf("%d navigations: the event list was reloaded", n)
			}
			tb.check("static/sonde.js", c.request)
		})
	}
}

// TestStatusPagePoolCounts checks that the pool view's filter menus count
// the targets of each state as the table does while the script refreshes
// it: a backend's change shows in both, without a reload.
func TestStatusPagePoolCounts(t *testing.T) {
	b := newBrowser(t)
	sb, base := startSwitchSonde(t)
	menu := `Array.from(document.querySelectorAll('#filters select[name="state"] option')).map(o => o.textContent).join(", ")`
	table := `document.querySelector("#members tbody .col-state").textContent.trim()`
	b.open(base + "pool?name=api")
	b.wait("the target healthy in the table and the menu",
		table+` === "healthy" && /unhealthy \(0\).* healthy \(1\)/.test(`+menu+`)`, menu, 20*time.Second)
	sb.failing.Store(true)
	b.wait("the target unhealthy in the table and the menu",
		table+` === "unhealthy" && /unhealthy \(1\).* healthy \(0\)/.test(`+menu+`)`, table+` + ": " + `+menu, 30*time.Second)
	if n := eval[int](b, `performance.getEntriesByType("navigation").length`); n != 1 {
		t.Errorf("%d navigations: the page was reloaded", n)
	}
	b.check("static/sonde.js", "pool?name=api")
}

// TestPoolClickNotLostWhileRefreshing clicks an order while the pool page's
// previous read is still in flight (held in the browser): the click's page
// must be read after it, not dropped, or the page shows one order while its
// address names another until some later refresh.
func TestPoolClickNotLostWhileRefreshing(t *testing.T) {
	b := newBrowser(t)
	_, base := startSondeWith(t, `
checks:
  web: {protocol: http, path: /, interval: 1s, timeout: 1s}
pools:
  - {name: big, check: web, targets: ["198.18.0.0/24"], health_checks: false}
`)
	paging := `document.querySelector("#members .paging").textContent.trim()`
	b.open(base + "pool?name=big")
	b.wait("the first page", `/targets 1–100 of 256/.test(`+paging+`)`, paging, 20*time.Second)
	// The page's reads wait until released, and the page seems hidden, so
	// that no timed refresh reads it meanwhile.
	eval[bool](b, `(function () {
		Object.defineProperty(document, "hidden", { get: function () { return true; } });
		var real = window.fetch;
		window.held = [];
		window.asked = [];
		window.fetch = function (u, o) {
			window.asked.push(String(u));
			return new Promise(function (done) { window.held.push(function () { done(real(u, o)); }); });
		};
		window.release = function () { var go = window.held.shift(); if (go) go(); return !!go; };
		return true;
	})()`)
	b.do(chromedp.Click(`a[rel="next"]`))
	b.wait("the next page's read, held", `window.held.length === 1`, `window.asked.join(" ")`, 10*time.Second)
	b.do(chromedp.Click(`th.col-target a`))
	eval[bool](b, `window.release()`)
	b.wait("a read of the clicked order after the held one", `window.asked.length === 2 && /desc=/.test(window.asked[1])`,
		`window.asked.join(" ")`, 10*time.Second)
	eval[bool](b, `window.release()`)
	b.wait("descending order, as the address says",
		`/desc=/.test(location.search) && document.querySelector("#members tbody tr").dataset.targetRow === "198.18.0.255:80"`,
		`location.search + " " + document.querySelector("#members tbody tr").dataset.targetRow`, 20*time.Second)
}
