package apiv1

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/policy"
	"github.com/sondeprobe/sonde/server/apiv1/targetsel"
	"github.com/sondeprobe/sonde/server/web"
)

// Paging of the list endpoints. A page costs O(page): members are listed in
// id order from a cursor, each one's route, preference and its pool's counts
// read from the router's published decisions, its latency rank from a
// ranking of the pool at most a second old but never rebuilt more often than
// its cost allows (see rankCache), and the page is encoded as it is read,
// straight to the client.
const (
	// DefaultPage is the page size without limit=.
	DefaultPage = 1000
	// MaxPage is the largest page; limit=0 and larger limits get it.
	MaxPage = 10000
	// scanBudget bounds the members one request looks at, so a filter
	// matching few of a million members ends a page early (with a cursor)
	// instead of walking them all.
	scanBudget = 100_000
	// rankMaxAge is how old a pool's latency ranking may be;
	// rankCostFactor times its cost to build is how long it stays in use
	// at least, so ranking a huge pool never takes more than a small share
	// of a CPU.
	rankMaxAge     = time.Second
	rankCostFactor = 20
)

// errGone is returned for a cursor of another pool layout.
var errGone = errors.New("the pools were added, removed, renamed or reordered (or sonde restarted) since this cursor was given; start again without after")

// cursor is where a listing goes on: the pool layout it belongs to, a pool
// (index in configuration order) and the least target id still to list in
// it. Its text is "LAYOUT.POOL.ID".
//
// Target ids survive reloads and pool updates (a target the edit keeps keeps
// its id, see Daemon.Reload), so a cursor stays valid across them as long as
// the pools keep their names and order: every target there throughout the
// listing is listed once; one added, removed or changed meanwhile may be
// listed or not. A change of the pools, or a restart (whose ids are its own),
// gives the daemon another layout, and the cursor is gone (410).
type cursor struct {
	layout uint32
	pool   int
	id     uint32
}

func (c cursor) String() string { return fmt.Sprintf("%d.%d.%d", c.layout, c.pool, c.id) }

// parseCursor reads after= for generation g; "" is the start.
func (g *view) parseCursor(s string) (cursor, error) {
	c := cursor{layout: g.Layout()}
	if s == "" {
		return c, nil
	}
	parts := strings.Split(s, ".")
	var n [3]uint64
	ok := len(parts) == 3
	for i := 0; ok && i < 3; i++ {
		v, err := strconv.ParseUint(parts[i], 10, 32)
		ok, n[i] = err == nil, v
	}
	if !ok {
		return c, fmt.Errorf("after=%q: want the next value of an earlier page", s)
	}
	if uint32(n[0]) != g.Layout() {
		return c, errGone
	}
	if n[1] > uint64(len(g.Pools())) {
		return c, fmt.Errorf("after=%q: want the next value of an earlier page (no pool %d)", s, n[1])
	}
	c.pool, c.id = int(n[1]), uint32(n[2])
	return c, nil
}

// pageLimit reads limit=: absent is DefaultPage, 0 or more than MaxPage is
// MaxPage.
func pageLimit(s string) (int, error) {
	if s == "" {
		return DefaultPage, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("limit=%q: want a whole number ≥ 0 (0 or more than %d: %d)", s, MaxPage, MaxPage)
	}
	if n == 0 || n > MaxPage {
		n = MaxPage
	}
	return n, nil
}

// admitList answers a list request whose parameters are wrong (err: 410 for
// a cursor of another pool layout, 400 otherwise), or admits it among the
// list requests (see server/web, admission.go). It returns the release function, or
// nil when the request was answered.
func (h *Handler) admitList(w http.ResponseWriter, err error) (http.ResponseWriter, func()) {
	switch {
	case errors.Is(err, errGone):
		http.Error(w, err.Error(), http.StatusGone)
		return w, nil
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return w, nil
	}
	return h.enter(w)
}

// targetFilter selects targets for the API.
type targetFilter struct {
	pool   int // -1: every pool
	state  string
	labels targetsel.LabelMatches
	limit  int
	from   cursor
}

