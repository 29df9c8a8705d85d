package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/sondeprobe/sonde/internal/testenv"

	"github.com/sondeprobe/sonde/probe/endpoint"
)

// newTestRunner returns a runner and the number of times it has called
// Options.Changed.
func newTestRunner(t *testing.T, r endpoint.Resolver) (*Runner, *atomic.Int64) {
	t.Helper()
	changed := new(atomic.Int64)
	run := NewRunner(Options{Logger: testLogger, Resolver: r, Debounce: time.Millisecond, Changed: func(context.Context) { changed.Add(1) }})
	t.Cleanup(func() {
		if err := run.Close(); err != nil {
			t.Error(err)
		}
	})
	return run, changed
}

// waitFound waits until pool's targets satisfy ok.
func waitFound(t *testing.T, run *Runner, pool string, ok func(Found) bool) Found {
	t.Helper()
	return testenv.Eventually(t, "pool "+pool+"'s targets", func() (Found, bool) {
		found, _ := run.Found()
		return found[pool], ok(found[pool])
	})
}

func endpointsOf(f Found) []string {
	var out []string
	for t := range f.All() {
		s := t.Addr.String() + ":" + strconv.Itoa(int(t.Port))
		if t.Host != "" {
			s = t.Host + "=" + s
		}
		out = append(out, s+" "+t.Labels.String())
	}
	slices.Sort(out)
	return out
}

func staticSource(i int, targets []string, ls map[string]string) Source {
	g := &targetgroup.Group{Source: "0", Labels: model.LabelSet{}}
	for k, v := range ls {
		g.Labels[model.LabelName(k)] = model.LabelValue(v)
	}
	for _, t := range targets {
		g.Targets = append(g.Targets, model.LabelSet{model.AddressLabel: model.LabelValue(t)})
	}
	return Source{Key: "static_configs", Index: i, Config: &StaticSD{Groups: []*targetgroup.Group{g}}}
}

// TestRunnerStaticAndNames checks a pool's targets from a static group and
// from host names, with the pool's labels, and that names which do not
// resolve are listed as unresolved.
func TestRunnerStaticAndNames(t *testing.T) {
	t.Parallel()
	srv := testenv.NewDNSServer(t, "127.0.0.1:0", "api.test. 300 IN A 192.0.2.10")
	run, changed := newTestRunner(t, &endpoint.DNSResolver{Hosts: "-", Servers: []string{srv.Addr}})
	found, _ := run.Update([]Pool{{
		Name:    "p",
		Labels:  labels.FromStrings("team", "edge"),
		Family:  endpoint.IP4,
		Sources: []Source{staticSource(0, []string{"192.0.2.1:80", "api.test:81", "192.0.2.2:80"}, map[string]string{"zone": "a"})},
		Names:   []Name{{Host: "api.test", Port: 80}, {Host: "missing.test", Port: 80}},
	}})
	if found["p"].Len() != 0 || len(found["p"].Unresolved) != 2 {
		t.Errorf("at once: %+v, want the names not looked up yet and no groups", found["p"])
	}
	f := waitFound(t, run, "p", func(f Found) bool {
		return f.Len() == 4 && len(f.Unresolved) == 1 && f.Unresolved[0].Err != "not looked up yet"
	})
	want := []string{
		`192.0.2.1:80 {team="edge", zone="a"}`,
		`192.0.2.2:80 {team="edge", zone="a"}`,
		`api.test=192.0.2.10:80 {team="edge"}`,
		`api.test=192.0.2.10:81 {team="edge", zone="a"}`,
	}
	if got := endpointsOf(f); !slices.Equal(got, want) {
		t.Errorf("targets\n got %v\nwant %v", got, want)
	}
	// Changed is called after the new targets are published: Found may
	// show them a moment before the call.
	testenv.Eventually(t, "a call of Options.Changed after the targets changed", func() (int64, bool) {
		n := changed.Load()
		return n, n > 0
	})
	if u := f.Unresolved[0]; u.Host != "missing.test" || u.Err != `cannot resolve "missing.test": no such host` {
		t.Errorf("unresolved %+v", u)
	}
	st := run.Status()
	if len(st) != 1 || st[0].Sources[0].State != "ok" || st[0].Sources[0].Targets != 3 || st[0].Names != 2 {
		t.Errorf("status %+v", st)
	}
}

