package status

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/config/discovery"
	"github.com/sondeprobe/sonde/probe/endpoint"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/policy"
	"github.com/sondeprobe/sonde/server/web/api"
)

// fakeClock is a clock stopped at a fixed time.
type fakeClock struct{ now time.Time }

func (c fakeClock) Now() time.Time  { return c.now }
func (c fakeClock) Nanotime() int64 { return c.now.UnixNano() }

// fake is a Snapshot without a daemon: a parsed configuration, its pools
// routed as the test says, and the states, errors, certificates, events
// and history it is given.
type fake struct {
	cfg       *config.Config
	pools     []*policy.Pool
	routes    map[[2]int]policy.Route // by pool and member; default Routed
	status    map[uint32]scheduler.TargetStatus
	errs      map[uint32]string
	certs     map[uint32]int64
	passive   map[uint32]api.PassiveJSON
	events    []api.Event // newest first
	discovery []discovery.PoolStatus
	history   map[uint32][]api.HistoryResult
	viewed    []uint32 // the targets whose history was asked for
	clock     fakeClock
	alert     string
}

// newFake parses the configuration yml; host names do not resolve, so
// targets named by them are unresolved.
func newFake(t testing.TB, yml string) *fake {
	t.Helper()
	noDNS := endpoint.ResolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
		return nil, errors.New("no such host " + host)
	})
	cfg, err := config.Parse([]byte(yml), "", config.LoadOptions{Resolver: noDNS})
	if err != nil {
		t.Fatal(err)
	}
	f := &fake{cfg: cfg, routes: map[[2]int]policy.Route{}, status: map[uint32]scheduler.TargetStatus{},
		errs: map[uint32]string{}, certs: map[uint32]int64{}, passive: map[uint32]api.PassiveJSON{}, history: map[uint32][]api.HistoryResult{},
		clock: fakeClock{time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}}
	f.indexPools()
	return f
}

// indexPools makes the engine's pools of f's configuration.
func (f *fake) indexPools() {
	f.pools = nil
	for _, p := range f.cfg.Pools {
		f.pools = append(f.pools, &policy.Pool{Name: p.Name, Members: p.Members, Disabled: p.Disabled, Unprobed: !p.HealthChecks})
	}
}

// httptestGet answers a GET of path with h.
func httptestGet(h http.Handler, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

// snapshot returns f as the handler's source of snapshots.
func (f *fake) snapshot() Snapshot { return f }

// serve answers a GET of path with f's pages.
func (f *fake) serve(path string) *httptest.ResponseRecorder {
	mux := http.NewServeMux()
	New(f.snapshot, func(w http.ResponseWriter) (http.ResponseWriter, func()) { return w, func() {} }).Routes(mux)
	return httptestGet(mux, path)
}

func (f *fake) Config() *config.Config { return f.cfg }
func (f *fake) Pools() []*policy.Pool  { return f.pools }

func (f *fake) PoolSummary(pi int) api.PoolJSON {
	cp := f.cfg.Pools[pi]
	c := f.cfg.Checks[cp.CheckIndex]
	j := api.PoolJSON{Name: cp.Name, Check: c.Name, Protocol: c.Protocol.String(), Targets: len(cp.Members),
		Unresolved: len(cp.Unresolved), HealthChecks: cp.HealthChecks, MaxUnhealthyPercent: cp.MaxUnhealthyPercent}
	for m, id := range cp.Members {
		rt, _ := f.Route(pi, m)
		switch st := f.status[id]; {
		case rt == policy.Excluded:
			j.Disabled++
			continue
		case !cp.HealthChecks:
			j.Unprobed++
		case st.State == scheduler.Healthy:
			j.Healthy++
		case st.State == scheduler.Unhealthy:
			j.Unhealthy++
		default:
			j.Unknown++
		}
		if rt == policy.Removed {
			j.Removed++
		} else {
			j.Routable++
		}
	}
	return j
}

func (f *fake) Route(pi, m int) (policy.Route, bool) {
	if r, ok := f.routes[[2]int{pi, m}]; ok {
		return r, false
	}
	return policy.Routed, false
}

func (f *fake) PoolsOf(id uint32, fn func(pi int)) {
	for pi, p := range f.pools {
		if slices.Contains(p.Members, id) {
			fn(pi)
		}
	}
}

func (f *fake) Status(id uint32) scheduler.TargetStatus { return f.status[id] }
func (f *fake) Clock() scheduler.Clock                  { return f.clock }
func (f *fake) LastError(id uint32) string              { return f.errs[id] }
func (f *fake) CertExpiry(id uint32) int64              { return f.certs[id] }
func (f *fake) Passive(id uint32) (api.PassiveJSON, bool) {
	p, ok := f.passive[id]
	return p, ok
}
func (f *fake) Loaded() time.Time                 { return f.clock.now.Add(-time.Hour) }
func (f *fake) HistoryCapacity() int              { return 100 }
func (f *fake) Build() (string, string)           { return "v9.9.9-test", "abc123" }
func (f *fake) TCPPath() string                   { return "connect" }
func (f *fake) Now() time.Time                    { return f.clock.now }
func (f *fake) Discovery() []discovery.PoolStatus { return f.discovery }
func (f *fake) StateAlert() string                { return f.alert }

func (f *fake) History(id uint32) ([]api.HistoryResult, bool) {
	f.viewed = append(f.viewed, id)
	return slices.Clone(f.history[id]), true
}

func (f *fake) LastEvent() uint64 {
	if len(f.events) == 0 {
		return 0
	}
	return f.events[0].Seq
}

func (f *fake) Events(n int, keep func(*api.Event) bool) []api.Event {
	var out []api.Event
	for i := range f.events {
		if len(out) < n && (keep == nil || keep(&f.events[i])) {
			out = append(out, f.events[i])
		}
	}
	return out
}