func (g *view) parseTargetFilter(r *http.Request) (targetFilter, error) {
	f := targetFilter{pool: -1}
	q := r.URL.Query()
	if q.Has("offset") {
		return f, errors.New("offset= is not supported: follow the next value of each page with after=")
	}
	if name := q.Get("pool"); name != "" {
		for pi, p := range g.Pools() {
			if p.Name == name {
				f.pool = pi
			}
		}
		if f.pool < 0 {
			return f, fmt.Errorf("pool=%q: no such pool", name)
		}
	}
	switch f.state = q.Get("state"); f.state {
	case "", "healthy", "unhealthy", "unknown", "disabled", "unprobed":
	default:
		return f, fmt.Errorf("state=%q: want healthy, unhealthy, unknown, disabled or unprobed", f.state)
	}
	var err error
	if f.labels, err = targetsel.ParseLabelMatches(q["label"]); err != nil {
		return f, err
	}
	if f.limit, err = pageLimit(q.Get("limit")); err != nil {
		return f, err
	}
	if f.from, err = g.parseCursor(q.Get("after")); err != nil {
		return f, err
	}
	if f.pool >= 0 && f.from.pool < f.pool {
		f.from.pool, f.from.id = f.pool, 0
	}
	return f, nil
}

// pools returns the pool indexes f lists.
func (f *targetFilter) pools(g *view) (first, end int) {
	if f.pool >= 0 {
		return f.pool, f.pool + 1
	}
	return 0, len(g.Pools())
}

// total counts the targets f selects, from the pools' snapshots; -1 with
// label filters, which only a walk of the pools could count.
func (f *targetFilter) total(g *view) int {
	if len(f.labels) > 0 {
		return -1
	}
	n := 0
	first, end := f.pools(g)
	for pi := first; pi < end; pi++ {
		s := g.Summary(pi)
		if f.state == "" || f.state == "unknown" {
			n += len(g.Config().Pools[pi].Unresolved)
		}
		switch f.state {
		case "":
			n += s.Members
		case "healthy":
			n += s.Healthy
		case "unhealthy":
			n += s.Unhealthy
		case "unknown":
			n += s.Unknown
		case "disabled":
			n += s.Disabled
		case "unprobed":
			n += s.Unprobed
		}
	}
	return n
}

// listTargets calls emit for the targets of one page and returns where the
// next page starts, or false when the listing is complete.
func (g *view) listTargets(f *targetFilter, emit func(v any) error) (cursor, bool, error) {
	clock := g.Clock()
	first, end := f.pools(g)
	n, scanned := 0, 0
	at := f.from
	var err error
	for pi := max(first, at.pool); pi < end; pi++ {
		p := g.Pools()[pi]
		pos := 0
		if pi == at.pool {
			pos, _ = slices.BinarySearch(p.Members, at.id)
		}
		ranks := g.Ranks(pi)
		stop := false
		cp := g.Config().Pools[pi]
		p.EachFrom(pos, func(pos int, id uint32, disabled bool) bool {
			at = cursor{layout: g.Layout(), pool: pi, id: id + 1}
			scanned++
			if len(f.labels) > 0 && !f.labels.Matches(cp.MemberLabels(pos)) {
				stop = scanned >= scanBudget
				return !stop
			}
			st := g.Status(id)
			state := st.State.String()
			switch {
			case disabled:
				state = "disabled"
			case p.Unprobed:
				state = "unprobed"
			}
			if f.state == "" || f.state == state {
				m := policy.MemberRoute{ID: id, Status: st}
				m.Route, m.Preferred = g.Route(pi, pos)
				if m.Route == policy.Routed && st.State == scheduler.Healthy {
					m.Rank = int(ranks[pos])
				}
				if err = emit(targetJSON(g, pi, pos, m, state, clock)); err != nil {
					stop = true
					return false
				}
				n++
			}
			stop = n >= f.limit || scanned >= scanBudget
			return !stop
		})
		if err != nil {
			return at, false, err
		}
		if stop {
			return at, g.more(at, end), nil
		}
		// The pool's unresolved targets follow its members.
		if f.state == "" || f.state == "unknown" {
			first := 0
			if pi == f.from.pool && f.from.id >= UnresolvedBase {
				first = int(f.from.id - UnresolvedBase)
			}
			for i := first; i < len(cp.Unresolved); i++ {
				at = cursor{layout: g.Layout(), pool: pi, id: UnresolvedBase + uint32(i) + 1}
				if len(f.labels) > 0 && !f.labels.Matches(cp.Unresolved[i].Labels) {
					continue
				}
				if err := emit(unresolvedJSON(g, pi, i)); err != nil {
					return at, false, err
				}
				if n++; n >= f.limit {
					return at, g.more(at, end), nil
				}
			}
		}
	}
	return at, false, nil
}