// TestRunnerKeepsSources checks that an update keeps a source whose
// configuration is unchanged, with what it found, and stops one that went.
func TestRunnerKeepsSources(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sd := filepath.Join(dir, "a.json")
	if err := os.WriteFile(sd, []byte(`[{"targets": ["192.0.2.1:80"]}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	run, _ := newTestRunner(t, &endpoint.DNSResolver{Hosts: "-", Servers: []string{"127.0.0.1:1"}})
	fileSrc := func(i int) Source {
		return Source{Key: "file_sd_configs", Index: i, Config: &FileSD{Files: []string{sd}, RefreshInterval: time.Minute}}
	}
	run.Update([]Pool{{Name: "p", Sources: []Source{fileSrc(0)}}})
	waitFound(t, run, "p", func(f Found) bool { return f.Len() == 1 })
	run.mu.Lock()
	before := run.pools["p"].sources[0]
	run.mu.Unlock()

	// The same file source, now second, with relabeling added: it is kept,
	// with its targets as they were at once, then relabeled.
	found, _ := run.Update([]Pool{{Name: "p", Sources: []Source{staticSource(0, []string{"192.0.2.9:80"}, nil), fileSrc(0)},
		Labels: labels.FromStrings("pool", "p2")}})
	run.mu.Lock()
	after := run.pools["p"].sources[1]
	run.mu.Unlock()
	if after != before {
		t.Error("an unchanged source was restarted")
	}
	if got := endpointsOf(found["p"]); !slices.Equal(got, []string{`192.0.2.1:80 {}`}) {
		t.Errorf("targets at the update %v, want the kept source's as they were", got)
	}
	waitFound(t, run, "p", func(f Found) bool { return slices.Contains(endpointsOf(f), `192.0.2.1:80 {pool="p2"}`) })
	// The pool goes: its sources stop.
	run.Update(nil)
	testenv.Eventually(t, "the source of the removed pool to stop", func() (bool, bool) {
		select {
		case <-before.done:
			return true, true
		default:
			return false, false
		}
	})
	if f, _ := run.Found(); len(f) != 0 {
		t.Errorf("found %v for no pools", f)
	}
}

// TestRunnerLimit checks that a pool whose sources give more targets than
// the limit keeps the targets it had.
func TestRunnerLimit(t *testing.T) {
	t.Parallel()
	run := NewRunner(Options{MaxTargets: 2, Debounce: time.Millisecond})
	defer run.Close()
	run.Update([]Pool{{Name: "p", Sources: []Source{staticSource(0, []string{"192.0.2.1:80"}, nil)}}})
	waitFound(t, run, "p", func(f Found) bool { return f.Len() == 1 })
	run.Update([]Pool{{Name: "p", Sources: []Source{staticSource(0, []string{"192.0.2.1:80"}, nil), staticSource(1, []string{"192.0.2.2:80", "192.0.2.3:80"}, nil)}}})
	testenv.Eventually(t, "the pool's update refused", func() ([]PoolStatus, bool) {
		st := run.Status()
		return st, st[0].Refused != ""
	})
	if f, _ := run.Found(); f["p"].Len() != 1 {
		t.Errorf("over the limit: %d targets, want the 1 it had", f["p"].Len())
	}
}

// testLogger receives the runner's log in tests.
var testLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// TestSourceFailingSince checks when a source's failing spell starts: at
// its first failure since it last worked, for a source that refreshes and
// for a watch whose failures count for watchFailureWindow.
func TestSourceFailingSince(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mech string
		// at is when each failure is noted (offsets from t0); update, when
		// non-zero, is when an update arrives after the second.
		at     []time.Duration
		update time.Duration
		want   []time.Duration // the spell's start after each failure
	}{
		{"file", []time.Duration{0, time.Minute, 3 * time.Minute}, 2 * time.Minute, []time.Duration{0, 0, 3 * time.Minute}},
		{"file", []time.Duration{0, time.Hour}, 0, []time.Duration{0, 0}},
		{"kubernetes", []time.Duration{0, 30 * time.Second, 2 * time.Minute}, 0, []time.Duration{0, 0, 2 * time.Minute}},
	} {
		s := &source{mech: c.mech}
		for i, at := range c.at {
			if i == 2 && c.update != 0 {
				s.update = t0.Add(c.update)
			}
			s.noteAt("broken", t0.Add(at))
			if st := s.stateLocked(t0.Add(at)); st != "failing" || !s.failing.Equal(t0.Add(c.want[i])) {
				t.Errorf("%s, failure %d at +%s: %s since +%s, want failing since +%s", c.mech, i, at, st, s.failing.Sub(t0), c.want[i])
			}
		}
	}
}

// failingResolver fails every lookup and counts them.
type failingResolver struct{ calls chan string }

func (r failingResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.calls <- host
	return nil, errors.New("no such host")
}

// TestStatusFailingSourceAndRetries checks the status of a source that
// fails (since when) and of a name whose lookups keep failing: its next
// lookup is the one scheduled now, not the one of the first failure.
func TestStatusFailingSourceAndRetries(t *testing.T) {
	t.Parallel()
	sd := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(sd, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := failingResolver{calls: make(chan string, 16)}
	run, _ := newTestRunner(t, res)
	run.Update([]Pool{{Name: "p", Family: endpoint.IP4,
		Sources: []Source{{Key: "file_sd_configs", Config: &FileSD{Files: []string{sd}, RefreshInterval: time.Minute}}},
		Names:   []Name{{Host: "missing.test", Port: 80}}}})
	lookups := 0
	testenv.Eventually(t, "two lookups of the failing name", func() (int, bool) {
		for {
			select {
			case <-res.calls:
				lookups++
			default:
				return lookups, lookups >= 2
			}
		}
	})
	testenv.Eventually(t, "the source failing since its first failure, and the name's next lookup after the first retry", func() (string, bool) {
		st := run.Status()[0]
		src, un := st.Sources[0], st.Unresolved
		found, _ := run.Found()
		first := found["p"].Unresolved
		return fmt.Sprintf("status %+v, found %+v", st, first), src.State == "failing" && src.FailingSince != nil && !src.FailingSince.After(*src.LastFailure) &&
			len(un) == 1 && len(first) == 1 && un[0].Next.After(first[0].Next) && un[0].Err == first[0].Err
	})
}
