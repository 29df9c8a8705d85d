package history

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
)

// histEngine returns an engine of n targets, never run: the history reads
// their state from it.
func histEngine(t *testing.T, n int) *scheduler.Engine {
	t.Helper()
	specs := make([]scheduler.TargetSpec, n)
	for i := range specs {
		specs[i] = scheduler.TargetSpec{Leader: uint32(i)}
	}
	timing := scheduler.Timing{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}
	e, err := scheduler.New([]scheduler.Check{{Timing: timing, Launcher: idleLauncher{}}}, specs, scheduler.Options{Shards: 1, Clock: scheduler.NewSimClock(time.Unix(1e9, 0))})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// idleLauncher sends no probe: the engines of these tests never run.
type idleLauncher struct{}

func (idleLauncher) Launch(int, []probe.Request) {}

// newTestHistory returns a history of slots rings of results entries over
// an index of n targets, adopted as the running one.
func newTestHistory(slots, results, n int) (*History, *Index) {
	h := New(slots, results)
	ix := NewIndex(n)
	h.Adopt(nil, ix, nil)
	return h, ix
}

func result(o probe.Outcome, at int64, lat time.Duration) *probe.Result {
	r := &probe.Result{Outcome: o, Done: at, Latency: lat}
	if o == probe.HTTPStatus {
		r.Status = 503
	}
	return r
}

func outcomesOf(h *History, ix *Index, id uint32) []string {
	var out []string
	for _, r := range h.Read(ix, id, nil) {
		out = append(out, probe.Outcome(r.data>>histOutcomeShft&0xff).String())
	}
	return out
}

// TestHistoryRing checks that a target's ring keeps its newest results,
// oldest first, with what the page shows of each.
func TestHistoryRing(t *testing.T) {
	t.Parallel()
	e := histEngine(t, 1)
	h, ix := newTestHistory(2, 4, 1)
	for i := range 6 {
		o := probe.Success
		if i%2 == 1 {
			o = probe.HTTPStatus
		}
		h.Record(ix, 0, result(o, int64(i+1)*int64(time.Second), time.Duration(i+1)*time.Millisecond), e)
	}
	got := h.Read(ix, 0, nil)
	if len(got) != 4 {
		t.Fatalf("%d results kept, want the ring's 4", len(got))
	}
	clock := scheduler.NewSimClock(time.Unix(1e9, 0))
	for i, r := range got {
		n := i + 3 // results 3..6 are kept
		if r.at != int64(n)*int64(time.Second) {
			t.Errorf("result %d at %d, want %ds", i, r.at, n)
		}
		hr := r.Result(clock)
		wantOutcome, wantStatus := "success", 0
		if (n-1)%2 == 1 {
			wantOutcome, wantStatus = "http_status", 503
		}
		if hr.Outcome != wantOutcome || hr.Status != wantStatus || hr.LatencySeconds != float64(n)/1000 || hr.State != "unknown" {
			t.Errorf("result %d = %+v, want %s %d after %dms, state unknown", i, hr, wantOutcome, wantStatus, n)
		}
	}
}

// TestHistoryBudget checks who gets a ring when there are fewer rings than
// targets: the first targets while rings are free, then failing targets in
// place of targets neither failing nor viewed for historyKeep, and a viewed
// target in any case.
func TestHistoryBudget(t *testing.T) {
	t.Parallel()
	e := histEngine(t, 5)
	h, ix := newTestHistory(2, 8, 5)
	now := int64(time.Hour)
	ok := func(id uint32) { h.Record(ix, id, result(probe.Success, now, time.Millisecond), e) }
	fail := func(id uint32) { h.Record(ix, id, result(probe.Timeout, now, time.Second), e) }
	has := func(id uint32) bool { return len(h.Read(ix, id, nil)) > 0 }

	ok(0)
	ok(1)
	ok(2) // no ring left
	if !has(0) || !has(1) || has(2) {
		t.Fatalf("rings of 0, 1, 2: %v %v %v; want the first two targets", has(0), has(1), has(2))
	}
	fail(2) // takes the ring of a healthy target
	if !has(2) {
		t.Fatal("a failing target got no ring in place of a healthy one")
	}
	fail(0)
	fail(1)
	fail(3) // every ring is kept by a recent failure: 3 gets none, and backs off
	if has(3) {
		t.Fatal("a failing target took the ring of a target that failed just now")
	}
	if h.noVictimUntil.Load() <= now {
		t.Error("a search that found no ring did not back off")
	}
	if had := h.View(ix, 4, now); had {
		t.Error("view of a target without a ring reported one")
	}
	if !h.View(ix, 4, now) {
		t.Error("a viewed target did not get a ring")
	}
	ok(4)
	if !has(4) {
		t.Error("a viewed target's result was not kept")
	}
	// After historyKeep without failures, a failing target may take a ring.
	now += int64(historyKeep) + int64(time.Second)
	h.noVictimUntil.Store(0)
	fail(3)
	if !has(3) {
		t.Error("a failing target got no ring after the others' keep ran out")
	}
}

// TestHistoryEvictedWriter checks that results a target records after it
// lost its ring to another never show in the other's history.
func TestHistoryEvictedWriter(t *testing.T) {
	t.Parallel()
	e := histEngine(t, 2)
	h, ix := newTestHistory(1, 8, 2)
	h.Record(ix, 0, result(probe.Success, 1, 0), e)
	h.View(ix, 1, 2) // takes target 0's ring
	h.Record(ix, 0, result(probe.Refused, 3, 0), e)
	h.Record(ix, 1, result(probe.Timeout, 4, 0), e)
	if got := outcomesOf(h, ix, 1); len(got) != 1 || got[0] != "timeout" {
		t.Errorf("history of target 1 = %v, want only its own timeout", got)
	}
	if got := outcomesOf(h, ix, 0); len(got) != 0 {
		t.Errorf("history of target 0 = %v after losing its ring, want none", got)
	}
}

// TestHistoryAdopt checks that an edit of the engine keeps the rings of the
// targets it keeps, at their ids, frees those of the targets it removes, and
// that a removed target's late result, recorded through the index the edit
// replaced, takes no ring its id's next target could inherit.
func TestHistoryAdopt(t *testing.T) {
	t.Parallel()
	e := histEngine(t, 4)
	h, old := newTestHistory(4, 8, 3)
	for id := range uint32(3) {
		h.Record(old, id, result(probe.Success, int64(id+1), 0), e)
	}
	next := NewIndex(4) // the engine grew by one id
	h.Adopt(old, next, []uint32{1})
	for _, id := range []uint32{0, 2} {
		if got := h.Read(next, id, nil); len(got) != 1 || got[0].at != int64(id+1) {
			t.Errorf("history of kept target %d = %+v, want its one result at %d", id, got, id+1)
		}
	}
	if got := h.Read(next, 1, nil); len(got) != 0 {
		t.Errorf("history of removed target 1 = %+v, want none", got)
	}
	if h.nfree.Load() != 2 {
		t.Errorf("%d rings free, want the removed target's and the one never used", h.nfree.Load())
	}
	// The removed target's last result comes in through the old index.
	h.Record(old, 1, result(probe.Refused, 5, 0), e)
	if h.View(old, 1, 10) || h.Read(old, 1, nil) != nil {
		t.Error("the replaced index still gets rings")
	}
	// A new target is given id 1 by a later edit: its history is its own.
	h.Adopt(next, NewIndex(4), nil)
	h.Record(h.current, 1, result(probe.Timeout, 6, 0), e)
	if got := outcomesOf(h, h.current, 1); len(got) != 1 || got[0] != "timeout" {
		t.Errorf("history of the target given id 1 = %v, want only its own timeout", got)
	}
}

// TestHistoryConcurrent records, views and reads at once, for the race
// detector, and checks that every read entry is whole: one writer per
// target records latency = 1 ms × its Done, so a torn entry would show.
func TestHistoryConcurrent(t *testing.T) {
	t.Parallel()
	const targets, rounds = 8, 2000
	e := histEngine(t, targets)
	h, ix := newTestHistory(4, 16, targets)
	var wg sync.WaitGroup
	for id := range uint32(targets) {
		wg.Go(func() {
			for i := range int64(rounds) {
				o := probe.Success
				if i%3 == 0 {
					o = probe.Timeout
				}
				h.Record(ix, id, result(o, i, time.Duration(i)*time.Millisecond), e)
			}
		})
	}
	stop := make(chan struct{})
	var rd sync.WaitGroup
	rd.Go(func() {
		for n := int64(0); ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			id := uint32(n % targets)
			h.View(ix, id, n)
			for _, r := range h.Read(ix, id, nil) {
				if us := r.data & (1<<histLatencyBits - 1); us != uint64(r.at)*1000 {
					t.Errorf("torn entry of target %d: at %d, latency %d µs", id, r.at, us)
					return
				}
			}
		}
	})
	wg.Wait()
	close(stop)
	rd.Wait()
}