// more reports whether any member or unresolved target lies at or after c
// in the pools before end.
func (g *view) more(c cursor, end int) bool {
	for pi := c.pool; pi < end; pi++ {
		m, u := g.Pools()[pi].Members, len(g.Config().Pools[pi].Unresolved)
		switch {
		case pi > c.pool && (len(m) > 0 || u > 0):
			return true
		case pi == c.pool && c.id < UnresolvedBase && (len(m) > 0 && m[len(m)-1] >= c.id || u > 0):
			return true
		case pi == c.pool && c.id >= UnresolvedBase && int(c.id-UnresolvedBase) < u:
			return true
		}
	}
	return false
}

func (h *Handler) handleTargets(w http.ResponseWriter, r *http.Request) {
	g := h.running(w)
	if g == nil {
		return
	}
	f, err := g.parseTargetFilter(r)
	w, release := h.admitList(w, err)
	if release == nil {
		return
	}
	defer release()
	var next cursor
	var more bool
	web.StreamList(w, "targets", func(emit func(any) error) (err error) {
		next, more, err = g.listTargets(&f, emit)
		return err
	}, func(field func(string, any) error) error {
		if err := field("total", f.total(g)); err != nil { // targets matching the filters, at the snapshot
			return err
		}
		if err := field("limit", f.limit); err != nil {
			return err
		}
		if more {
			return field("next", next.String())
		}
		return nil
	})
}

func (h *Handler) handlePools(w http.ResponseWriter, r *http.Request) {
	g := h.running(w)
	if g == nil {
		return
	}
	q := r.URL.Query()
	limit, err := pageLimit(q.Get("limit"))
	var from cursor
	if err == nil {
		from, err = g.parseCursor(q.Get("after"))
	}
	w, release := h.admitList(w, err)
	if release == nil {
		return
	}
	defer release()
	end := min(from.pool+limit, len(g.Pools()))
	web.StreamList(w, "pools", func(emit func(any) error) error {
		for pi := from.pool; pi < end; pi++ {
			if err := emit(PoolJSON(g, pi)); err != nil {
				return err
			}
		}
		return nil
	}, func(field func(string, any) error) error {
		if err := field("shard", g.Config().Shard.Index); err != nil { // this process's shard i (sonde run -shard i/N)
			return err
		}
		if err := field("shards", g.Config().Shard.Shards()); err != nil { // N; each pool's numbers are those of this shard's slice
			return err
		}
		if end < len(g.Pools()) {
			return field("next", cursor{layout: g.Layout(), pool: end}.String())
		}
		return nil
	})
}

// RankCache holds a pool's latest latency ranking, for Snapshot.Ranks:
// at most a second old, but never rebuilt more often than its cost allows.
// The zero RankCache is empty.
type RankCache struct {
	mu  sync.Mutex // held while one request ranks
	cur atomic.Pointer[ranking]
}

type ranking struct {
	ranks []uint32 // by member position, see policy.Router.Ranks
	at    time.Time
	took  time.Duration
}

// Ranks returns the pool's latency ranks, ranking it with rank (see
// policy.Router.Ranks) when the latest ranking is too old. While one
// request ranks the pool again, others use the previous ranking.
func (rc *RankCache) Ranks(rank func() []uint32) []uint32 {
	b := rc.cur.Load()
	if b != nil && time.Since(b.at) < max(rankMaxAge, rankCostFactor*b.took) {
		return b.ranks
	}
	if b != nil && !rc.mu.TryLock() {
		return b.ranks // someone is ranking it
	}
	if b == nil {
		rc.mu.Lock()
		if b = rc.cur.Load(); b != nil {
			rc.mu.Unlock()
			return b.ranks
		}
	}
	defer rc.mu.Unlock()
	start := time.Now()
	ranks := rank()
	rc.cur.Store(&ranking{ranks: ranks, at: start, took: time.Since(start)})
	return ranks
}
