package status

import (
	"bytes"
	"cmp"
	"container/heap"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/policy"
	"github.com/sondeprobe/sonde/server/apiv1/targetsel"
)

// The pool view's listing: its members filtered, sorted by one column and
// cut into pages with cursors (the key of the row a page ends at), so a
// page costs one pass over the pool, no allocation per member, and memory
// for one page, whatever the pool's size; and a cursor stays right while
// members change state, unlike an offset.

// Limits of a pool view page.
const (
	defaultPoolPage = 100
	maxPoolPage     = 1000
)

// memberState is the state of a pool member as the API and the status page
// name it: its health state, or disabled (excluded in this pool) or
// unprobed (the pool's health checks are off).
func memberState(p *policy.Pool, route policy.Route, st scheduler.TargetStatus) string {
	return memberStates[stateIndex(p, route, st)]
}

// stateIndex is memberState as an index of memberStates, which is also the
// order of states in a sort: the troubled first.
func stateIndex(p *policy.Pool, route policy.Route, st scheduler.TargetStatus) int {
	switch {
	case route == policy.Excluded:
		return 3
	case p.Unprobed:
		return 4
	case st.State == scheduler.Unhealthy:
		return 0
	case st.State == scheduler.Healthy:
		return 2
	}
	return 1
}

// memberStates and memberRoutes are the values of the pool view's filters,
// in the order its menus list them.
var (
	memberStates = []string{"unhealthy", "unknown", "healthy", "disabled", "unprobed"}
	memberRoutes = []string{"removed", "pending", "routed", "excluded"}
	notProbed    = "none" // the outcome filter's value for members without a result
	// unresolvedOutcome is the outcome of a pool's unresolved targets: they
	// have no address to probe (see config.Pool.Unresolved).
	unresolvedOutcome = "unresolved"
)

// Indexes of the outcome counts of a pass beyond the probe outcomes.
const (
	outcomeNone       = int(probe.NumOutcomes)
	outcomeUnresolved = outcomeNone + 1
)

// routeNames returns the routes' names indexed by policy.Route.
func routeNames() []string {
	out := make([]string, policy.Excluded+1)
	for r := range out {
		out[r] = policy.Route(r).String()
	}
	return out
}

// sortColumns are the columns the pool view sorts by; the first is the
// default.
var sortColumns = []string{"target", "state", "route", "outcome", "status", "error", "streak", "latency", "since"}

// poolQuery is what the pool view asks for: filters, order and page.
type poolQuery struct {
	State, Outcome, Route string                 // "" for any
	Text                  string                 // in the address, host name or error text, ignoring case
	Labels                []string               // label= filters as given, as the API takes them
	labels                targetsel.LabelMatches // Labels, parsed
	Sort                  string                 // one of sortColumns
	Desc                  bool
	After, Before         *rowKey // a page after or before this row; nil for the first
	Limit                 int
}

// parsePoolQuery reads a pool view's query parameters: state=, outcome=,
// route=, q=, label= (repeated; empty ones, a form's blank fields, are
// left out), sort=, desc=1, after=, before=, limit=.
func parsePoolQuery(v url.Values) (poolQuery, error) {
	q := poolQuery{State: v.Get("state"), Outcome: v.Get("outcome"), Route: v.Get("route"),
		Text: strings.TrimSpace(v.Get("q")), Sort: v.Get("sort"), Desc: v.Get("desc") == "1", Limit: defaultPoolPage}
	if q.State != "" && !slices.Contains(memberStates, q.State) {
		return q, fmt.Errorf("state=%q: want one of %s", q.State, strings.Join(memberStates, ", "))
	}
	if q.Route != "" && !slices.Contains(memberRoutes, q.Route) {
		return q, fmt.Errorf("route=%q: want one of %s", q.Route, strings.Join(memberRoutes, ", "))
	}
	if q.Outcome != "" && q.Outcome != notProbed && q.Outcome != unresolvedOutcome {
		if _, err := probe.ParseOutcome(q.Outcome); err != nil {
			return q, fmt.Errorf("outcome=%q: want a probe outcome (success, timeout, refused…), %s or %s", q.Outcome, notProbed, unresolvedOutcome)
		}
	}
	for _, l := range v["label"] {
		if strings.TrimSpace(l) != "" {
			q.Labels = append(q.Labels, l)
		}
	}
	var err error
	if q.labels, err = targetsel.ParseLabelMatches(q.Labels); err != nil {
		return q, err
	}
	if q.Sort == "" {
		q.Sort = sortColumns[0]
	} else if !slices.Contains(sortColumns, q.Sort) {
		return q, fmt.Errorf("sort=%q: want one of %s", q.Sort, strings.Join(sortColumns, ", "))
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPoolPage {
			return q, fmt.Errorf("limit=%q: want a whole number 1..%d", s, maxPoolPage)
		}
		q.Limit = n
	}
	for _, c := range []struct {
		name string
		to   **rowKey
	}{{"after", &q.After}, {"before", &q.Before}} {
		s := v.Get(c.name)
		if s == "" {
			continue
		}
		k, err := parseRowKey(s)
		if err != nil {
			return q, fmt.Errorf("%s=%q: want the cursor of a page link", c.name, s)
		}
		*c.to = &k
	}
	if q.After != nil && q.Before != nil {
		return q, errors.New("after= and before= together: give one")
	}
	return q, nil
}

