package server

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/server/ui"
)

// The status page: an overview of every pool (served at /, rendered on the
// server so it works without JavaScript), a pool's members, one target's
// recent results and events, and the event list. Every page links to the
// others with relative addresses, so it works under any path a reverse
// proxy puts it (see Options.Web.RoutePrefix). The script in server/ui keeps the
// pages live: it re-reads them, and follows the event stream.

// Numbers of events the pages show.
const (
	overviewEvents = 10
	targetEvents   = 50
	eventsPage     = 200
	// targetResults is how many recent results the target view lists as a
	// table (the script draws all of them).
	targetResults = 30
)

// pageBase is what every page shows in its frame.
type pageBase struct {
	Page     string // overview, pool, target, events, error
	Title    string
	Version  string
	Shard    string // "0/1"
	TCPPath  string
	Loaded   time.Time // when the running configuration was loaded
	Now      time.Time
	EventSeq uint64 // the newest event when the page was made: the script follows the stream from there
	Pool     string // the pool the page is about, for the script
	Target   string // the target the page is about, for the script
}

func (d *Daemon) pageBase(g *generation, page, title string) pageBase {
	tcp, _ := d.TCPPath()
	return pageBase{Page: page, Title: title, Version: d.opt.Version, Shard: g.cfg.Shard.String(), TCPPath: string(tcp),
		Loaded: g.loaded, Now: d.opt.Clock.Now(), EventSeq: d.events.last()}
}

// statusRoutes adds the status page's routes to mux.
func (d *Daemon) statusRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", d.handleOverview)
	mux.HandleFunc("GET /pool", d.handlePoolPage)
	mux.HandleFunc("GET /target", d.handleTargetPage)
	mux.HandleFunc("GET /events", d.handleEventsPage)
	mux.HandleFunc("GET /static/{name}", ui.Static)
	mux.HandleFunc("GET /api/v1/history", d.handleHistory)
}

// pageError answers a page request that cannot be served with a page that
// says why, and a link back.
func (d *Daemon) pageError(w http.ResponseWriter, g *generation, status int, err error) {
	data := struct {
		pageBase
		Error string
	}{d.pageBase(g, "error", http.StatusText(status)), err.Error()}
	ui.Render(w, status, "error", data)
}

// barSegment is one part of a pool's capacity bar, in percent of its
// members.
type barSegment struct {
	Class string
	X, W  float64
	Label string
}

// poolCard is a pool as the overview and the pool view head show it.
type poolCard struct {
	PoolJSON
	URL      string
	Interval float64 // seconds
	Timeout  float64
	Shard    string // "" when the daemon runs every target
	InRot    int    // unhealthy members kept in rotation
	Bar      []barSegment
	Warnings []string
}

func (g *generation) poolCard(pi int, j PoolJSON) poolCard {
	c := g.cfg.Checks[g.cfg.Pools[pi].CheckIndex]
	pc := poolCard{PoolJSON: j, URL: "pool?" + url.Values{"name": {j.Name}}.Encode(),
		Interval: c.Interval.Seconds(), Timeout: c.Timeout.Seconds()}
	if g.cfg.Shard.Shards() > 1 {
		pc.Shard = g.cfg.Shard.String()
	}
	pc.InRot = j.Unhealthy - j.Removed
	if j.HealthChecks {
		pc.InRot = max(pc.InRot, 0)
	} else {
		pc.InRot = 0
	}
	x := 0.0
	add := func(class string, n int, label string) {
		if n <= 0 || j.Targets == 0 {
			return
		}
		w := 100 * float64(n) / float64(j.Targets)
		pc.Bar = append(pc.Bar, barSegment{Class: class, X: x, W: w, Label: fmt.Sprintf("%d %s", n, label)})
		x += w
	}
	if j.HealthChecks {
		add("healthy", j.Healthy, "healthy, routed")
		add("inrot", pc.InRot, "unhealthy, kept in rotation")
		add("removed", j.Removed, "unhealthy, removed")
		add("unknown", j.Unknown, "unknown, pending")
	} else {
		add("unprobed", j.Unprobed, "not probed, routed")
	}
	add("disabled", j.Disabled, "disabled")
	switch {
	case j.FailingOpen:
		pc.Warnings = append(pc.Warnings, fmt.Sprintf("Failing open: no target is healthy, so %s stay in rotation (fail_open).",
			count(j.Unhealthy, "the unhealthy target", "all %d unhealthy targets")))
	case pc.InRot > 0:
		pc.Warnings = append(pc.Warnings, fmt.Sprintf("Removal cap: %s in rotation; at most %d%% of the pool may be removed (max_unhealthy_percent).",
			count(pc.InRot, "1 unhealthy target stays", "%d unhealthy targets stay"), j.MaxUnhealthyPercent))
	}
	if j.Routable == 0 && j.Targets > j.Disabled {
		pc.Warnings = append(pc.Warnings, "No target is routable: this pool receives no traffic.")
	}
	return pc
}

