package policy

import (
	"cmp"
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/internal/ring"
)

// RouteKind tells what a [RouteEvent] reports.
type RouteKind uint8

// The kinds of route events.
const (
	// RouteChanged: a member's route changed (From → To), for example
	// removed under the max_unhealthy_percent cap or put back (P1).
	RouteChanged RouteKind = iota
	// PreferredChanged: a member entered or left its pool's preferred set
	// (E7); On says which.
	PreferredChanged
	// FailOpenChanged: the pool started or stopped failing open (P2); On
	// says which.
	FailOpenChanged
)

var routeKindNames = [...]string{RouteChanged: "route", PreferredChanged: "preferred", FailOpenChanged: "fail_open"}

// String returns "route", "preferred" or "fail_open".
func (k RouteKind) String() string { return routeKindNames[k] }

// RouteCause says what made a pool's decision change.
type RouteCause uint8

// The causes of route events.
const (
	CauseState    RouteCause = iota // the member's own state changed
	CauseCap                        // another member's change moved the max_unhealthy_percent cap (P1)
	CauseFailOpen                   // the pool started or stopped failing open (P2)
	CauseLatency                    // the pool's members were ranked again by latency (E7)
)

var causeNames = [...]string{CauseState: "state", CauseCap: "max_unhealthy_percent", CauseFailOpen: "fail_open", CauseLatency: "latency"}

// String returns "state", "max_unhealthy_percent", "fail_open" or "latency".
func (c RouteCause) String() string { return causeNames[c] }

// RouteEvent is a change of one pool's traffic decision.
type RouteEvent struct {
	Kind   RouteKind
	Pool   int    // index of the pool in the slice given to [NewRouter]
	Target uint32 // the member concerned; for FailOpenChanged, the member whose state change flipped it
	From   Route  // RouteChanged: the route before
	To     Route  // RouteChanged: the route after
	On     bool   // PreferredChanged: now preferred; FailOpenChanged: now failing open
	Cause  RouteCause
	State  scheduler.State // Target's state when the decision was taken
	At     int64           // Nanotime of the state change or ranking behind the decision
}

// RouteObserver is told about route decisions. Route is called on the
// router's goroutine, one event at a time, in the order the decisions were
// taken; it must be quick and must not call back into the router.
type RouteObserver interface {
	Route(ev RouteEvent)
}

// RouterOptions tune a [Router]. The zero value is usable.
type RouterOptions struct {
	// Observer receives route events; may be nil.
	Observer RouteObserver
	// RankDelay is the least time between two latency rankings of a pool
	// whose healthy set changed (E7); default 1 s.
	RankDelay time.Duration
	// RankEvery is the longest time between two latency rankings of a pool
	// with healthy members, so the preferred set follows latency drift;
	// default 10 s.
	RankEvery time.Duration
	// RingSize is the number of state-change notices the router can queue;
	// default the number of targets, between 1024 and 65536. A notice that
	// finds the ring full makes the router re-read every target instead.
	RingSize int
}

// Router keeps the traffic decisions of pools (P1–P3, E7) current as target
// states change, and reports every change as a [RouteEvent]: a member
// removed or put back, a pool failing open or no longer, a member entering
// or leaving the preferred set.
//
// Ownership: [Router.Notify] is called by the engine's observer on shard
// goroutines when a target changes state; it only pushes the target's id
// into a lock-free ring, so a state change costs a shard one push and a
// probe costs it nothing. One goroutine, [Router.Run] (or the caller of
// [Router.Step] in simulations), owns everything else: it reads the new
// state from the engine, applies the pool policy and calls the observer.
// Readers ([Router.Summary], [Router.Route], [Router.Routes]) load published
// atomics and are safe for concurrent use.
type Router struct {
	e     *scheduler.Engine
	obs   RouteObserver
	opt   RouterOptions
	pools []*poolRoute

	first []uint16            // per target, index+1 of the first pool listing it, 0 for none
	more  map[uint32][]uint16 // targets in several pools: the other pools
	state []scheduler.State   // per target, the state the decisions were taken with
	sick  map[uint32]int64    // per unhealthy target, when it became so: the key of its entries in the pools' sick lists; only unhealthy targets are in it

	in      *ring.Ring[uint32]
	lost    atomic.Bool // a notice found the ring full: re-read every target
	parked  atomic.Bool
	wake    chan struct{}
	now     int64
	pending []RouteEvent // events of the decision being taken
}

