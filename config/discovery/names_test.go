package discovery

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/probe/endpoint"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// TestNamesSchedule checks when names are looked up again, with times given
// by the test: after their TTL (bounded), after a backoff that doubles when
// lookups fail, and that a failure keeps the last good addresses.
func TestNamesSchedule(t *testing.T) {
	t.Parallel()
	var changed [][]string
	n := newNames(func(pools []string) { changed = append(changed, pools) })
	k := nameKey{"api.test", endpoint.Any}
	n.use("p", map[nameKey]bool{k: true}, t0)
	n.use("q", map[nameKey]bool{k: true}, t0)
	due, _ := n.due(t0, 8)
	if !slices.Equal(due, []nameKey{k}) {
		t.Fatalf("due at start = %v, want the new name", due)
	}
	if pools := n.finish(k, endpoint.Resolution{Addrs: addrs("192.0.2.1"), TTL: time.Second}, t0); !slices.Equal(pools, []string{"p", "q"}) {
		t.Errorf("first answer changed pools %v, want p and q", pools)
	}
	// A TTL under MinRefresh is raised to it.
	if due, next := n.due(t0.Add(MinRefresh-time.Millisecond), 8); len(due) != 0 || !next.Equal(t0.Add(MinRefresh)) {
		t.Errorf("before MinRefresh: due %v, next %v; want none until %v", due, next, t0.Add(MinRefresh))
	}
	now := t0.Add(MinRefresh)
	if due, _ := n.due(now, 8); len(due) != 1 {
		t.Fatalf("at MinRefresh: due %v, want the name", due)
	}
	// The same answer changes nothing.
	if pools := n.finish(k, endpoint.Resolution{Addrs: addrs("192.0.2.1"), TTL: 2 * time.Hour}, now); pools != nil {
		t.Errorf("an unchanged answer changed pools %v", pools)
	}
	// A TTL over MaxRefresh is cut to it.
	if _, next := n.due(now, 8); !next.Equal(now.Add(MaxRefresh)) {
		t.Errorf("next lookup %v, want %v", next, now.Add(MaxRefresh))
	}
	// Failures: the addresses stay, retries back off 1, 2, 4 ... 30 s.
	now = now.Add(MaxRefresh)
	fail := endpoint.Resolution{Err: errors.New("cannot resolve")}
	var waits []time.Duration
	for range 7 {
		due, _ := n.due(now, 8)
		if len(due) != 1 {
			t.Fatalf("at %v: due %v, want the name", now, due)
		}
		pools := n.finish(k, fail, now)
		if len(waits) == 0 && !slices.Equal(pools, []string{"p", "q"}) {
			t.Errorf("the first failure changed pools %v, want p and q (its error shows)", pools)
		}
		if len(waits) > 0 && pools != nil {
			t.Errorf("a repeated failure changed pools %v", pools)
		}
		_, next := n.due(now, 8)
		waits = append(waits, next.Sub(now))
		now = next
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, RetryMax, RetryMax}
	if !slices.Equal(waits, want) {
		t.Errorf("retry waits %v, want %v", waits, want)
	}
	st, _ := n.get(k)
	if !slices.Equal(st.addrs, addrs("192.0.2.1")) || st.err == nil {
		t.Errorf("after failures: %+v, want the last good address and the error", st)
	}
	// A name no pool uses is forgotten.
	n.use("p", nil, now)
	n.use("q", nil, now)
	if _, ok := n.get(k); ok {
		t.Error("a name no pool uses is still looked up")
	}
}

// TestNamesSeed checks that a lookup made at load is not made again before
// its answer expires.
func TestNamesSeed(t *testing.T) {
	t.Parallel()
	n := newNames(func([]string) {})
	k := nameKey{"api.test", endpoint.IP4}
	n.seed(k.host, k.fam, endpoint.Resolution{Addrs: addrs("192.0.2.7"), TTL: time.Minute, At: t0})
	n.use("p", map[nameKey]bool{k: true}, t0.Add(time.Second))
	if due, next := n.due(t0.Add(time.Second), 8); len(due) != 0 || !next.Equal(t0.Add(time.Minute)) {
		t.Errorf("seeded name: due %v next %v, want none before %v", due, next, t0.Add(time.Minute))
	}
	if st, _ := n.get(k); !slices.Equal(st.addrs, addrs("192.0.2.7")) {
		t.Errorf("seeded name's addresses %v", st.addrs)
	}
}

// TestNamesSeedWakes checks that seeding a name wakes the lookup loop: run
// may already wait with an empty table (for an hour) when a configuration
// seeds its names, and would then never look a failed one up again.
func TestNamesSeedWakes(t *testing.T) {
	t.Parallel()
	n := newNames(func([]string) {})
	select { // as run, waiting, has taken any earlier wake
	case <-n.wake:
	default:
	}
	n.seed("late.test", endpoint.Any, endpoint.Resolution{Err: errors.New("no such host"), At: t0})
	select {
	case <-n.wake:
	default:
		t.Fatal("seed left the lookup loop asleep: a name that failed at load is never looked up again")
	}
}

// TestNamesDueBounded checks that at most the free lookup slots are taken.
func TestNamesDueBounded(t *testing.T) {
	t.Parallel()
	n := newNames(func([]string) {})
	keys := map[nameKey]bool{}
	for _, h := range []string{"a.test", "b.test", "c.test"} {
		keys[nameKey{h, endpoint.Any}] = true
	}
	n.use("p", keys, t0)
	if due, _ := n.due(t0, 2); len(due) != 2 {
		t.Errorf("due with 2 slots: %v", due)
	}
	if due, _ := n.due(t0, 2); len(due) != 1 {
		t.Errorf("due with the rest: %v, want the third", due)
	}
}