// count says n things: one when n is 1, else many with n for its %d.
func count(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return fmt.Sprintf(many, n)
}

func (g *generation) poolCards() []poolCard {
	cards := make([]poolCard, len(g.pools))
	for pi := range cards {
		cards[pi] = g.poolCard(pi, g.poolJSON(pi))
	}
	return cards
}

// eventView is an event as the pages list it.
type eventView struct {
	Event
	Pool string // the pool its target link opens: the first of its pools
	URL  string // of the target's view; "" for an event without a target
}

func eventViews(evs []Event) []eventView {
	out := make([]eventView, len(evs))
	for i, e := range evs {
		out[i] = eventView{Event: e}
		if len(e.Pools) > 0 {
			out[i].Pool = e.Pools[0]
			if e.Target != "" {
				out[i].URL = targetURL(e.Pools[0], e.Target)
			}
		}
	}
	return out
}

// recentList is a page's list of recent events: at most Keep, newest
// first, a bound the page's script keeps to as it adds new events.
type recentList struct {
	List []eventView
	Keep int
}

// recentEvents returns the newest events that keep selects, at most n,
// newest first.
func (d *Daemon) recentEvents(n int, keep func(*Event) bool) recentList {
	return recentList{List: eventViews(d.events.newest(n, keep)), Keep: n}
}

func (d *Daemon) handleOverview(w http.ResponseWriter, r *http.Request) {
	g := d.running(w)
	if g == nil {
		return
	}
	release := d.heavy(w, r) // a list of every pool, as /api/v1/pools
	if release == nil {
		return
	}
	defer release()
	ui.Render(w, http.StatusOK, "overview", struct {
		pageBase
		Pools  []poolCard
		Events recentList
	}{d.pageBase(g, "overview", "Overview"), g.poolCards(), d.recentEvents(overviewEvents, nil)})
}

// poolIndex returns the index of the pool called name.
func (g *generation) poolIndex(name string) (int, error) {
	for pi, p := range g.pools {
		if p.Name == name {
			return pi, nil
		}
	}
	return 0, fmt.Errorf("no pool %q", name)
}

// sortLink is a column head of the pool view: a link that sorts by it.
type sortLink struct {
	Name   string // the column, as sort= names it
	Label  string // its heading
	Title  string // what it shows, when the heading does not say it all
	URL    string
	Sorted string // "asc" or "desc" when the page is sorted by it
}

// columnHeads are the headings of the pool view's columns that are not
// their sort= names: text and tooltip.
var columnHeads = map[string][2]string{
	"latency": {"latency (last success)", "latency of the last successful probe"},
}

// filterChoice is an entry of a filter menu.
type filterChoice struct {
	Value, Label string
	Selected     bool
}