// poolRoute is the router's state of one pool.
type poolRoute struct {
	p     *Pool
	index int

	enabled, healthy, unhealthy, unknown, preferred int
	failOpen                                        bool // never for an unprobed pool

	// sick holds the unhealthy members by (since, id), oldest first, with
	// dead entries left by members that recovered until the next
	// compaction. The live entries of sick[:cut] are the removed members:
	// the ones unhealthy longest, up to the policy's cap.
	sick    []sickEntry
	dead    int
	cut     int
	removed int

	flags     []atomic.Uint32 // per member, routeBits bits each, memberFlags to a word
	summary   atomic.Pointer[PoolSummary]
	changed   bool  // summary to publish
	rankDirty bool  // the healthy set changed since the last ranking
	lastRank  int64 // Nanotime of the last ranking
}

type sickEntry struct {
	since int64
	id    uint32
	dead  bool
}

// A member's published flags: its route and whether it is preferred.
const (
	routeBits     = 4
	routeMask     = 0x3
	flagPreferred = 0x4
	memberMask    = 1<<routeBits - 1
	memberFlags   = 32 / routeBits
)

// maxPark bounds how long an idle router sleeps, so it notices a stopped
// context even with no ranking due.
const maxPark = time.Second

// noMember is an id no target has.
const noMember = ^uint32(0)

// compactAbove is the number of dead entries beyond which sick is compacted
// once they are half of it.
const compactAbove = 64

// NewRouter returns a router over pools, whose members are targets of e,
// with every decision taken from the members' current states (after any
// [scheduler.Engine.Restore]) and no event reported for them. Call it before
// e runs and start [Router.Run] with it.
func NewRouter(e *scheduler.Engine, pools []*Pool, opt RouterOptions) *Router {
	if opt.RankDelay <= 0 {
		opt.RankDelay = time.Second
	}
	if opt.RankEvery <= 0 {
		opt.RankEvery = 10 * time.Second
	}
	if opt.RingSize <= 0 {
		opt.RingSize = min(max(e.Len(), 1024), 1<<16)
	}
	n := e.Len()
	r := &Router{
		e:     e,
		obs:   opt.Observer,
		opt:   opt,
		first: make([]uint16, n),
		state: make([]scheduler.State, n),
		sick:  map[uint32]int64{},
		in:    ring.New[uint32](opt.RingSize),
		wake:  make(chan struct{}, 1),
		now:   e.Clock().Nanotime(),
	}
	for id := range n {
		st := e.Status(uint32(id))
		r.state[id] = st.State
		if st.State == scheduler.Unhealthy {
			r.sick[uint32(id)] = st.Since
		}
	}
	for pi, p := range pools {
		pr := &poolRoute{p: p, index: pi, flags: make([]atomic.Uint32, (len(p.Members)+memberFlags-1)/memberFlags), lastRank: r.now}
		r.pools = append(r.pools, pr)
		p.Each(func(id uint32, disabled bool) {
			if r.first[id] == 0 {
				r.first[id] = uint16(pi + 1)
			} else {
				if r.more == nil {
					r.more = map[uint32][]uint16{}
				}
				r.more[id] = append(r.more[id], uint16(pi))
			}
		})
		r.initPool(pr)
	}
	return r
}

