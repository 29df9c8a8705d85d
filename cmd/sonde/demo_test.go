package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/config/discovery"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/server/prober"
)

// startTestDemo starts a demo with timing tm and closes it at the end of the test.
func startTestDemo(t *testing.T, tm demoTiming) *demo {
	t.Helper()
	d, err := startDemoWith(context.Background(), tm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// parseDemo parses the demo's config with the targets its pools' static
// groups give, as the daemon runs it.
func parseDemo(t *testing.T, d *demo) *config.Config {
	t.Helper()
	cfg, err := config.Parse(d.Config, "", config.LoadOptions{})
	if err != nil {
		t.Fatalf("demo config does not parse: %v\n%s", err, d.Config)
	}
	// The demo's sources are static groups: wait for all their targets.
	want := map[string]int{}
	for _, p := range cfg.DiscoveryPools() {
		for _, src := range p.Sources {
			static, ok := src.Config.(*discovery.StaticSD)
			if !ok {
				t.Fatalf("pool %s: source %s is not static", p.Name, src.Name())
			}
			for _, g := range static.Groups {
				want[p.Name] += len(g.Targets)
			}
		}
	}
	r := discovery.NewRunner(discovery.Options{Debounce: time.Millisecond})
	defer r.Close()
	r.Update(cfg.DiscoveryPools())
	found, _ := r.Found()
	testenv.Eventually(t, fmt.Sprintf("targets per pool %v from the demo's static groups", want), func() (map[string]int, bool) {
		found, _ = r.Found()
		got := map[string]int{}
		for name := range want {
			got[name] = found[name].Len()
		}
		return got, maps.Equal(got, want)
	})
	eff, err := cfg.WithFound(found)
	if err != nil {
		t.Fatal(err)
	}
	return eff
}

func TestDemoConfig(t *testing.T) {
	d := startTestDemo(t, demoTiming{slowDelay: demoSlowDelay, flapPeriod: demoFlapPeriod, now: time.Now})
	cfg := parseDemo(t, d)
	if !cfg.Metrics.PerTarget {
		t.Error("per-target metrics are off")
	}
	presets := map[string]string{}
	for _, c := range cfg.Checks {
		presets[c.Preset] = c.Name
		if c.Interval > 2*time.Second || c.Timeout > time.Second {
			t.Errorf("check %s probes every %s with timeout %s; want short ones", c.Name, c.Interval, c.Timeout)
		}
		// A failing target must turn unhealthy well within a minute (W1).
		if c.FailureWindow() > 20*time.Second {
			t.Errorf("check %s: failure window %s, want at most 20s", c.Name, c.FailureWindow())
		}
		if c.Protocol == config.TCP && c.TCPMode != config.TCPConnect {
			t.Errorf("check %s: tcp_mode %s, want connect (no privileges needed)", c.Name, c.TCPMode)
		}
	}
	for _, p := range []string{config.PresetAppService, config.PresetFrontDoor, config.PresetAppGateway, config.PresetGlobalAccelerator} {
		if _, ok := presets[p]; !ok {
			t.Errorf("no check with preset %s", p)
		}
	}
	// The backends' names by address, to read the pools.
	names := map[netip.AddrPort]string{}
	for _, b := range d.Backends {
		names[b.Addr] = b.Name
	}
	type poolView struct {
		Members             []string
		MaxUnhealthyPercent int
		FailOpen            bool
		Labels              []string // of each member, when some have any
		MetricLabels        []string
	}
	got := map[string]poolView{}
	for _, p := range cfg.Pools {
		v := poolView{MaxUnhealthyPercent: p.MaxUnhealthyPercent, FailOpen: p.FailOpen, MetricLabels: p.MetricLabels}
		var labelled bool
		var ls []string
		for pos, id := range p.Members {
			v.Members = append(v.Members, names[cfg.Targets[id].AddrPort()])
			l := p.MemberLabels(pos)
			labelled = labelled || !l.IsEmpty()
			ls = append(ls, names[cfg.Targets[id].AddrPort()]+" "+l.String())
		}
		if labelled {
			slices.Sort(ls)
			v.Labels = ls
		}
		slices.Sort(v.Members)
		got[p.Name] = v
	}
	want := map[string]poolView{
		"app": {[]string{"failing", "flapping", "healthy", "redirecting"}, 50, true, []string{
			`failing {team="web", zone="eu-1"}`, `flapping {team="web", zone="eu-2"}`,
			`healthy {team="web", zone="eu-1"}`, `redirecting {team="web", zone="eu-2"}`,
		}, []string{"zone"}},
		"edge":    {[]string{"failing", "refusing", "slow"}, 100, true, nil, nil},
		"gateway": {[]string{"flapping", "healthy", "redirecting"}, 100, false, nil, nil},
		"fleet":   {[]string{"refusing", "tcp"}, 100, false, nil, nil},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}
}

// TestDemoBackends probes every pool member with its pool's check and
// checks the outcome each backend is there to show.
func TestDemoBackends(t *testing.T) {
	// The flapping backend stays in its healthy period: its clock is frozen.
	start := time.Now()
	d := startTestDemo(t, demoTiming{slowDelay: demoSlowDelay, flapPeriod: demoFlapPeriod, now: func() time.Time { return start }})
	cfg := parseDemo(t, d)
	names := map[netip.AddrPort]string{}
	for _, b := range d.Backends {
		names[b.Addr] = b.Name
	}
	want := map[string]probe.Outcome{
		"app/healthy": probe.Success, "app/failing": probe.HTTPStatus, "app/redirecting": probe.HTTPStatus, "app/flapping": probe.Success,
		"edge/failing": probe.HTTPStatus, "edge/slow": probe.Timeout, "edge/refusing": probe.Refused,
		"gateway/healthy": probe.Success, "gateway/redirecting": probe.Success, "gateway/flapping": probe.Success,
		"fleet/tcp": probe.Success, "fleet/refusing": probe.Refused,
	}
	var mu sync.Mutex
	got := map[string]probe.Outcome{}
	var wg sync.WaitGroup
	for _, p := range cfg.Pools {
		c := cfg.Checks[p.CheckIndex]
		pr, _, err := prober.New(t.Context(), c, false)
		if err != nil {
			t.Fatalf("check %s: %v", c.Name, err)
		}
		for _, id := range p.Members {
			tg := cfg.Targets[id]
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
				defer cancel()
				r := pr.Report(ctx, probe.Target{Addr: tg.Addr(), Port: tg.Port})
				mu.Lock()
				got[p.Name+"/"+names[tg.AddrPort()]] = r.Outcome
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
}

// TestDemoSlowAnswers checks that the slow backend does answer, later.
func TestDemoSlowAnswers(t *testing.T) {
	d := startTestDemo(t, demoTiming{slowDelay: 100 * time.Millisecond, flapPeriod: demoFlapPeriod, now: time.Now})
	start := time.Now()
	resp, err := http.Get("http://" + d.backend("slow").String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || time.Since(start) < 100*time.Millisecond {
		t.Errorf("status %d after %s, want 200 after at least 100ms", resp.StatusCode, time.Since(start))
	}
}

// TestFlapper checks the switching of the flapping backend with a fake clock.
func TestFlapper(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var now atomic.Pointer[time.Time]
	set := func(d time.Duration) { tm := start.Add(d); now.Store(&tm) }
	set(0)
	f := &flapper{start: start, period: 10 * time.Second, now: func() time.Time { return *now.Load() }}
	for _, tc := range []struct {
		at   time.Duration
		code int
	}{
		{0, 200}, {9999 * time.Millisecond, 200}, {10 * time.Second, 500}, {19 * time.Second, 500},
		{20 * time.Second, 200}, {35 * time.Second, 500}, {time.Hour, 200},
	} {
		set(tc.at)
		rec := httptest.NewRecorder()
		f.ServeHTTP(rec, httptest.NewRequest("GET", "/health", nil))
		if rec.Code != tc.code {
			t.Errorf("at %s: status %d, want %d", tc.at, rec.Code, tc.code)
		}
		if tc.code == 200 && rec.Body.String() != "Healthy\n" {
			t.Errorf("at %s: body %q, want Healthy", tc.at, rec.Body.String())
		}
	}
}

// TestDemoFlapping probes the running flapping backend across a change of
// period on an injected clock.
func TestDemoFlapping(t *testing.T) {
	start := time.Now()
	var offset atomic.Int64
	d := startTestDemo(t, demoTiming{slowDelay: demoSlowDelay, flapPeriod: time.Minute,
		now: func() time.Time { return start.Add(time.Duration(offset.Load())) }})
	cfg, err := config.Parse(d.Config, "", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pr, _, err := prober.New(t.Context(), cfg.CheckByName("gateway"), false)
	if err != nil {
		t.Fatal(err)
	}
	addr := d.backend("flapping")
	for _, step := range []struct {
		offset time.Duration
		want   probe.Outcome
	}{{0, probe.Success}, {time.Minute, probe.HTTPStatus}, {2 * time.Minute, probe.Success}} {
		offset.Store(int64(step.offset))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r := pr.Report(ctx, probe.Target{Addr: addr.Addr(), Port: addr.Port()})
		cancel()
		if r.Outcome != step.want {
			t.Errorf("after %s: outcome %s (status %d), want %s", step.offset, r.Outcome, r.Status, step.want)
		}
	}
}

// TestDemoClose checks that Close stops every backend: their ports refuse
// connections, the goroutines end, and a second Close is harmless.
func TestDemoClose(t *testing.T) {
	before := runtime.NumGoroutine()
	d, err := startDemo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Leave a request in progress on the slow backend.
	done := make(chan error, 1)
	go func() {
		c, err := net.Dial("tcp", d.backend("slow").String())
		if err == nil {
			_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
			_, err = c.Read(make([]byte, 1))
			c.Close()
		}
		done <- err
	}()
	// Give the request time to reach the backend. Not a wait for a
	// condition: the demo shows nothing of its requests, and Close must
	// behave whether or not the request has arrived.
	time.Sleep(50 * time.Millisecond)
	closed := time.Now()
	if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if took := time.Since(closed); took > time.Second {
		t.Errorf("Close took %s; it should not wait for the slow answer", took)
	}
	if err := <-done; err == nil {
		t.Error("the request in progress got an answer after Close")
	}
	for _, b := range d.Backends {
		c, err := net.DialTimeout("tcp", b.Addr.String(), time.Second)
		if err == nil {
			c.Close()
			t.Errorf("backend %s (%s) still accepts connections after Close", b.Name, b.Addr)
		} else if probe.NetOutcome(err) != probe.Refused {
			t.Errorf("backend %s: %v, want connection refused", b.Name, err)
		}
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	testenv.Eventually(t, fmt.Sprintf("at most the %d goroutines of before the demo", before), func() (int, bool) {
		n := runtime.NumGoroutine()
		return n, n <= before
	})
}

// writeCounter is a buffer that counts the Write calls it took.
type writeCounter struct {
	bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

func TestDemoBanner(t *testing.T) {
	d := startTestDemo(t, demoTiming{slowDelay: demoSlowDelay, flapPeriod: demoFlapPeriod, now: time.Now})
	for _, tc := range []struct{ listen, prefix, base string }{
		{"127.0.0.1:9090", "", "http://127.0.0.1:9090"},
		{":9090", "", "http://127.0.0.1:9090"},
		{"0.0.0.0:9090", "", "http://127.0.0.1:9090"},
		{"[::]:9090", "", "http://127.0.0.1:9090"},
		{"[::1]:9090", "", "http://[::1]:9090"},
		{"localhost:8080", "", "http://localhost:8080"},
		{"127.0.0.1:9090", "/sonde/", "http://127.0.0.1:9090/sonde"},
	} {
		var b writeCounter
		d.Banner(&b, tc.listen, tc.prefix)
		out := b.String()
		if b.writes != 1 {
			t.Errorf("listen %s: the banner came in %d writes, want 1 (a log line could land inside it)", tc.listen, b.writes)
		}
		for _, want := range []string{"/ ", "/metrics", "/api/v1/pools", "/api/v1/targets", "/api/v1/events"} {
			if !strings.Contains(out, tc.base+want) {
				t.Errorf("listen %s: banner lacks %s:\n%s", tc.listen, tc.base+want, out)
			}
		}
		for _, be := range d.Backends {
			if !strings.Contains(out, be.Addr.String()) {
				t.Errorf("banner lacks backend %s at %s", be.Name, be.Addr)
			}
		}
	}
}

// TestDemoStartCancelled checks that a start with a cancelled context fails
// and leaves nothing running.
func TestDemoStartCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, err := startDemo(ctx)
	if err == nil {
		_ = d.Close()
		t.Fatal("startDemo with a cancelled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
}

// The demo's initial state for gateway follows the appgateway preset.
func TestDemoGatewayStartsUnhealthy(t *testing.T) {
	d := startTestDemo(t, demoTiming{slowDelay: demoSlowDelay, flapPeriod: demoFlapPeriod, now: time.Now})
	cfg, err := config.Parse(d.Config, "", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.CheckByName("gateway").Initial; got != scheduler.Unhealthy {
		t.Errorf("gateway starts %s, want unhealthy (E3)", got)
	}
}