func (d *Daemon) handlePoolPage(w http.ResponseWriter, r *http.Request) {
	g := d.running(w)
	if g == nil {
		return
	}
	name := r.URL.Query().Get("name")
	pi, err := g.poolIndex(name)
	if err != nil {
		d.pageError(w, g, http.StatusNotFound, err)
		return
	}
	q, err := parsePoolQuery(r.URL.Query())
	if err != nil {
		d.pageError(w, g, http.StatusBadRequest, err)
		return
	}
	release := d.heavy(w, r) // a pass over the pool, as a list request
	if release == nil {
		return
	}
	defer release()
	list := g.listPool(pi, &q)
	page := func(cursor string, k *rowKey) string {
		if k == nil {
			return ""
		}
		v := q.values()
		v.Set("name", name)
		v.Set(cursor, k.String())
		return "pool?" + v.Encode()
	}
	var heads []sortLink
	for _, col := range sortColumns {
		v := q.values()
		v.Set("name", name)
		v.Set("sort", col)
		v.Del("desc")
		sl := sortLink{Name: col, Label: col}
		if h, ok := columnHeads[col]; ok {
			sl.Label, sl.Title = h[0], h[1]
		}
		if q.Sort == col {
			sl.Sorted = "asc"
			if q.Desc {
				sl.Sorted = "desc"
			} else {
				v.Set("desc", "1")
			}
		}
		sl.URL = "pool?" + v.Encode()
		heads = append(heads, sl)
	}
	choices := func(values []string, counts map[string]int, cur string) []filterChoice {
		out := []filterChoice{{Value: "", Label: "any", Selected: cur == ""}}
		for _, v := range values {
			out = append(out, filterChoice{Value: v, Label: fmt.Sprintf("%s (%d)", v, counts[v]), Selected: v == cur})
		}
		return out
	}
	outcomes := []string{notProbed}
	for o := range probe.NumOutcomes {
		outcomes = append(outcomes, o.String())
	}
	pj := g.poolJSON(pi)
	base := d.pageBase(g, "pool", "Pool "+name)
	base.Pool = name
	last := list.First + len(list.Rows) - 1
	ui.Render(w, http.StatusOK, "pool", struct {
		pageBase
		Card       poolCard
		Query      poolQuery
		Rows       []memberView
		First      int
		Last       int
		Total      int
		PrevURL    string
		NextURL    string
		FirstURL   string
		Heads      []sortLink
		States     []filterChoice
		Outcomes   []filterChoice
		Routes     []filterChoice
		Limits     []int
		FilterText string
	}{
		pageBase: base, Card: g.poolCard(pi, pj), Query: q, Rows: list.Rows, First: list.First, Last: last, Total: list.Total,
		PrevURL: page("before", list.Prev), NextURL: page("after", list.Next), FirstURL: page("", nil), Heads: heads,
		States:   choices(memberStates, list.States, q.State),
		Outcomes: choices(outcomes, list.Outcomes, q.Outcome),
		Routes:   choices(memberRoutes, list.Routes, q.Route),
		Limits:   []int{50, 100, 500, 1000},
	})
}

// findMember returns the index in pool pi of the member at address target.
func (g *generation) findMember(pi int, target string) (int, error) {
	ap, err := netip.ParseAddrPort(target)
	if err != nil {
		return 0, fmt.Errorf("target=%q: want an address:port", target)
	}
	for m, id := range g.pools[pi].Members {
		if g.cfg.Targets[id].AddrPort() == ap {
			return m, nil
		}
	}
	return 0, fmt.Errorf("pool %q has no target %s", g.pools[pi].Name, target)
}

// lookupTarget reads pool= and target= of r.
func (g *generation) lookupTarget(r *http.Request) (pi, m int, err error) {
	q := r.URL.Query()
	if pi, err = g.poolIndex(q.Get("pool")); err != nil {
		return 0, 0, err
	}
	m, err = g.findMember(pi, q.Get("target"))
	return pi, m, err
}

// setting is one row of the target view's settings table.
type setting struct{ Name, Value string }

