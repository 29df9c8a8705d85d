package discovery

import (
	"container/heap"
	"context"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/sondeprobe/sonde/probe/endpoint"
)

// How host names are looked up again. An answer holds for its TTL, kept
// within [MinRefresh, MaxRefresh]; one without a TTL for DefaultRefresh. A
// failed lookup is retried after RetryMin, doubling up to RetryMax.
const (
	MinRefresh     = 5 * time.Second
	MaxRefresh     = time.Hour
	DefaultRefresh = 30 * time.Second
	RetryMin       = time.Second
	RetryMax       = 30 * time.Second
	// LookupTimeout bounds one lookup.
	LookupTimeout = 10 * time.Second
	// lookupsAtOnce bounds the lookups in flight.
	lookupsAtOnce = 8
)

// nameKey is one host name looked up for some address families.
type nameKey struct {
	host string
	fam  endpoint.Family
}

// nameEntry is what is known of one name. Its fields are guarded by the
// table's mutex.
type nameEntry struct {
	key    nameKey
	addrs  []netip.Addr // the last good addresses; kept when a lookup fails
	err    error        // the last lookup's error; nil after a success
	since  time.Time    // when the name was first wanted
	next   time.Time    // when it is looked up next
	fails  int          // failed lookups in a row
	looked bool         // some lookup has finished
	busy   bool         // a lookup is in flight
	pools  map[string]bool
	index  int // in the table's heap
}

// nameHeap orders entries by their next lookup.
type nameHeap []*nameEntry

func (h nameHeap) Len() int           { return len(h) }
func (h nameHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h nameHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *nameHeap) Push(x any) {
	e := x.(*nameEntry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *nameHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

// names is the table of the host names the pools use, looked up again as
// their answers expire. Its methods are safe for concurrent use; the timing
// decisions (due, finish) take the time as an argument so that they can be
// tested with any clock.
type names struct {
	mu      sync.Mutex
	m       map[nameKey]*nameEntry
	h       nameHeap
	changed func(pools []string) // pools whose names' addresses changed
	wake    chan struct{}
}

func newNames(changed func(pools []string)) *names {
	return &names{m: map[nameKey]*nameEntry{}, changed: changed, wake: make(chan struct{}, 1)}
}

// seed records a lookup made before the table knew the name (when the
// configuration was loaded), so that the name is not looked up again before
// its answer expires.
func (n *names) seed(host string, fam endpoint.Family, res endpoint.Resolution) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := nameKey{host, fam}
	if _, ok := n.m[k]; ok {
		return
	}
	e := &nameEntry{key: k, since: res.At, pools: map[string]bool{}}
	n.m[k] = e
	n.record(e, res, res.At)
	heap.Push(&n.h, e)
	n.poke() // run may be waiting with nothing due: it must learn of e's next lookup
}

// use says which names pool uses now; names no pool uses are forgotten, and
// new ones are looked up at once. It returns nothing: the caller reads the
// names with get.
func (n *names) use(pool string, keys map[nameKey]bool, now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k, e := range n.m {
		if e.pools[pool] && !keys[k] {
			delete(e.pools, pool)
			if len(e.pools) == 0 && !e.busy {
				n.forget(e)
			}
		}
	}
	fresh := false
	for k := range keys {
		e, ok := n.m[k]
		if !ok {
			e = &nameEntry{key: k, since: now, next: now, pools: map[string]bool{}}
			n.m[k] = e
			heap.Push(&n.h, e)
			fresh = true
		}
		e.pools[pool] = true
	}
	if fresh {
		n.poke()
	}
}

func (n *names) forget(e *nameEntry) {
	if e.index >= 0 {
		heap.Remove(&n.h, e.index)
	}
	delete(n.m, e.key)
}

func (n *names) poke() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// nameState is what get tells of a name.
type nameState struct {
	addrs  []netip.Addr
	err    error
	since  time.Time
	next   time.Time
	looked bool
}

// get returns what is known of a name.
func (n *names) get(k nameKey) (nameState, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.m[k]
	if !ok {
		return nameState{}, false
	}
	return nameState{addrs: e.addrs, err: e.err, since: e.since, next: e.next, looked: e.looked}, true
}

// due takes the entries whose lookup is due at now, marks them busy and
// returns them, with the time of the next lookup after them (zero when
// none).
func (n *names) due(now time.Time, most int) ([]nameKey, time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []nameKey
	for len(n.h) > 0 && len(out) < most && !n.h[0].next.After(now) {
		e := heap.Pop(&n.h).(*nameEntry)
		e.busy = true
		out = append(out, e.key)
	}
	var next time.Time
	if len(n.h) > 0 {
		next = n.h[0].next
	}
	return out, next
}

// finish records the lookup of k that ended at now, schedules the next one
// and reports the pools whose targets it changed.
func (n *names) finish(k nameKey, res endpoint.Resolution, now time.Time) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.m[k]
	if !ok {
		return nil
	}
	e.busy = false
	if len(e.pools) == 0 {
		n.forget(e)
		return nil
	}
	before, hadErr, looked := e.addrs, e.err != nil, e.looked
	n.record(e, res, now)
	heap.Push(&n.h, e)
	if looked && slices.Equal(before, e.addrs) && hadErr == (e.err != nil) {
		return nil
	}
	pools := make([]string, 0, len(e.pools))
	for p := range e.pools {
		pools = append(pools, p)
	}
	slices.Sort(pools)
	return pools
}

// record stores a lookup's result in e and sets its next lookup: after the
// answer's TTL, or after a backoff when it failed. A failure keeps the last
// good addresses.
func (n *names) record(e *nameEntry, res endpoint.Resolution, now time.Time) {
	e.looked = true
	if res.Err != nil {
		e.err = res.Err
		e.fails++
		e.next = now.Add(retryAfter(e.fails))
		return
	}
	e.addrs, e.err, e.fails = res.Addrs, nil, 0
	e.next = now.Add(refreshAfter(res.TTL))
}

// refreshAfter is how long an answer with ttl holds.
func refreshAfter(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return DefaultRefresh
	}
	return min(max(ttl, MinRefresh), MaxRefresh)
}

// retryAfter is the wait after the fails-th failed lookup in a row.
func retryAfter(fails int) time.Duration {
	d := RetryMin
	for i := 1; i < fails && d < RetryMax; i++ {
		d *= 2
	}
	return min(d, RetryMax)
}

// run looks names up as they fall due until ctx ends.
func (n *names) run(ctx context.Context, r endpoint.Resolver) {
	slots := make(chan struct{}, lookupsAtOnce)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		keys, next := n.due(time.Now(), cap(slots)-len(slots))
		for _, k := range keys {
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				res := endpoint.Lookup(ctx, r, k.host, k.fam, LookupTimeout)
				if ctx.Err() != nil {
					return
				}
				if pools := n.finish(k, res, time.Now()); len(pools) > 0 {
					n.changed(pools)
				}
				n.poke()
			})
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), time.Millisecond)
		}
		if len(slots) == cap(slots) {
			wait = time.Hour // a finishing lookup pokes
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-n.wake:
		case <-timer.C:
		}
	}
}