// TestHistoryRecordAllocations checks that recording allocates nothing, for
// a target with a ring and one without: it runs for every probe result.
func TestHistoryRecordAllocations(t *testing.T) {
	e := histEngine(t, 2)
	h, ix := newTestHistory(1, 8, 2)
	r := result(probe.Success, 1, time.Millisecond)
	h.Record(ix, 0, r, e) // claims the ring: allocates it once
	for _, id := range []uint32{0, 1} {
		if n := testing.AllocsPerRun(1000, func() { h.Record(ix, id, r, e) }); n != 0 {
			t.Errorf("target %d: %v allocations per result, want 0", id, n)
		}
	}
}

// BenchmarkHistoryRecord measures the cost a probe result pays: for a
// target with a ring and for one without.
func BenchmarkHistoryRecord(b *testing.B) {
	e := histEngine(&testing.T{}, 2)
	h, ix := newTestHistory(1, 240, 2)
	r := result(probe.Success, 1, time.Millisecond)
	h.Record(ix, 0, r, e)
	for _, c := range []struct {
		name string
		id   uint32
	}{{"ring", 0}, {"none", 1}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				h.Record(ix, c.id, r, e)
			}
		})
	}
}

// TestHistIndexChurn checks the index against a map while many more ids
// than it has room for come and go, as rings pass from target to target
// over a long run: it answers every id right, and compacts itself instead
// of filling up.
func TestHistIndexChurn(t *testing.T) {
	t.Parallel()
	const rings = 16
	ix := NewIndex(rings)
	want := map[uint32]int32{}
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 20000 {
		id := uint32(rng.IntN(1 << 20))
		v := int32(0)
		if len(want) < rings || rng.IntN(2) == 0 {
			v = int32(rng.IntN(rings) + 1)
		}
		if v == 0 {
			for k := range want { // take a ring away
				id = k
				break
			}
		}
		ix.store(id, v, rings)
		if v == 0 {
			delete(want, id)
		} else {
			if len(want) >= rings { // stay within the rings: drop another
				for k := range want {
					if k != id {
						ix.store(k, 0, rings)
						delete(want, k)
						break
					}
				}
			}
			want[id] = v
		}
		if step%997 == 0 {
			for k, v := range want {
				if got := ix.load(k); got != v {
					t.Fatalf("step %d: id %d has %d, want %d", step, k, got, v)
				}
			}
			if got := ix.load(1<<21 + uint32(step)); got != 0 {
				t.Fatalf("an id never stored has %d", got)
			}
		}
	}
	if n := len(*ix.t.Load()); n != 64 {
		t.Errorf("table of %d entries after the churn, want it compacted at 64", n)
	}
}