// checkSettings lists what the target view shows of check c.
func checkSettings(c *config.Check) []setting {
	s := c.Settings()
	rows := []setting{
		{"check", s.Name},
		{"protocol", s.Protocol.String()},
		{"probe", s.ProbeText(false)},
		{"cadence", fmt.Sprintf("%s, every %s, timeout %s", s.Cadence, ui.Seconds(s.IntervalSeconds), ui.Seconds(s.TimeoutSeconds))},
		{"evaluation", s.EvaluationText()},
		{"initial state", s.InitialState.String()},
		{"W1 (to unhealthy)", ui.Seconds(s.FailureWindowSeconds)},
		{"W2 (to healthy, at the timeout)", ui.Seconds(s.SuccessWindowSeconds)},
		{"W3 (from the onset of a failure)", ui.Seconds(s.OnsetWindowSeconds)},
		{"probe rate", fmt.Sprintf("%.3g/s", s.ProbeRate)},
	}
	if s.Preset != nil {
		rows = slices.Insert(rows, 1, setting{"preset", *s.Preset})
	}
	if s.Port != nil {
		p := fmt.Sprint(*s.Port)
		if s.PortWins {
			p += " (over the targets' own ports)"
		}
		rows = append(rows, setting{"port", p})
	}
	return rows
}

// poolRoute is a pool that lists the target, with the target's route there.
type poolRoute struct {
	Name, URL, Route string
	Current          bool
}

func (d *Daemon) handleTargetPage(w http.ResponseWriter, r *http.Request) {
	g := d.running(w)
	if g == nil {
		return
	}
	pi, m, err := g.lookupTarget(r)
	if err != nil {
		d.pageError(w, g, http.StatusNotFound, err)
		return
	}
	p := g.pools[pi]
	id := p.Members[m]
	route, pref := g.router.Route(pi, m)
	mb := member{m: m, id: id, route: route, pref: pref, st: g.engine.Status(id)}
	mb.state = stateIndex(p, route, mb.st)
	clock := g.engine.Clock()
	off := clock.Now().Sub(time.Unix(0, 0)) - time.Duration(clock.Nanotime())
	view := g.memberView(pi, &mb, off)

	recorded := d.hist.view(g.hist, id, clock.Nanotime())
	results := d.history(g, id)
	slices.Reverse(results)
	results = results[:min(len(results), targetResults)]

	var pools []poolRoute
	g.poolsOf(id, func(pj int) {
		mj, _ := slices.BinarySearch(g.pools[pj].Members, id)
		rt, _ := g.router.Route(pj, mj)
		pools = append(pools, poolRoute{Name: g.pools[pj].Name, URL: "pool?" + url.Values{"name": {g.pools[pj].Name}}.Encode(),
			Route: rt.String(), Current: pj == pi})
	})
	c := g.cfg.Checks[g.cfg.Targets[id].Check]
	rtt := c.Timeout
	if mb.st.Smoothed > 0 {
		rtt = mb.st.Smoothed
	}
	var certExpiry time.Time
	if exp := g.certExpiry(id); exp != 0 {
		certExpiry = time.Unix(exp, 0).UTC()
	}
	events := d.recentEvents(targetEvents, func(e *Event) bool {
		return e.Target == view.Target && slices.Contains(e.Pools, p.Name)
	})
	base := d.pageBase(g, "target", view.Target)
	base.Pool, base.Target = p.Name, view.Target
	ui.Render(w, http.StatusOK, "target", struct {
		pageBase
		M           memberView
		PoolURL     string
		Pools       []poolRoute
		Settings    []setting
		W1, W2      float64
		CertExpiry  time.Time
		Results     []HistoryResult
		Recorded    bool
		Capacity    int
		Events      recentList
		IntervalSec float64
		HistoryURL  string
	}{
		pageBase: base, M: view, PoolURL: "pool?" + url.Values{"name": {p.Name}}.Encode(), Pools: pools,
		Settings: checkSettings(c), W1: c.FailureWindow().Seconds(), W2: c.SuccessWindow(rtt).Seconds(),
		CertExpiry: certExpiry, Results: results, Recorded: recorded, Capacity: d.hist.results, Events: events,
		IntervalSec: c.Interval.Seconds(),
		HistoryURL:  "api/v1/history?" + url.Values{"pool": {p.Name}, "target": {view.Target}}.Encode(),
	})
}

