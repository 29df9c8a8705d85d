package apiv1

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/policy"
	"github.com/sondeprobe/sonde/server/events"
	"github.com/sondeprobe/sonde/server/web/api"
)

// fakeClock is a clock stopped at a fixed time.
type fakeClock struct{ now time.Time }

func (c fakeClock) Now() time.Time  { return c.now }
func (c fakeClock) Nanotime() int64 { return c.now.UnixNano() }

// fake is a Snapshot without a daemon: a parsed configuration, every
// member routed, and the states and errors it is given.
type fake struct {
	cfg    *config.Config
	pools  []*policy.Pool
	status map[uint32]scheduler.TargetStatus
	errs   map[uint32]string
	layout uint32
}

func newFake(t *testing.T, yml string) *fake {
	t.Helper()
	cfg, err := config.Parse([]byte(yml), "", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fake{cfg: cfg, status: map[uint32]scheduler.TargetStatus{}, errs: map[uint32]string{}, layout: 7}
	for _, p := range cfg.Pools {
		f.pools = append(f.pools, &policy.Pool{Name: p.Name, Members: p.Members, Disabled: p.Disabled, Unprobed: !p.HealthChecks})
	}
	return f
}

func (f *fake) Config() *config.Config                  { return f.cfg }
func (f *fake) Pools() []*policy.Pool                   { return f.pools }
func (f *fake) Layout() uint32                          { return f.layout }
func (f *fake) Route(int, int) (policy.Route, bool)     { return policy.Routed, false }
func (f *fake) Ranks(pi int) []uint32                   { return make([]uint32, len(f.pools[pi].Members)) }
func (f *fake) Status(id uint32) scheduler.TargetStatus { return f.status[id] }
func (f *fake) Clock() scheduler.Clock                  { return fakeClock{time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)} }
func (f *fake) LastError(id uint32) string              { return f.errs[id] }
func (f *fake) CertExpiry(uint32) int64                 { return 0 }
func (f *fake) Passive(uint32) (api.PassiveJSON, bool)  { return api.PassiveJSON{}, false }

func (f *fake) Summary(pi int) policy.PoolSummary {
	s := policy.PoolSummary{Members: len(f.pools[pi].Members)}
	for _, id := range f.pools[pi].Members {
		switch f.status[id].State {
		case scheduler.Healthy:
			s.Healthy++
		case scheduler.Unhealthy:
			s.Unhealthy++
		default:
			s.Unknown++
		}
	}
	s.Routable = s.Members
	return s
}

// admitAll admits every list request.
func admitAll(w http.ResponseWriter) (http.ResponseWriter, func()) { return w, func() {} }

// get answers a GET of path from f and decodes its JSON into v.
func (f *fake) get(t *testing.T, path string, v any) int {
	t.Helper()
	mux := http.NewServeMux()
	New(func() Snapshot { return f }, &fakeFeeds{log: events.NewLog(4)}, admitAll).Routes(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
			t.Fatalf("GET %s: %v\n%s", path, err, rec.Body)
		}
	}
	return rec.Code
}

// TestAPIListsFromSnapshot answers /api/v1/pools and /api/v1/targets from a
// fake snapshot: states, errors, filters and cursors.
func TestAPIListsFromSnapshot(t *testing.T) {
	t.Parallel()
	f := newFake(t, `
checks:
  web: {protocol: http, path: /, interval: 1s, timeout: 1s}
pools:
  - {name: a, check: web, targets: ["198.18.0.1:80", "198.18.0.2:80", "198.18.0.3:80"]}
  - {name: b, check: web, targets: ["198.18.1.1:80"]}
`)
	bad := f.pools[0].Members[1]
	f.status[bad] = scheduler.TargetStatus{State: scheduler.Unhealthy, Probed: true, LastOutcome: probe.Timeout}
	f.errs[bad] = "no answer"

	var pools api.PoolsPage
	if code := f.get(t, "/api/v1/pools", &pools); code != http.StatusOK || len(pools.Pools) != 2 ||
		pools.Pools[0].Name != "a" || pools.Pools[0].Unhealthy != 1 || pools.Pools[0].Targets != 3 {
		t.Errorf("pools: %d %+v", code, pools)
	}

	var page api.TargetsPage
	if code := f.get(t, "/api/v1/targets?state=unhealthy", &page); code != http.StatusOK || len(page.Targets) != 1 ||
		page.Targets[0].Target != "198.18.0.2:80" || page.Targets[0].LastError != "no answer" || page.Targets[0].LastOutcome != "timeout" {
		t.Errorf("unhealthy targets: %d %+v", code, page)
	}
	// Two at a time, following next: every target once, in order.
	var seen []string
	for path, n := "/api/v1/targets?limit=2", 0; path != ""; n++ {
		var p api.TargetsPage
		if code := f.get(t, path, &p); code != http.StatusOK || n > 3 {
			t.Fatalf("GET %s: %d (page %d)", path, code, n)
		}
		for _, tj := range p.Targets {
			seen = append(seen, tj.Pool+" "+tj.Target)
		}
		path = ""
		if p.Next != "" {
			path = "/api/v1/targets?limit=2&after=" + p.Next
		}
	}
	if want := []string{"a 198.18.0.1:80", "a 198.18.0.2:80", "a 198.18.0.3:80", "b 198.18.1.1:80"}; !slices.Equal(seen, want) {
		t.Errorf("paged %v, want %v", seen, want)
	}
	// A cursor of another layout is gone.
	var p api.TargetsPage
	f.get(t, "/api/v1/targets?limit=2", &p)
	f.layout++
	if code := f.get(t, "/api/v1/targets?after="+p.Next, &p); code != http.StatusGone {
		t.Errorf("a cursor of another layout: %d, want 410", code)
	}
}
