package server

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/server/web/api"
)

// TestHistoryFollowsEngineIDs checks the rings through the daemon's edits,
// which keep target ids: across a reload and a pool update, a kept target
// keeps what it recorded; a removed target's ring is freed and a result the
// engine still applies to it is not kept; and a new target given the
// removed one's id starts with a history of its own. The engine is stopped
// and stepped by hand, so that the removal is applied (and the id free
// again) exactly when the test says.
func TestHistoryFollowsEngineIDs(t *testing.T) {
	t.Parallel()
	conf := func(targets string) string {
		return fmt.Sprintf(`
checks:
  tcp: {protocol: tcp, port: 9, tcp_mode: connect, interval: 1h, timeout: 1s}
pools:
  - {name: p, check: tcp, targets: [%s]}
`, targets)
	}
	td := startDaemonWith(t, conf(`"127.3.0.1", "127.3.0.2"`), func(o *Options) {
		o.Clock = scheduler.NewSimClock(time.Unix(1e9, 0))
		o.Shards = 1 // a freed id is the next one given out
	})
	d := td.d
	d.cancel() // the engine stops; the test steps it
	<-d.done
	const a, b, c, x = "127.3.0.1:9", "127.3.0.2:9", "127.3.0.3:9", "127.3.0.4:9"
	idOf := func(addr string) uint32 {
		t.Helper()
		tj, ok := td.target(t, "p", addr)
		if !ok {
			t.Fatalf("no target %s", addr)
		}
		return tj.ID
	}
	// record hands the observer results of target addr (by id) with HTTP
	// status code, which no probe of a TCP check has: they are told apart
	// from the probes' own results.
	record := func(id uint32, code, n int) {
		for range n {
			d.obs.Result(id, probe.Result{ID: id, Outcome: probe.HTTPStatus, Status: uint16(code), Done: d.opt.Clock.Nanotime()})
		}
	}
	history := func(addr string) map[int]int { // results by status code
		t.Helper()
		var h api.HistoryJSON
		td.getJSON(t, "/api/v1/history?"+url.Values{"pool": {"p"}, "target": {addr}}.Encode(), &h)
		out := map[int]int{}
		for _, r := range h.Results {
			out[r.Status]++
		}
		return out
	}
	owned := d.hist.Owns
	edited := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		d.engine.Step(d.opt.Clock.Nanotime()) // the shard applies the edit
	}

	ida, idb := idOf(a), idOf(b)
	record(ida, 501, 3)
	record(idb, 502, 2)
	if h := history(b); h[502] != 2 {
		t.Fatalf("history of %s before the reload: %v, want 2 results of status 502", b, h)
	}

	// A reload removes b: a keeps its id and history, b's ring is freed,
	// and b's late result is not kept.
	td.rewrite(t, conf(`"127.3.0.1"`))
	edited("reload", d.Reload())
	record(idb, 502, 1)
	if owned(idb) {
		t.Errorf("target %s removed by a reload still has a ring", b)
	}
	if got := idOf(a); got != ida {
		t.Fatalf("kept target %s: id %d, want %d", a, got, ida)
	}
	if h := history(a); h[501] != 3 {
		t.Errorf("history of kept target %s after the reload: %v, want its 3 results of status 501", a, h)
	}

	// Discovery adds c, which is given b's id: its history is its own.
	edited("add "+c, discover(d, "p", c))
	if idc := idOf(c); idc != idb {
		t.Fatalf("added target %s: id %d, want %s's freed id %d", c, idc, b, idb)
	}
	record(idb, 503, 1)
	if h := history(c); h[502] != 0 || h[503] != 1 {
		t.Errorf("history of %s, given %s's id: %v, want its one result of status 503 and none of %s's 502", c, b, h, b)
	}

	// Discovery loses c, then finds x,, given c's id by the next one.
	edited("remove "+c, discover(d, "p"))
	if owned(idb) {
		t.Errorf("target %s removed by a pool update still has a ring", c)
	}
	edited("add "+x, discover(d, "p", x))
	if idx := idOf(x); idx != idb {
		t.Fatalf("added target %s: id %d, want the freed id %d", x, idx, idb)
	}
	if h := history(x); h[502]+h[503] != 0 {
		t.Errorf("history of %s, given the id of removed targets: %v, want none of theirs", x, h)
	}
	if h := history(a); h[501] != 3 {
		t.Errorf("history of %s after the pool updates: %v, want its 3 results of status 501", a, h)
	}
}