// values returns the query's parameters, without the page cursors.
func (q *poolQuery) values() url.Values {
	v := url.Values{}
	for _, p := range [][2]string{{"state", q.State}, {"outcome", q.Outcome}, {"route", q.Route}, {"q", q.Text}} {
		if p[1] != "" {
			v.Set(p[0], p[1])
		}
	}
	if len(q.Labels) > 0 {
		v["label"] = slices.Clone(q.Labels)
	}
	if q.Sort != sortColumns[0] {
		v.Set("sort", q.Sort)
	}
	if q.Desc {
		v.Set("desc", "1")
	}
	if q.Limit != defaultPoolPage {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// rowKey orders a pool's rows for one sort column: by n, then s, then
// address and port, then host name (a pool may probe one address by several
// names; an unresolved target has only its name, "host:port", and no
// address), so the order is total.
type rowKey struct {
	n    int64
	s    string
	addr [18]byte // address (16 bytes, IPv4 mapped) and port, big-endian
	host string
}

func compareRowKeys(a, b *rowKey) int {
	return cmp.Or(cmp.Compare(a.n, b.n), strings.Compare(a.s, b.s), bytes.Compare(a.addr[:], b.addr[:]), strings.Compare(a.host, b.host))
}

// String encodes the key as a cursor: "N.S.ADDR", or "N.S.ADDR.HOST" with a
// host name, S, ADDR and HOST in base64url.
func (k *rowKey) String() string {
	c := strconv.FormatInt(k.n, 10) + "." + base64.RawURLEncoding.EncodeToString([]byte(k.s)) + "." +
		base64.RawURLEncoding.EncodeToString(k.addr[:])
	if k.host != "" {
		c += "." + base64.RawURLEncoding.EncodeToString([]byte(k.host))
	}
	return c
}

func parseRowKey(c string) (rowKey, error) {
	var k rowKey
	parts := strings.Split(c, ".")
	if len(parts) != 3 && len(parts) != 4 {
		return k, errors.New("want three or four parts")
	}
	if len(parts) == 4 {
		h, err := base64.RawURLEncoding.DecodeString(parts[3])
		if err != nil || len(h) == 0 {
			return k, errors.New("bad host name")
		}
		k.host = string(h)
	}
	n, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return k, err
	}
	s, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return k, err
	}
	a, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(a) != len(k.addr) {
		return k, errors.New("bad address")
	}
	k.n, k.s = n, string(s)
	copy(k.addr[:], a)
	return k, nil
}

func addrKey(ap netip.AddrPort) (k [18]byte) {
	a := ap.Addr().As16()
	copy(k[:], a[:])
	k[16], k[17] = byte(ap.Port()>>8), byte(ap.Port())
	return k
}

// routeRank orders routes in a sort: the troubled first.
var routeRank = [...]int64{policy.Removed: 0, policy.Pending: 1, policy.Routed: 2, policy.Excluded: 3}

// member is what a pass over a pool reads of one row: a member, or one of
// the pool's unresolved targets.
type member struct {
	m     int // index in the pool's members
	u     int // index+1 in the pool's unresolved targets; 0 for a member
	id    uint32
	route policy.Route
	pref  bool
	st    scheduler.TargetStatus // of an unresolved target: Since alone
	state int                    // index of memberStates
	err   string                 // read only when a filter or the order needs it; always for an unresolved target
}