// initPool takes pr's decisions from the members' states, silently.
func (r *Router) initPool(pr *poolRoute) {
	pr.p.Each(func(id uint32, disabled bool) {
		m := pr.member(id)
		if disabled {
			pr.setFlags(m, uint32(Excluded))
			return
		}
		pr.enabled++
		if pr.p.Unprobed { // routed whatever its state, never decided again
			pr.setFlags(m, uint32(Routed))
			return
		}
		switch r.state[id] {
		case scheduler.Healthy:
			pr.healthy++
			pr.setFlags(m, uint32(Routed))
		case scheduler.Unhealthy:
			pr.unhealthy++
			pr.sick = append(pr.sick, sickEntry{since: r.sick[id], id: id})
			pr.setFlags(m, uint32(Routed))
		default:
			pr.unknown++
			pr.setFlags(m, uint32(Pending))
		}
	})
	slices.SortFunc(pr.sick, compareSick)
	pr.failOpen = pr.failingOpen()
	r.pending = r.pending[:0]
	r.rebalance(pr, noMember, CauseCap)
	r.pending = r.pending[:0] // decisions at start are not events
	if !pr.p.Unprobed {
		r.rank(pr, false)
	}
	pr.publish()
}

func compareSick(a, b sickEntry) int {
	return cmp.Or(cmp.Compare(a.since, b.since), cmp.Compare(a.id, b.id))
}