// history returns target id's kept results, oldest first.
func (d *Daemon) history(g *generation, id uint32) []HistoryResult {
	raw := d.hist.read(g.hist, id, make([]histRead, 0, d.hist.results))
	clock := g.engine.Clock()
	out := make([]HistoryResult, len(raw))
	for i, r := range raw {
		out[i] = r.result(clock)
	}
	return out
}

// HistoryJSON is the answer of /api/v1/history.
type HistoryJSON struct {
	Target string `json:"target"`
	Pool   string `json:"pool"`
	Check  string `json:"check"`
	// Recorded tells whether the target's results were kept before this
	// request; if not, they are from now on (for a while after the last
	// request), and Results holds what there is.
	Recorded bool            `json:"recorded"`
	Capacity int             `json:"capacity"` // results kept at most
	State    string          `json:"state"`
	Results  []HistoryResult `json:"results"` // oldest first
}

// handleHistory answers GET /api/v1/history?pool=&target=: the target's
// recent results. Asking for them keeps them (see history.go).
func (d *Daemon) handleHistory(w http.ResponseWriter, r *http.Request) {
	g := d.running(w)
	if g == nil {
		return
	}
	pi, m, err := g.lookupTarget(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	p := g.pools[pi]
	id := p.Members[m]
	route, _ := g.router.Route(pi, m)
	recorded := d.hist.view(g.hist, id, g.engine.Clock().Nanotime())
	writeJSON(w, HistoryJSON{
		Target: g.cfg.Targets[id].AddrPort().String(), Pool: p.Name, Check: g.checkName(id),
		Recorded: recorded, Capacity: d.hist.results, State: memberState(p, route, g.engine.Status(id)),
		Results: d.history(g, id),
	})
}

func (d *Daemon) handleEventsPage(w http.ResponseWriter, _ *http.Request) {
	g := d.running(w)
	if g == nil {
		return
	}
	ui.Render(w, http.StatusOK, "events", struct {
		pageBase
		Events recentList
		Kinds  []string
		Pools  []string
	}{d.pageBase(g, "events", "Events"), d.recentEvents(eventsPage, nil), EventKinds, poolNames(g)})
}

func poolNames(g *generation) []string {
	out := make([]string, len(g.pools))
	for i, p := range g.pools {
		out[i] = p.Name
	}
	return out
}

// routePrefix checks and normalises Options.Web.RoutePrefix: "" or a path
// starting with "/", without a trailing "/" ("/" itself is "").
func routePrefix(p string) (string, error) {
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return "", nil
	}
	u, err := url.Parse(p)
	if err != nil || !strings.HasPrefix(p, "/") || u.Path != p || u.RawQuery != "" || u.Fragment != "" || strings.Contains(p, "//") {
		return "", fmt.Errorf("%q: want a path such as /sonde", p)
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		if seg == "." || seg == ".." {
			return "", fmt.Errorf("%q: want a path without . or .. segments", p)
		}
	}
	return p, nil
}

// withPrefix serves h under prefix: PREFIX/x is h's /x, PREFIX redirects to
// PREFIX/, and anything else is not found.
func withPrefix(prefix string, h http.Handler) http.Handler {
	strip := http.StripPrefix(prefix, h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == prefix:
			to := prefix + "/"
			if r.URL.RawQuery != "" {
				to += "?" + r.URL.RawQuery
			}
			http.Redirect(w, r, to, http.StatusFound)
		case strings.HasPrefix(r.URL.Path, prefix+"/"):
			strip.ServeHTTP(w, r)
		default:
			http.Error(w, fmt.Sprintf("not found: sonde serves under %s/", prefix), http.StatusNotFound)
		}
	})
}