// key returns m's key for column col; addr is its addrKey (an unresolved
// target's: a zero address and its port) and host its host name.
func (m *member) key(col string, addr [18]byte, host string) rowKey {
	k := rowKey{addr: addr, host: host}
	switch col {
	case "target":
		if m.u > 0 {
			k.n = 1 // after the members, as the API lists them
		}
	case "state":
		k.n = int64(m.state)
	case "route":
		k.n = routeRank[m.route]
	case "outcome":
		k.n = -1
		switch {
		case m.u > 0:
			k.n = int64(outcomeUnresolved)
		case m.st.Probed:
			k.n = int64(m.st.LastOutcome)
		}
	case "status":
		k.n = int64(m.st.LastStatus)
	case "error":
		k.s = m.err
	case "streak":
		k.n = int64(m.st.Streak)
	case "latency":
		k.n = int64(m.st.Latency)
		if m.st.Latency == 0 {
			k.n = 1<<63 - 1 // no latency: last
		}
	case "since":
		k.n = m.st.Since
	}
	return k
}

// poolListing is one page of a pool view.
type poolListing struct {
	Rows     []memberView
	First    int // position of the first row among the matching members, from 1
	Total    int // members matching the filters
	Prev     *rowKey
	Next     *rowKey
	States   map[string]int // rows by state, before filtering
	Routes   map[string]int // rows by route, before filtering
	Outcomes map[string]int // rows by last outcome (notProbed for none, unresolvedOutcome), before filtering
}

// listPool returns the page of pool pi's rows that q asks for: its members,
// then its unresolved targets, filtered, in q's order.
func (g *view) listPool(pi int, q *poolQuery) poolListing {
	p := g.Pools()[pi]
	cp := g.Config().Pools[pi]
	out := poolListing{States: map[string]int{}, Routes: map[string]int{}, Outcomes: map[string]int{}}
	state, route, outcome := -1, -1, -1 // the filters, as indexes; -1 for any
	if q.State != "" {
		state = slices.Index(memberStates, q.State)
	}
	if q.Route != "" {
		route = slices.Index(routeNames(), q.Route)
	}
	switch q.Outcome {
	case "":
	case notProbed:
		outcome = outcomeNone
	case unresolvedOutcome:
		outcome = outcomeUnresolved
	default:
		o, _ := probe.ParseOutcome(q.Outcome) // checked by parsePoolQuery
		outcome = int(o)
	}
	var states [5]int
	var routes [policy.Excluded + 1]int
	var outcomes [outcomeUnresolved + 1]int
	back := q.Before != nil
	cursor := q.After
	if back {
		cursor = q.Before
	}
	// A page before the cursor holds the rows nearest to it: walk backwards.
	best := &pageHeap{reverse: q.Desc != back}
	needErr := q.Text != "" || q.Sort == "error"
	text := strings.ToLower(q.Text)
	var buf []byte
	skipped := 0 // matching rows on the other side of the cursor
	// offer counts a row that passed the filters and keeps it if it
	// belongs on the page.
	var row pageRow
	offer := func() {
		out.Total++
		if cursor != nil && best.order(&row.key, cursor) <= 0 {
			skipped++
			return
		}
		best.offer(&row, q.Limit)
	}
	for m, id := range p.Members {
		rt, pref := g.Route(pi, m)
		mb := member{m: m, id: id, route: rt, pref: pref, st: g.Status(id)}
		mb.state = stateIndex(p, rt, mb.st)
		o := outcomeNone
		if mb.st.Probed {
			o = int(mb.st.LastOutcome)
		}
		states[mb.state]++
		routes[rt]++
		outcomes[o]++
		if state >= 0 && state != mb.state || route >= 0 && route != int(rt) || outcome >= 0 && outcome != o {
			continue
		}
		if len(q.labels) > 0 && !q.labels.Matches(cp.MemberLabels(m)) {
			continue
		}
		ap := g.Config().Targets[id].AddrPort()
		var host string
		if len(g.Config().Hostnames) > 0 {
			host = g.Config().Hostnames[id]
		}
		if needErr && mb.st.Probed && !mb.st.LastOutcome.Healthy() {
			mb.err = g.LastError(id)
		}
		if text != "" {
			buf = ap.AppendTo(buf[:0])
			if !containsFold(string(buf), text) && !containsFold(host, text) && !containsFold(mb.err, text) {
				continue
			}
		}
		row.key, row.mb = mb.key(q.Sort, addrKey(ap), host), mb
		offer()
	}
	clock := g.Clock()
	off := wallOffset(clock) // wall = Unix(0, ns) + off
	// The unresolved targets: unknown, excluded, never probed.
	for i := range cp.Unresolved {
		u := &cp.Unresolved[i]
		states[1]++
		routes[policy.Excluded]++
		outcomes[outcomeUnresolved]++
		if state >= 0 && state != 1 || route >= 0 && route != int(policy.Excluded) || outcome >= 0 && outcome != outcomeUnresolved {
			continue
		}
		if len(q.labels) > 0 && !q.labels.Matches(u.Labels) {
			continue
		}
		if text != "" {
			buf = targetsel.AppendHostPort(buf[:0], u.Host, u.Port)
			if !containsFold(string(buf), text) && !containsFold(u.Err, text) {
				continue
			}
		}
		mb := member{u: i + 1, route: policy.Excluded, state: 1, err: u.Err}
		mb.st.Since = 1<<63 - 1 // unknown: last
		if !u.Since.IsZero() {
			mb.st.Since = u.Since.UnixNano() - int64(off)
		}
		row.key, row.mb = mb.key(q.Sort, addrKey(netip.AddrPortFrom(netip.IPv6Unspecified(), u.Port)), u.Host), mb
		offer()
	}
	for i, n := range states {
		out.States[memberStates[i]] = n
	}
	for r, n := range routes {
		out.Routes[policy.Route(r).String()] = n
	}
	for o, n := range outcomes {
		switch o {
		case outcomeNone:
			out.Outcomes[notProbed] = n
		case outcomeUnresolved:
			out.Outcomes[unresolvedOutcome] = n
		default:
			out.Outcomes[probe.Outcome(o).String()] = n
		}
	}
	rows := best.sorted()
	if back {
		slices.Reverse(rows)
	}
	for i := range rows {
		out.Rows = append(out.Rows, g.memberView(pi, &rows[i].mb, off))
	}
	if back {
		out.First = out.Total - skipped - len(rows) + 1
	} else {
		out.First = skipped + 1
	}
	if len(rows) > 0 {
		if out.First > 1 {
			out.Prev = &rows[0].key
		}
		if out.First-1+len(rows) < out.Total {
			out.Next = &rows[len(rows)-1].key
		}
	}
	return out
}