// Notify tells the router that target id changed state. It is safe for
// concurrent use, never blocks and allocates nothing.
func (r *Router) Notify(id uint32) {
	if !r.in.Push(&id) {
		r.lost.Store(true)
	}
	if r.parked.Load() && r.parked.CompareAndSwap(true, false) {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// Step applies every state change notified so far and ranks the pools whose
// ranking is due at now, and returns the Nanotime of the next ranking due.
// It is for simulations with a [scheduler.SimClock]; do not mix it with Run.
func (r *Router) Step(now int64) int64 {
	r.now = now
	if r.lost.Swap(false) {
		var id uint32
		for r.in.Pop(&id) {
		}
		for id := range r.state {
			r.apply(uint32(id))
		}
	}
	var id uint32
	for r.in.Pop(&id) {
		r.apply(id)
	}
	next := int64(-1)
	for _, pr := range r.pools {
		due := pr.lastRank + int64(r.opt.RankEvery)
		if pr.rankDirty {
			due = min(due, pr.lastRank+int64(r.opt.RankDelay))
		}
		if !pr.p.Unprobed && (pr.healthy > 0 || pr.preferred > 0) {
			if due <= now {
				r.rank(pr, true)
				due = now + int64(r.opt.RankEvery)
			}
			if next < 0 || due < next {
				next = due
			}
		}
		if pr.changed {
			pr.publish()
		}
	}
	return next
}

// Run applies state changes as they are notified and ranks pools when due,
// until ctx is done.
func (r *Router) Run(ctx context.Context) {
	clock := r.e.Clock()
	timer := time.NewTimer(maxPark)
	defer timer.Stop()
	for ctx.Err() == nil {
		next := r.Step(clock.Nanotime())
		wait := maxPark
		if next >= 0 {
			wait = min(wait, time.Duration(next-clock.Nanotime()))
		}
		if wait <= 0 {
			continue
		}
		r.parked.Store(true)
		if !r.in.Empty() || r.lost.Load() {
			r.parked.Store(false)
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
		case <-r.wake:
		case <-timer.C:
		}
		r.parked.Store(false)
	}
}

// apply takes target id's current state from the engine and updates the
// decisions of every pool that lists it. Notices may repeat or arrive late:
// the engine's state is the truth, and an unchanged state is no change.
func (r *Router) apply(id uint32) {
	if r.first[id] == 0 {
		return
	}
	st := r.e.Status(id)
	from := r.state[id]
	var oldSince int64
	if from == scheduler.Unhealthy {
		oldSince = r.sick[id] // the map holds only the unhealthy: no lookup for the others
	}
	if st.State == from && (from != scheduler.Unhealthy || st.Since == oldSince) {
		return
	}
	r.state[id] = st.State
	switch {
	case st.State == scheduler.Unhealthy:
		r.sick[id] = st.Since
	case from == scheduler.Unhealthy:
		delete(r.sick, id)
	}
	r.change(r.pools[r.first[id]-1], id, from, oldSince, st.Since)
	for _, pi := range r.more[id] {
		r.change(r.pools[pi], id, from, oldSince, st.Since)
	}
}

// change applies member id's change from state from (entered at oldSince)
// to its current state, entered at since, to pool pr, and reports the
// decisions that change: the member's own first, then the pool's, then
// those of other members.
func (r *Router) change(pr *poolRoute, id uint32, from scheduler.State, oldSince, since int64) {
	m := pr.member(id)
	old := pr.loadFlags(m)
	if Route(old&routeMask) == Excluded || pr.p.Unprobed {
		return
	}
	to := r.state[id]
	pr.count(from, -1)
	pr.count(to, 1)
	if from == scheduler.Unhealthy {
		pr.drop(oldSince, id)
	}
	route := Routed
	switch to {
	case scheduler.Unknown:
		route = Pending
	case scheduler.Unhealthy:
		if pr.insert(since, id) {
			route = Removed
		}
	}
	flags := uint32(route)
	if to == scheduler.Healthy {
		flags |= old & flagPreferred // a ranking decides
	}
	if old&flagPreferred != 0 && flags&flagPreferred == 0 {
		pr.preferred--
	}
	pr.setFlags(m, flags)
	if from == scheduler.Healthy || to == scheduler.Healthy {
		pr.rankDirty = true
	}
	pr.changed = true

	cause := CauseCap
	r.pending = r.pending[:0]
	if open := pr.failingOpen(); open != pr.failOpen {
		pr.failOpen = open
		cause = CauseFailOpen
		r.pending = append(r.pending, RouteEvent{Kind: FailOpenChanged, Target: id, On: open})
	}
	r.rebalance(pr, id, cause)
	if now := Route(pr.loadFlags(m) & routeMask); now != Route(old&routeMask) {
		r.emit(pr, RouteEvent{Kind: RouteChanged, Target: id, From: Route(old & routeMask), To: now, Cause: CauseState}, since)
	}
	if old&flagPreferred != 0 && flags&flagPreferred == 0 {
		r.emit(pr, RouteEvent{Kind: PreferredChanged, Target: id, On: false, Cause: CauseState}, since)
	}
	for _, ev := range r.pending {
		r.emit(pr, ev, since)
	}
	r.pending = r.pending[:0]
}

// emit completes ev for pool pr and hands it to the observer.
func (r *Router) emit(pr *poolRoute, ev RouteEvent, at int64) {
	if r.obs == nil {
		return
	}
	ev.Pool, ev.At, ev.State = pr.index, at, r.state[ev.Target]
	r.obs.Route(ev)
}

// rebalance moves the cut in pr.sick until the policy's number of members
// are removed, queueing a route event in r.pending for every member but own
// whose route changes.
func (r *Router) rebalance(pr *poolRoute, own uint32, cause RouteCause) {
	k := pr.p.Policy.Removed(pr.enabled, pr.healthy, pr.unhealthy)
	for pr.removed > k { // put back the member unhealthy for the shortest time
		pr.cut--
		for pr.sick[pr.cut].dead {
			pr.cut--
		}
		pr.removed--
		r.reroute(pr, pr.sick[pr.cut].id, Routed, own, cause)
	}
	for pr.removed < k { // remove the member unhealthy for the longest time
		for pr.cut < len(pr.sick) && pr.sick[pr.cut].dead {
			pr.cut++
		}
		if pr.cut == len(pr.sick) {
			break
		}
		r.reroute(pr, pr.sick[pr.cut].id, Removed, own, cause)
		pr.cut++
		pr.removed++
	}
}

// reroute sets an unhealthy member's route, and queues an event unless the
// member is own (whose event the caller reports) or the route is the same.
func (r *Router) reroute(pr *poolRoute, id uint32, route Route, own uint32, cause RouteCause) {
	m := pr.member(id)
	old := pr.loadFlags(m)
	if Route(old&routeMask) == route {
		return
	}
	pr.setFlags(m, old&^routeMask|uint32(route))
	if id != own {
		r.pending = append(r.pending, RouteEvent{Kind: RouteChanged, Target: id, From: Route(old & routeMask), To: route, Cause: cause})
	}
}

// rank recomputes pr's preferred set: healthy members whose smoothed latency
// is within the fastest one's plus the margin (E7). Members without a
// latency sample are preferred only when no member has one. With report, a
// member entering or leaving the set is an event.
func (r *Router) rank(pr *poolRoute, report bool) {
	pr.lastRank, pr.rankDirty = r.now, false
	var fastest time.Duration
	fastestID := noMember
	pr.p.Each(func(id uint32, disabled bool) {
		if disabled || r.state[id] != scheduler.Healthy {
			return
		}
		if l := r.e.Status(id).Smoothed; l > 0 && (fastest == 0 || l < fastest || l == fastest && id < fastestID) {
			fastest, fastestID = l, id
		}
	})
	margin := pr.p.Policy.LatencyMargin
	for m, id := range pr.p.Members {
		old := pr.loadFlags(m)
		if Route(old&routeMask) == Excluded {
			continue
		}
		want := false
		if r.state[id] == scheduler.Healthy {
			l := r.e.Status(id).Smoothed
			want = fastest == 0 || id == fastestID || (l != 0 && l <= fastest+margin)
		}
		if want == (old&flagPreferred != 0) {
			continue
		}
		if want {
			pr.setFlags(m, old|flagPreferred)
			pr.preferred++
		} else {
			pr.setFlags(m, old&^flagPreferred)
			pr.preferred--
		}
		pr.changed = true
		if report {
			r.emit(pr, RouteEvent{Kind: PreferredChanged, Target: id, On: want, Cause: CauseLatency}, r.now)
		}
	}
}

// member returns the index of target id among pr's members.
func (pr *poolRoute) member(id uint32) int {
	m, _ := slices.BinarySearch(pr.p.Members, id)
	return m
}

func (pr *poolRoute) loadFlags(m int) uint32 {
	return pr.flags[m/memberFlags].Load() >> (m % memberFlags * routeBits) & memberMask
}

// setFlags stores member m's flags. Only the router's goroutine writes, so
// a load and a store suffice.
func (pr *poolRoute) setFlags(m int, f uint32) {
	w := &pr.flags[m/memberFlags]
	shift := m % memberFlags * routeBits
	w.Store(w.Load()&^(memberMask<<shift) | f<<shift)
}

func (pr *poolRoute) count(s scheduler.State, d int) {
	switch s {
	case scheduler.Healthy:
		pr.healthy += d
	case scheduler.Unhealthy:
		pr.unhealthy += d
	default:
		pr.unknown += d
	}
}

func (pr *poolRoute) failingOpen() bool {
	return pr.p.Policy.FailOpen && pr.healthy == 0 && pr.unhealthy > 0
}

// insert adds an unhealthy member in (since, id) order and reports whether
// it lands among the removed ones (it failed before members already removed).
func (pr *poolRoute) insert(since int64, id uint32) bool {
	e := sickEntry{since: since, id: id}
	if n := len(pr.sick); n == 0 || compareSick(pr.sick[n-1], e) < 0 {
		pr.sick = append(pr.sick, e)
		return false
	}
	i, _ := slices.BinarySearchFunc(pr.sick, e, compareSick)
	pr.sick = slices.Insert(pr.sick, i, e)
	if i < pr.cut {
		pr.cut++
		pr.removed++
		return true
	}
	return false
}

// drop marks the entry of member id, unhealthy since since, dead.
func (pr *poolRoute) drop(since int64, id uint32) {
	i, _ := slices.BinarySearchFunc(pr.sick, sickEntry{since: since, id: id}, compareSick)
	for ; i < len(pr.sick) && pr.sick[i].since == since && pr.sick[i].id == id; i++ {
		if pr.sick[i].dead {
			continue
		}
		pr.sick[i].dead = true
		pr.dead++
		if i < pr.cut {
			pr.removed--
		}
		break
	}
	if pr.dead > compactAbove && pr.dead*2 > len(pr.sick) {
		pr.compact()
	}
}

// compact removes the dead entries of sick, keeping the cut after the same
// live entries.
func (pr *poolRoute) compact() {
	j, cut := 0, 0
	for i, e := range pr.sick {
		if i == pr.cut {
			cut = j
		}
		if !e.dead {
			pr.sick[j] = e
			j++
		}
	}
	if pr.cut == len(pr.sick) {
		cut = j
	}
	pr.sick, pr.cut, pr.dead = pr.sick[:j], cut, 0
}

// publish stores pr's counts for readers.
func (pr *poolRoute) publish() {
	s := &PoolSummary{
		Members:   len(pr.p.Members),
		Disabled:  len(pr.p.Members) - pr.enabled,
		Healthy:   pr.healthy,
		Unhealthy: pr.unhealthy,
		Unknown:   pr.unknown,
		Removed:   pr.removed,
		Preferred: pr.preferred,
	}
	if pr.p.Unprobed {
		s.Unprobed = pr.enabled
	}
	s.Routable = s.Healthy + s.Unhealthy - s.Removed + s.Unprobed
	s.FailingOpen = pr.failOpen
	pr.summary.Store(s)
	pr.changed = false
}

// Pools returns the number of pools.
func (r *Router) Pools() int { return len(r.pools) }

// Pool returns pool pi.
func (r *Router) Pool(pi int) *Pool { return r.pools[pi].p }

// FirstPool returns the index of the first pool that lists target id, -1
// for none. With MorePools it tells a target's pools without a table of
// their own: it reads what NewRouter set, and is safe for concurrent use.
func (r *Router) FirstPool(id uint32) int {
	if int(id) >= len(r.first) {
		return -1
	}
	return int(r.first[id]) - 1
}

// MorePools returns the indexes of the pools after the first that list
// target id; nil for most targets. The slice is shared: do not change it.
func (r *Router) MorePools(id uint32) []uint16 {
	if r.more == nil {
		return nil
	}
	return r.more[id]
}

// Summary returns pool pi's counts as of the router's latest decisions.
func (r *Router) Summary(pi int) PoolSummary { return *r.pools[pi].summary.Load() }

// Route returns the route of the m-th member of pool pi and whether it is
// preferred.
func (r *Router) Route(pi, m int) (Route, bool) {
	f := r.pools[pi].loadFlags(m)
	return Route(f & routeMask), f&flagPreferred != 0
}

// Routes returns every member of pool pi with its current status, its route
// and preference as decided, and its latency rank among the healthy routed
// members of a probed pool, computed now (E7). It allocates one slice for the
// answer.
func (r *Router) Routes(pi int) []MemberRoute {
	p := r.pools[pi].p
	out := make([]MemberRoute, len(p.Members))
	var well []*MemberRoute
	for m, id := range p.Members {
		route, pref := r.Route(pi, m)
		out[m] = MemberRoute{ID: id, Status: r.e.Status(id), Route: route, Preferred: pref}
		if route == Routed && !p.Unprobed && out[m].Status.State == scheduler.Healthy {
			well = append(well, &out[m])
		}
	}
	rankByLatency(well)
	return out
}
