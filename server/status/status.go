// Package status serves sonde's status page: an overview of every pool
// (served at /, rendered on the server so it works without JavaScript), a
// pool's members and unresolved targets, one target's recent results and
// events, the event list, and the pools' discovery sources, and
// /api/v1/history, the target view's results. It reads the daemon only
// through a Snapshot, which the daemon implements, so it is tested without
// one. Every page links to the others with relative addresses, so it works
// under any path a reverse proxy puts it (the daemon's route prefix). The
// script in server/ui keeps the pages live: it re-reads them, and follows
// the event stream.
package status

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/config/discovery"
	"github.com/sondeprobe/sonde/config/settings"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/server/apiv1/targetsel"
	"github.com/sondeprobe/sonde/server/ui"
	"github.com/sondeprobe/sonde/server/web"
	"github.com/sondeprobe/sonde/server/web/api"
)

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
	Revision string // the commit sonde was built from
	Shard    string // "0/1"
	TCPPath  string
	Loaded   time.Time // when the running configuration was loaded
	Now      time.Time
	EventSeq uint64 // the newest event when the page was made: the script follows the stream from there
	Pool     string // the pool the page is about, for the script
	Target   string // the target the page is about, for the script
	// Alerts are what is wrong with sonde itself, shown on every page: its
	// state file not saved, warnings about its configuration.
	Alerts []string
}

func (h *Handler) pageBase(g *view, page, title string) pageBase {
	version, revision := g.Build()
	b := pageBase{Page: page, Title: title, Version: version, Revision: revision, Shard: g.Config().Shard.String(), TCPPath: g.TCPPath(),
		Loaded: g.Loaded(), Now: g.Now(), EventSeq: g.LastEvent()}
	if a := g.StateAlert(); a != "" {
		b.Alerts = append(b.Alerts, a)
	}
	for _, w := range g.Config().Warnings {
		b.Alerts = append(b.Alerts, "Configuration: "+w.String()+".")
	}
	return b
}

// Handler serves the status page from the daemon's snapshots.
type Handler struct {
	snapshot  func() Snapshot
	admitList func(http.ResponseWriter) (http.ResponseWriter, func())
}

// New returns the status page's handler. snapshot returns the daemon's
// state for one request, nil when no configuration runs (the pages answer
// 503); admitList admits a request that walks a pool, as a list request of
// the API does: it returns the writer to use and a release, or a nil
// release when it answered the request itself.
func New(snapshot func() Snapshot, admitList func(http.ResponseWriter) (http.ResponseWriter, func())) *Handler {
	return &Handler{snapshot: snapshot, admitList: admitList}
}

// Routes adds the status page's routes to mux: the pages, their assets and
// GET /api/v1/history, the target view's results.
func (h *Handler) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", h.handleOverview)
	mux.HandleFunc("GET /pool", h.handlePoolPage)
	mux.HandleFunc("GET /target", h.handleTargetPage)
	mux.HandleFunc("GET /events", h.handleEventsPage)
	mux.HandleFunc("GET /discovery", h.handleDiscoveryPage)
	mux.HandleFunc("GET /static/{name}", ui.Static)
	mux.HandleFunc("GET /api/v1/history", h.handleHistory)
}

// running returns a view of the daemon's state now, or answers 503.
func (h *Handler) running(w http.ResponseWriter) *view {
	s := h.snapshot()
	if s == nil {
		http.Error(w, "no configuration running", http.StatusServiceUnavailable)
		return nil
	}
	return &view{s}
}

// view is a snapshot with what the pages make of it.
type view struct{ Snapshot }

// pageError answers a page request that cannot be served with a page that
// says why, and a link back.
func (h *Handler) pageError(w http.ResponseWriter, g *view, status int, err error) {
	data := struct {
		pageBase
		Error string
	}{h.pageBase(g, "error", http.StatusText(status)), err.Error()}
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
	api.PoolJSON
	URL           string
	UnresolvedURL string  // of the pool view listing its unresolved targets
	Interval      float64 // seconds
	Timeout       float64
	Shard         string // "" when the daemon runs every target
	InRot         int    // unhealthy members kept in rotation
	Bar           []barSegment
	Warnings      []string
}