// wallOffset returns what turns clock's readings into wall time: Unix(0,
// ns) + offset. It is the same in every pass over a pool (see
// scheduler.WallTime), so the keys it makes of wall times stay put.
func wallOffset(clock scheduler.Clock) time.Duration {
	return scheduler.WallTime(clock, 0).Sub(time.Unix(0, 0))
}

// containsFold reports whether s contains lower, a lower-case string,
// ignoring the case of ASCII letters in s, without allocating.
func containsFold(s, lower string) bool {
	if lower == "" {
		return true
	}
	for i := 0; i+len(lower) <= len(s); i++ {
		j := 0
		for j < len(lower) {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != lower[j] {
				break
			}
			j++
		}
		if j == len(lower) {
			return true
		}
	}
	return false
}

// pageRow is a candidate row of a page.
type pageRow struct {
	key rowKey
	mb  member
}

// pageHeap keeps the limit rows that come first in order: a heap whose
// root is the last of them, replaced when a row that comes before it is
// offered.
type pageHeap struct {
	rows    []pageRow
	reverse bool // order by descending keys
}

// order compares keys in the heap's order.
func (h *pageHeap) order(a, b *rowKey) int {
	if h.reverse {
		return compareRowKeys(b, a)
	}
	return compareRowKeys(a, b)
}

func (h *pageHeap) Len() int           { return len(h.rows) }
func (h *pageHeap) Less(i, j int) bool { return h.order(&h.rows[i].key, &h.rows[j].key) > 0 }
func (h *pageHeap) Swap(i, j int)      { h.rows[i], h.rows[j] = h.rows[j], h.rows[i] }
func (h *pageHeap) Push(any)           { panic("pageHeap: rows are added by offer") }
func (h *pageHeap) Pop() any           { panic("pageHeap: rows are never removed") }

