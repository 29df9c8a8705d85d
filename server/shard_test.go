package server

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/config/fleet"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/server/web/api"
)

// backendIn returns a new backend whose endpoint shard owns among n shards.
func backendIn(t *testing.T, shard, n int) *backend {
	t.Helper()
	for range 200 {
		b := newBackend(t)
		if fleet.ShardOf(netip.MustParseAddrPort(b.addr()), n) == shard {
			return b
		}
	}
	t.Fatalf("no loopback port of shard %d/%d in 200 tries", shard, n)
	return nil
}

// startShard runs a daemon over the config text as one shard.
func startShard(t *testing.T, yaml string, shard config.Shard, log *testenv.SyncBuffer) *testDaemon {
	t.Helper()
	return startDaemonWith(t, yaml, func(o *Options) {
		o.Load = func() (*config.Config, error) {
			return config.Parse([]byte(yaml), "", config.LoadOptions{Shard: shard})
		}
		o.Logger = slog.New(slog.NewTextHandler(log, nil))
		o.Shard = shard
	})
}

type poolsPage struct {
	Shard  int            `json:"shard"`
	Shards int            `json:"shards"`
	Pools  []api.PoolJSON `json:"pools"`
}

// TestDaemonShards runs two shards of one configuration and checks what
// docs/operations.md promises for a pool split across shards: each shard reports
// and decides its own slice; the slices' counts add up to the pool's; a
// slice without a healthy target fails open even while another shard has
// healthy targets of the pool; a pool with no healthy target anywhere
// fails open in every shard, so all its targets stay in rotation (P2).
func TestDaemonShards(t *testing.T) {
	t.Parallel()
	healthy0 := backendIn(t, 0, 2)
	sick1 := []*backend{backendIn(t, 1, 2), backendIn(t, 1, 2)}
	down := []*backend{backendIn(t, 0, 2), backendIn(t, 1, 2)}
	for _, b := range append(sick1, down...) {
		b.failing.Store(true)
	}
	list := func(bs ...*backend) string {
		var s []string
		for _, b := range bs {
			s = append(s, fmt.Sprintf("%q", b.addr()))
		}
		return strings.Join(s, ", ")
	}
	cfg := fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 50ms, timeout: 1s, rise: 1, fall: 1}
pools:
  - {name: mixed, check: web, targets: [%s]}
  - {name: down, check: web, targets: [%s]}
`, list(append([]*backend{healthy0}, sick1...)...), list(down...))

	var logs [2]testenv.SyncBuffer
	var shards [2]*testDaemon
	for i := range shards {
		shards[i] = startShard(t, cfg, config.Shard{Index: i, Count: 2}, &logs[i])
	}
	// Wait until every target of both shards is decided.
	pages := [2]poolsPage{}
	testenv.Eventually(t, "every target of both shards decided", func() ([2]poolsPage, bool) {
		undecided := 0
		for i, td := range shards {
			pages[i] = poolsPage{}
			td.getJSON(t, "/api/v1/pools", &pages[i])
			for _, p := range pages[i].Pools {
				undecided += p.Unknown
			}
		}
		return pages, undecided == 0
	})

	type slice struct {
		targets, healthy, unhealthy, routable, removed int
		failingOpen                                    bool
	}
	got := map[string][2]slice{}
	for i, pg := range pages {
		if pg.Shard != i || pg.Shards != 2 {
			t.Errorf("shard %d: /api/v1/pools says shard %d of %d", i, pg.Shard, pg.Shards)
		}
		for _, p := range pg.Pools {
			s := got[p.Name]
			s[i] = slice{p.Targets, p.Healthy, p.Unhealthy, p.Routable, p.Removed, p.FailingOpen}
			got[p.Name] = s
		}
	}
	want := map[string][2]slice{
		// Shard 1 sees only sick targets of mixed: it fails open and keeps
		// them, though shard 0 has a healthy one.
		"mixed": {{1, 1, 0, 1, 0, false}, {2, 0, 2, 2, 0, true}},
		// No healthy target anywhere: both slices fail open, all routed.
		"down": {{1, 0, 1, 1, 0, true}, {1, 0, 1, 1, 0, true}},
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("pool %s by shard: %+v, want %+v", name, got[name], w)
		}
	}

	for i, td := range shards {
		wantInfo := fmt.Sprintf(`
# HELP sonde_shard_info The slice of the targets this process probes: shard i of N (sonde run -shard i/N; 0 of 1 without it); the value is 1.
# TYPE sonde_shard_info gauge
sonde_shard_info{shard="%d",shards="2"} 1
`, i)
		if err := testutil.GatherAndCompare(td.d.metrics.reg, strings.NewReader(wantInfo), "sonde_shard_info"); err != nil {
			t.Errorf("shard %d: %v", i, err)
		}
		if line := fmt.Sprintf("msg=\"configuration loaded\" shard=%d/2 ", i); !strings.Contains(logs[i].String(), line) {
			t.Errorf("shard %d: log has no %q:\n%s", i, line, logs[i].String())
		}
	}
}

// TestDaemonShardMismatch: a Load that returns another shard's targets is
// refused, at start as on reload, and the shard must be a valid one.
func TestDaemonShardMismatch(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	yaml := fmt.Sprintf("checks: {web: {protocol: http}}\npools: [{name: p, check: web, targets: [%q]}]\n", b.addr())
	d, err := New(Options{
		Load:  func() (*config.Config, error) { return config.Parse([]byte(yaml), "", config.LoadOptions{}) },
		Shard: config.Shard{Index: 1, Count: 3},
		NoSyn: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err == nil || !strings.Contains(err.Error(), "configuration holds the targets of shard 0/1, the daemon runs shard 1/3") {
		d.Stop()
		t.Fatalf("Start with a whole configuration as shard 1/3: %v, want a shard mismatch", err)
	}
	if _, err := New(Options{Load: d.opt.Load, Shard: config.Shard{Index: 3, Count: 3}}); err == nil {
		t.Fatal("New accepted shard 3 of 3")
	}
}

// TestShardInfoUnsharded: without -shard a process is shard 0 of 1.
func TestShardInfoUnsharded(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	td := startDaemon(t, fmt.Sprintf("checks: {web: {protocol: http}}\npools: [{name: p, check: web, targets: [%q]}]\n", b.addr()))
	want := `
# HELP sonde_shard_info The slice of the targets this process probes: shard i of N (sonde run -shard i/N; 0 of 1 without it); the value is 1.
# TYPE sonde_shard_info gauge
sonde_shard_info{shard="0",shards="1"} 1
`
	if err := testutil.GatherAndCompare(td.d.metrics.reg, strings.NewReader(want), "sonde_shard_info"); err != nil {
		t.Fatal(err)
	}
	var pg poolsPage
	td.getJSON(t, "/api/v1/pools", &pg)
	if pg.Shard != 0 || pg.Shards != 1 || len(pg.Pools) != 1 {
		t.Fatalf("/api/v1/pools: %+v, want shard 0 of 1 and one pool", pg)
	}
}
