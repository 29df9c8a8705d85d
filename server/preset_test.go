package server

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/server/web/api"
)

// hostRecorder is a loopback HTTP server that answers 200 and remembers the
// Host header of every request.
type hostRecorder struct {
	addr  string
	mu    sync.Mutex
	hosts []string
}

func newHostRecorder(t *testing.T, ip string) *hostRecorder {
	t.Helper()
	h := &hostRecorder{}
	h.addr = serve(t, ip, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.hosts = append(h.hosts, r.Host)
		h.mu.Unlock()
	}))
	return h
}

func (h *hostRecorder) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.hosts...)
}

// serve runs handler on ip (a loopback address) at a free port until the
// test ends, and returns its address.
func serve(t *testing.T, ip string, handler http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// TestAppGatewayDefaultProbe runs the appgateway preset with its defaults
// (30 s interval and timeout, targets unhealthy until a probe succeeds):
// the pool is routable after the first probe, which leaves at start, the
// probe's Host is 127.0.0.1 with the backend's port, a host setting
// replaces it, and a pool with health checks off is routed without a probe.
// The engine runs on a simulated clock that never moves: a first probe
// placed anywhere inside the interval but at its start would never leave.
func TestAppGatewayDefaultProbe(t *testing.T) {
	t.Parallel()
	gw, custom, static := newHostRecorder(t, "127.0.0.1"), newHostRecorder(t, "127.0.0.1"), newHostRecorder(t, "127.0.0.1")
	clock := scheduler.NewSimClock(time.Unix(1e9, 0))
	td := startDaemonWith(t, fmt.Sprintf(`
checks:
  gw: {preset: appgateway}
  custom: {preset: appgateway, host: api.internal}
pools:
  - {name: gw, check: gw, targets: [%q]}
  - {name: custom, check: custom, targets: [%q]}
  - {name: static, check: gw, targets: [%q], health_checks: false}
`, gw.addr, custom.addr, static.addr), func(o *Options) { o.Clock = clock })
	for _, name := range []string{"gw", "custom"} {
		// The simulated clock stays at start: the first probe leaves at once.
		testenv.Eventually(t, "pool "+name+" routable: its first probe left at start", func() (api.PoolJSON, bool) {
			p := td.pool(t, name)
			return p, p.Routable == 1
		})
		var tl struct {
			Targets []api.TargetJSON `json:"targets"`
		}
		td.getJSON(t, "/api/v1/targets?pool="+name, &tl)
		if len(tl.Targets) != 1 || tl.Targets[0].LastProbe == nil || !tl.Targets[0].LastProbe.Equal(clock.Now()) {
			t.Fatalf("pool %s targets %+v: want one probed at start, %v", name, tl.Targets, clock.Now())
		}
	}
	_, port, _ := net.SplitHostPort(gw.addr)
	if got := gw.seen(); len(got) != 1 || got[0] != "127.0.0.1:"+port {
		t.Errorf("default probe Host headers %q, want one 127.0.0.1:%s", got, port)
	}
	if got := custom.seen(); len(got) != 1 || got[0] != "api.internal" {
		t.Errorf("custom probe Host headers %q, want one api.internal", got)
	}

	p := td.pool(t, "static")
	if p.HealthChecks || p.Unprobed != 1 || p.Routable != 1 || p.Unhealthy != 0 || p.Cadence != "fixed_rate" || p.FailureWindowSeconds != 90 {
		t.Errorf("pool static %+v: want 1 unprobed and routable, fixed_rate, W1 90 s", p)
	}
	var tl struct {
		Targets []api.TargetJSON `json:"targets"`
	}
	td.getJSON(t, "/api/v1/targets?pool=static&state=unprobed", &tl)
	if len(tl.Targets) != 1 || tl.Targets[0].Route != "routed" {
		t.Errorf("static targets %+v: want one unprobed, routed", tl.Targets)
	}
	if got := static.seen(); len(got) != 0 {
		t.Errorf("the pool with health checks off was probed: %q", got)
	}
}

// TestCadenceAtHangingServer checks that each check's cadence reaches the
// engine that probes it, and that servers that never answer are probed
// and found unhealthy under both. How many probes each cadence sends to
// such a server is the scheduler's to prove, on its simulated clock
// (scheduler's TestCadenceAtHangingServer): here time is real.
func TestCadenceAtHangingServer(t *testing.T) {
	t.Parallel()
	var counts [2]atomic.Int64
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	addrs := make([]string, 2)
	for i := range addrs {
		addrs[i] = serve(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			counts[i].Add(1)
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}))
	}
	td := startDaemon(t, fmt.Sprintf(`
checks:
  after: {protocol: http, cadence: after_completion, interval: 300ms, timeout: 300ms, rise: 1, fall: 1}
  fixed: {protocol: http, cadence: fixed_rate, interval: 300ms, timeout: 300ms, rise: 1, fall: 1}
pools:
  - {name: after, check: after, targets: [%q]}
  - {name: fixed, check: fixed, targets: [%q]}
`, addrs[0], addrs[1]))
	g := td.d.cur.Load()
	want := map[string]scheduler.Cadence{"after": scheduler.AfterCompletion, "fixed": scheduler.FixedRate}
	for ci, c := range g.cfg.Checks {
		if got := g.engine.Check(ci).Timing.Cadence; got != want[c.Name] {
			t.Errorf("check %s runs with cadence %v in the engine, want %v", c.Name, got, want[c.Name])
		}
	}
	for _, pool := range []string{"after", "fixed"} {
		testenv.Eventually(t, "pool "+pool+" unhealthy", func() (api.PoolJSON, bool) {
			p := td.pool(t, pool)
			return p, p.Unhealthy == 1
		})
	}
	if counts[0].Load() == 0 || counts[1].Load() == 0 {
		t.Errorf("probes received: after %d, fixed %d; want both probed", counts[0].Load(), counts[1].Load())
	}
}