func (h *pageHeap) offer(r *pageRow, limit int) {
	switch {
	case len(h.rows) < limit:
		h.rows = append(h.rows, *r)
		heap.Fix(h, len(h.rows)-1) // sifts the new row up, without boxing it as Push would
	case h.order(&r.key, &h.rows[0].key) < 0:
		h.rows[0] = *r
		heap.Fix(h, 0)
	}
}

// sorted returns the rows kept, first in order first.
func (h *pageHeap) sorted() []pageRow {
	slices.SortFunc(h.rows, func(a, b pageRow) int { return h.order(&a.key, &b.key) })
	return h.rows
}

// memberView is one row of a pool as the status page shows it: a member,
// or one of its unresolved targets.
type memberView struct {
	Target    string // address:port; host:port (or host) of an unresolved target
	Host      string
	Pool      string
	URL       string // of its target view
	State     string
	Route     string
	Preferred bool
	Probed    bool
	Outcome   string // "" when not probed; unresolvedOutcome for an unresolved target
	Status    int
	Error     string
	Streak    int
	Latency   time.Duration // of the last successful probe; 0 for none
	Smoothed  time.Duration
	Since     time.Time
	LastProbe time.Time
	Labels    []labelView
	// Unresolved is set for a target the pool cannot probe yet; Since is
	// then when its name was first looked up (zero when it is no name).
	Unresolved bool
}

// labelView is one label of a target, and the pool view's link that
// filters by it (or, when the view filters by it, stops filtering).
type labelView struct {
	Name, Value string
	URL         string
	On          bool
}

// labelViews returns ls as the pages show them, without links.
func labelViews(ls labels.Labels) []labelView {
	if ls.IsEmpty() {
		return nil
	}
	out := make([]labelView, 0, ls.Len())
	ls.Range(func(l labels.Label) { out = append(out, labelView{Name: l.Name, Value: l.Value}) })
	return out
}

// memberView fills the view of mb, a row of pool pi; off turns the
// engine's Nanotime into wall time.
func (g *view) memberView(pi int, mb *member, off time.Duration) memberView {
	if mb.u > 0 {
		return g.unresolvedView(pi, mb.u-1)
	}
	t := g.Config().Targets[mb.id]
	v := memberView{
		Target: t.AddrPort().String(), Host: g.Config().Hostnames[mb.id], Pool: g.Pools()[pi].Name,
		State: memberStates[mb.state], Route: mb.route.String(), Preferred: mb.pref, Probed: mb.st.Probed,
		Streak: mb.st.Streak, Latency: mb.st.Latency, Smoothed: mb.st.Smoothed,
		Since:  time.Unix(0, mb.st.Since).Add(off),
		Labels: labelViews(g.Config().Pools[pi].MemberLabels(mb.m)),
	}
	v.URL = targetURL(v.Pool, v.Target, v.Host)
	if mb.st.Probed {
		v.Outcome = mb.st.LastOutcome.String()
		v.Status = int(mb.st.LastStatus)
		v.LastProbe = time.Unix(0, mb.st.LastProbe).Add(off)
		if !mb.st.LastOutcome.Healthy() {
			v.Error = mb.err
			if v.Error == "" {
				v.Error = g.LastError(mb.id)
			}
		}
	}
	return v
}

// unresolvedView is the view of the i-th unresolved target of pool pi.
func (g *view) unresolvedView(pi, i int) memberView {
	u := &g.Config().Pools[pi].Unresolved[i]
	v := memberView{
		Target: targetsel.Unresolved(u), Pool: g.Pools()[pi].Name, State: memberStates[1], Route: policy.Excluded.String(),
		Outcome: unresolvedOutcome, Error: u.Err, Since: u.Since, Labels: labelViews(u.Labels), Unresolved: true,
	}
	v.URL = targetURL(v.Pool, v.Target, "")
	return v
}

// targetURL is the address of a target's view, relative to the page root;
// host, when not "", tells apart targets at one address under several
// names.
func targetURL(pool, target, host string) string {
	v := url.Values{"pool": {pool}, "target": {target}}
	if host != "" {
		v.Set("host", host)
	}
	return "target?" + v.Encode()
}