// poolCard describes pool pi with its counts j and its discovery's status
// ds (nil when it has none).
func (g *view) poolCard(pi int, j api.PoolJSON, ds *discovery.PoolStatus) poolCard {
	c := g.Config().Checks[g.Config().Pools[pi].CheckIndex]
	pc := poolCard{PoolJSON: j, URL: "pool?" + url.Values{"name": {j.Name}}.Encode(),
		UnresolvedURL: "pool?" + url.Values{"name": {j.Name}, "outcome": {unresolvedOutcome}}.Encode(),
		Interval:      c.Interval.Seconds(), Timeout: c.Timeout.Seconds()}
	if g.Config().Shard.Shards() > 1 {
		pc.Shard = g.Config().Shard.String()
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
			ui.Count(j.Unhealthy, "the unhealthy target", "all %d unhealthy targets")))
	case pc.InRot > 0:
		pc.Warnings = append(pc.Warnings, fmt.Sprintf("Removal cap: %s in rotation; at most %d%% of the pool may be removed (max_unhealthy_percent).",
			ui.Count(pc.InRot, "1 unhealthy target stays", "%d unhealthy targets stay"), j.MaxUnhealthyPercent))
	}
	if j.Routable == 0 && j.Targets > j.Disabled {
		pc.Warnings = append(pc.Warnings, "No target is routable: this pool receives no traffic.")
	}
	if ds != nil {
		pc.Warnings = append(pc.Warnings, discoveryWarnings(ds, time.Now())...)
	}
	return pc
}

// discoveryWarnings says what is wrong with a pool's discovery at now: its
// failing sources, and an update refused.
func discoveryWarnings(ds *discovery.PoolStatus, now time.Time) []string {
	var out []string
	for _, s := range ds.Sources {
		if s.State != "failing" {
			continue
		}
		w := s.Source + " failing"
		if s.FailingSince != nil {
			w += " since " + ui.WallClock(*s.FailingSince, now)
		}
		if s.LastError != "" {
			w += ": " + s.LastError
		}
		if s.LastUpdate == nil {
			w += " — it has given no targets yet."
		} else {
			w += fmt.Sprintf(" — keeping %s it gave last.", ui.Count(s.Targets, "the 1 target", "the %d targets"))
		}
		out = append(out, w)
	}
	if ds.Refused != "" {
		out = append(out, "Discovery update refused: "+ds.Refused+".")
	}
	return out
}

// poolDiscovery returns the discovery status of the pool called name; nil
// when it discovers nothing.
func (g *view) poolDiscovery(name string) *discovery.PoolStatus {
	for _, ps := range g.Discovery() {
		if ps.Pool == name {
			return &ps
		}
	}
	return nil
}

// poolCards describes every pool, with the discovery status ds.
func (g *view) poolCards(ds []discovery.PoolStatus) []poolCard {
	byName := make(map[string]*discovery.PoolStatus, len(ds))
	for i := range ds {
		byName[ds[i].Pool] = &ds[i]
	}
	cards := make([]poolCard, len(g.Pools()))
	for pi := range cards {
		cards[pi] = g.poolCard(pi, g.PoolSummary(pi), byName[g.Pools()[pi].Name])
	}
	return cards
}

// eventView is an event as the pages list it.
type eventView struct {
	api.Event
	Pool string // the pool its target link opens: the first of its pools
	URL  string // of the target's view; "" for an event without a target
}

func eventViews(evs []api.Event) []eventView {
	out := make([]eventView, len(evs))
	for i, e := range evs {
		out[i] = eventView{Event: e}
		if len(e.Pools) > 0 {
			out[i].Pool = e.Pools[0]
			if e.Target != "" {
				out[i].URL = targetURL(e.Pools[0], e.Target, e.Host)
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
func (g *view) recentEvents(n int, keep func(*api.Event) bool) recentList {
	return recentList{List: eventViews(g.Events(n, keep)), Keep: n}
}

func (h *Handler) handleOverview(w http.ResponseWriter, r *http.Request) {
	g := h.running(w)
	if g == nil {
		return
	}
	w, release := h.admitList(w) // a list of every pool, as /api/v1/pools
	if release == nil {
		return
	}
	defer release()
	ui.Render(w, http.StatusOK, "overview", struct {
		pageBase
		Pools  []poolCard
		Events recentList
	}{h.pageBase(g, "overview", "Overview"), g.poolCards(g.Discovery()), g.recentEvents(overviewEvents, nil)})
}

// poolIndex returns the index of the pool called name.
func (g *view) poolIndex(name string) (int, error) {
	for pi, p := range g.Pools() {
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

func (h *Handler) handlePoolPage(w http.ResponseWriter, r *http.Request) {
	g := h.running(w)
	if g == nil {
		return
	}
	name := r.URL.Query().Get("name")
	pi, err := g.poolIndex(name)
	if err != nil {
		h.pageError(w, g, http.StatusNotFound, err)
		return
	}
	q, err := parsePoolQuery(r.URL.Query())
	if err != nil {
		h.pageError(w, g, http.StatusBadRequest, err)
		return
	}
	w, release := h.admitList(w) // a pass over the pool, as a list request
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
	outcomes = append(outcomes, unresolvedOutcome)
	for i := range list.Rows {
		q.labelLinks(name, list.Rows[i].Labels)
	}
	names := g.Config().Pools[pi].LabelNames()
	hint := "NAME=VALUE"
	if len(names) > 0 {
		hint = names[0] + "=…"
	}
	pj := g.PoolSummary(pi)
	base := h.pageBase(g, "pool", "Pool "+name)
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
		LabelNames []string // the pool's, offered by the label filter
		LabelHint  string
		LabelsKey  string // the label filters, for the script to tell when they changed
	}{
		pageBase: base, Card: g.poolCard(pi, pj, g.poolDiscovery(name)), Query: q, Rows: list.Rows, First: list.First, Last: last, Total: list.Total,
		PrevURL: page("before", list.Prev), NextURL: page("after", list.Next), FirstURL: page("", nil), Heads: heads,
		States:     choices(memberStates, list.States, q.State),
		Outcomes:   choices(outcomes, list.Outcomes, q.Outcome),
		Routes:     choices(memberRoutes, list.Routes, q.Route),
		Limits:     []int{50, 100, 500, 1000},
		LabelNames: names, LabelHint: hint, LabelsKey: url.Values{"label": q.Labels}.Encode(),
	})
}

// labelLinks gives the labels of a row of pool's view links that add the
// label to q's filters, or take it out when q filters by it already. A
// label whose name the filter syntax cannot say (one with "=" in it) gets
// none.
func (q *poolQuery) labelLinks(pool string, ls []labelView) {
	for i := range ls {
		l := &ls[i]
		f := l.Name + "=" + l.Value
		if n, _, eq, err := config.ParseLabelMatch(f); err != nil || n != l.Name || !eq {
			continue
		}
		v := q.values()
		v.Set("name", pool)
		if l.On = slices.Contains(q.Labels, f); l.On {
			v["label"] = slices.DeleteFunc(v["label"], func(s string) bool { return s == f })
		} else {
			v.Add("label", f)
		}
		l.URL = "pool?" + v.Encode()
	}
}

// targetRef is a target a page names: member m of pool pi, or (m < 0)
// the pool's unresolved target u.
type targetRef struct{ pi, m, u int }

// findTarget finds target in pool pi: a member by "address:port" (the one
// called host when several names share the address), else an unresolved
// target by its "host:port" (or host), else the member that a name, given
// as "host:port" or host, resolved to since — so a link to an unresolved
// target leads to it once it resolves.
func (g *view) findTarget(pi int, target, host string) (targetRef, error) {
	ref := targetRef{pi: pi, m: -1, u: -1}
	p := g.Pools()[pi]
	if target == "" {
		return ref, errors.New("target=: want the address:port of a target, or the host:port of one listed by name")
	}
	if ap, err := netip.ParseAddrPort(target); err == nil {
		for m, id := range p.Members {
			if g.Config().Targets[id].AddrPort() != ap {
				continue
			}
			if ref.m < 0 {
				ref.m = m
			}
			if host == "" || g.Config().Hostnames[id] == host {
				ref.m = m
				break
			}
		}
		if ref.m >= 0 {
			return ref, nil
		}
	}
	cp := g.Config().Pools[pi]
	for i := range cp.Unresolved {
		if targetsel.Unresolved(&cp.Unresolved[i]) == target {
			ref.u = i
			return ref, nil
		}
	}
	name, port := target, ""
	if h, pt, err := net.SplitHostPort(target); err == nil {
		name, port = h, pt
	}
	if len(g.Config().Hostnames) > 0 {
		for m, id := range p.Members {
			if g.Config().Hostnames[id] == name && (port == "" || strconv.Itoa(int(g.Config().Targets[id].Port)) == port) {
				ref.m = m
				return ref, nil
			}
		}
	}
	return ref, fmt.Errorf("pool %q has no target %s", p.Name, target)
}

// lookupTarget reads pool=, target= and host= of r.
func (g *view) lookupTarget(r *http.Request) (targetRef, error) {
	q := r.URL.Query()
	pi, err := g.poolIndex(q.Get("pool"))
	if err != nil {
		return targetRef{}, err
	}
	return g.findTarget(pi, q.Get("target"), q.Get("host"))
}

// setting is one row of the target view's settings table.
type setting struct{ Name, Value string }

// checkSettings lists what the target view shows of check c.
func checkSettings(c *config.Check) []setting {
	s := settings.Of(c)
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

func (h *Handler) handleTargetPage(w http.ResponseWriter, r *http.Request) {
	g := h.running(w)
	if g == nil {
		return
	}
	ref, err := g.lookupTarget(r)
	if err != nil {
		h.pageError(w, g, http.StatusNotFound, err)
		return
	}
	if ref.m < 0 {
		h.unresolvedPage(w, g, ref)
		return
	}
	pi, m := ref.pi, ref.m
	p := g.Pools()[pi]
	id := p.Members[m]
	route, pref := g.Route(pi, m)
	mb := member{m: m, id: id, route: route, pref: pref, st: g.Status(id)}
	mb.state = stateIndex(p, route, mb.st)
	clock := g.Clock()
	off := wallOffset(clock)
	view := g.memberView(pi, &mb, off)
	(&poolQuery{Sort: sortColumns[0], Limit: defaultPoolPage}).labelLinks(p.Name, view.Labels)

	results, recorded := g.History(id)
	slices.Reverse(results)
	results = results[:min(len(results), targetResults)]

	var pools []poolRoute
	g.PoolsOf(id, func(pj int) {
		mj, _ := slices.BinarySearch(g.Pools()[pj].Members, id)
		rt, _ := g.Route(pj, mj)
		pools = append(pools, poolRoute{Name: g.Pools()[pj].Name, URL: "pool?" + url.Values{"name": {g.Pools()[pj].Name}}.Encode(),
			Route: rt.String(), Current: pj == pi})
	})
	c := g.Config().Checks[g.Config().Targets[id].Check]
	rtt := c.Timeout
	if mb.st.Smoothed > 0 {
		rtt = mb.st.Smoothed
	}
	var certExpiry time.Time
	if exp := g.CertExpiry(id); exp != 0 {
		certExpiry = time.Unix(exp, 0).UTC()
	}
	var passive *api.PassiveJSON
	if p, ok := g.Passive(id); ok {
		passive = &p
	}
	events := g.recentEvents(targetEvents, func(e *api.Event) bool {
		return e.Target == view.Target && slices.Contains(e.Pools, p.Name)
	})
	base := h.pageBase(g, "target", view.Target)
	base.Pool, base.Target = p.Name, view.Target
	ui.Render(w, http.StatusOK, "target", struct {
		pageBase
		M           memberView
		PoolURL     string
		Pools       []poolRoute
		Settings    []setting
		W1, W2      float64
		CertExpiry  time.Time
		Passive     *api.PassiveJSON
		Results     []api.HistoryResult
		Recorded    bool
		Capacity    int
		Events      recentList
		IntervalSec float64
		HistoryURL  string
	}{
		pageBase: base, M: view, PoolURL: "pool?" + url.Values{"name": {p.Name}}.Encode(), Pools: pools,
		Settings: checkSettings(c), W1: c.FailureWindow().Seconds(), W2: c.SuccessWindow(rtt).Seconds(),
		CertExpiry: certExpiry, Passive: passive, Results: results, Recorded: recorded, Capacity: g.HistoryCapacity(), Events: events,
		IntervalSec: c.Interval.Seconds(),
		HistoryURL:  "api/v1/history?" + strings.TrimPrefix(view.URL, "target?"),
	})
}

// unresolvedPage shows a target that cannot be probed yet: why, since
// when, when its name is looked up again, its labels and its check.
func (h *Handler) unresolvedPage(w http.ResponseWriter, g *view, ref targetRef) {
	cp := g.Config().Pools[ref.pi]
	u := cp.Unresolved[ref.u]
	view := g.unresolvedView(ref.pi, ref.u)
	(&poolQuery{Sort: sortColumns[0], Limit: defaultPoolPage}).labelLinks(cp.Name, view.Labels)
	// The names table knows the next lookup: the pool's copy keeps the
	// schedule of the lookup that made it.
	if ds := g.poolDiscovery(cp.Name); ds != nil {
		if f, ok := lookupsOf(ds.Unresolved)[unresolvedKey{u.Host, u.Port}]; ok {
			u.Since, u.Next, view.Error = f.Since, f.Next, f.Err
		}
	}
	view.Since = u.Since
	now := g.Now()
	nextIn := ""
	if u.Next.After(now) {
		nextIn = ui.Ago(now, u.Next.Add(time.Second-1)) // whole seconds, rounded up
	}
	c := g.Config().Checks[cp.CheckIndex]
	base := h.pageBase(g, "target", view.Target)
	base.Pool, base.Target = cp.Name, view.Target
	ui.Render(w, http.StatusOK, "target", struct {
		pageBase
		M        memberView
		PoolURL  string
		IsName   bool      // Host is a host name, looked up again and again
		Next     time.Time // the name's next lookup
		NextIn   string    // how long until Next; "" when it is due
		Host     string
		Settings []setting
	}{
		pageBase: base, M: view, PoolURL: "pool?" + url.Values{"name": {cp.Name}}.Encode(),
		IsName: !isAddr(u.Host), Next: u.Next, NextIn: nextIn, Host: u.Host, Settings: checkSettings(c),
	})
}

// handleHistory answers GET /api/v1/history?pool=&target=: the target's
// recent results. Asking for them keeps them (see server/history).
func (h *Handler) handleHistory(w http.ResponseWriter, r *http.Request) {
	g := h.running(w)
	if g == nil {
		return
	}
	ref, err := g.lookupTarget(r)
	if err == nil && ref.m < 0 {
		err = fmt.Errorf("target %s of pool %q has no address to probe yet, so no results", r.URL.Query().Get("target"), g.Pools()[ref.pi].Name)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	pi, m := ref.pi, ref.m
	p := g.Pools()[pi]
	id := p.Members[m]
	route, _ := g.Route(pi, m)
	results, recorded := g.History(id)
	web.WriteJSON(w, api.HistoryJSON{
		Target: g.Config().Targets[id].AddrPort().String(), Pool: p.Name, Check: g.Config().Checks[g.Config().Targets[id].Check].Name,
		Recorded: recorded, Capacity: g.HistoryCapacity(), State: memberState(p, route, g.Status(id)),
		Results: results,
	})
}

func (h *Handler) handleEventsPage(w http.ResponseWriter, _ *http.Request) {
	g := h.running(w)
	if g == nil {
		return
	}
	ui.Render(w, http.StatusOK, "events", struct {
		pageBase
		Events recentList
		Kinds  []string
		Pools  []string
	}{h.pageBase(g, "events", "Events"), g.recentEvents(eventsPage, nil), api.EventKinds, poolNames(g)})
}

// sourceView is a discovery source as the discovery page lists it.
type sourceView struct {
	discovery.SourceStatus
	DroppedText string // "relabel 3, bad address 1"
}

// unresolvedRow is a name of the discovery page that does not resolve.
type unresolvedRow struct {
	Target, URL, Error string
	Since, Next        time.Time
}

// discoveryView is a pool as the discovery page shows it.
type discoveryView struct {
	Name, URL  string
	Sources    []sourceView
	Names      int
	Targets    int
	Unresolved []unresolvedRow
	Refused    string
	// PendingSince is when newer targets than those the pool runs were
	// found, while they are being applied.
	PendingSince *time.Time
}

// handleDiscoveryPage lists every pool's discovery sources and host names:
// how each source is doing, what it gives, and the names that do not
// resolve, as /api/v1/discovery does.
func (h *Handler) handleDiscoveryPage(w http.ResponseWriter, _ *http.Request) {
	g := h.running(w)
	if g == nil {
		return
	}
	var pools []discoveryView
	var static []string
	for _, ps := range g.Discovery() {
		if len(ps.Sources) == 0 && ps.Names == 0 {
			static = append(static, ps.Pool)
			continue
		}
		v := discoveryView{Name: ps.Pool, URL: "pool?" + url.Values{"name": {ps.Pool}}.Encode(),
			Names: ps.Names, Targets: ps.Targets, Refused: ps.Refused, PendingSince: ps.PendingSince}
		for _, s := range ps.Sources {
			v.Sources = append(v.Sources, sourceView{SourceStatus: s, DroppedText: droppedText(s.Dropped)})
		}
		// The pool's targets that cannot be probed, names and others, with
		// the names' lookups as the runner has them now.
		var unresolved []discovery.Unresolved
		if pi, err := g.poolIndex(ps.Pool); err == nil {
			unresolved = g.Config().Pools[pi].Unresolved
		}
		now := lookupsOf(ps.Unresolved)
		for i := range unresolved {
			u := unresolved[i]
			if f, ok := now[unresolvedKey{u.Host, u.Port}]; ok {
				u.Err, u.Since, u.Next = f.Err, f.Since, f.Next
			}
			t := targetsel.Unresolved(&u)
			v.Unresolved = append(v.Unresolved, unresolvedRow{Target: t, URL: targetURL(ps.Pool, t, ""), Error: u.Err, Since: u.Since, Next: u.Next})
		}
		pools = append(pools, v)
	}
	if pools == nil {
		static = nil // the page says it all
	}
	ui.Render(w, http.StatusOK, "discovery", struct {
		pageBase
		Pools  []discoveryView
		Static []string
	}{h.pageBase(g, "discovery", "Discovery"), pools, static})
}

// unresolvedKey names an unresolved target: its host and port.
type unresolvedKey struct {
	host string
	port uint16
}

// lookupsOf indexes the unresolved targets of a pool as the discovery
// runner has them now (their names' latest lookups), by host and port.
func lookupsOf(list []discovery.Unresolved) map[unresolvedKey]*discovery.Unresolved {
	m := make(map[unresolvedKey]*discovery.Unresolved, len(list))
	for i := range list {
		if k := (unresolvedKey{list[i].Host, list[i].Port}); m[k] == nil {
			m[k] = &list[i] // the first of a repeated one, as a search would find
		}
	}
	return m
}

// isAddr reports whether s is an IP address.
func isAddr(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// droppedText says how many targets a source dropped for each reason.
func droppedText(dropped map[string]int) string {
	reasons := slices.Sorted(maps.Keys(dropped))
	parts := make([]string, 0, len(reasons))
	for _, r := range reasons {
		parts = append(parts, fmt.Sprintf("%s %d", r, dropped[r]))
	}
	return strings.Join(parts, ", ")
}

func poolNames(g *view) []string {
	out := make([]string, len(g.Pools()))
	for i, p := range g.Pools() {
		out[i] = p.Name
	}
	return out
}
