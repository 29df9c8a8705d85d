package bench

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseLoadResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     LoadResult
		wantErr  bool
	}{
		{name: "ok", in: `{"connections":10,"connected":7,"refused":2,"timed_out":1,"other":0,"seconds":0.5,"user_cpu":0.01,"system_cpu":0.02}` + "\n",
			want: LoadResult{Connections: 10, Connected: 7, Refused: 2, TimedOut: 1, Seconds: 0.5, UserCPU: 0.01, SystemCPU: 0.02}},
		{name: "outcomes do not add up", in: `{"connections":10,"connected":7}`, wantErr: true},
		{name: "negative time", in: `{"connections":0,"seconds":-1}`, wantErr: true},
		{name: "not JSON", in: `connect-load: socket: too many open files`, wantErr: true},
		{name: "empty", in: ``, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLoadResult([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if err == nil {
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("(-want +got)\n%s", diff)
				}
				if r := got.Rate(); r != 20 {
					t.Errorf("rate %v, want 20", r)
				}
			}
		})
	}
}

func TestLoadConfigValidate(t *testing.T) {
	t.Parallel()
	target := []netip.AddrPort{netip.MustParseAddrPort("198.19.0.1:80")}
	for _, tc := range []struct {
		name    string
		cfg     LoadConfig
		want    LoadConfig // after defaults, when valid
		wantErr string
	}{
		{name: "defaults from rate and duration", cfg: LoadConfig{Targets: target, Rate: 100, Duration: 2 * time.Second},
			want: LoadConfig{Targets: target, Rate: 100, Duration: 2 * time.Second, Count: 200, Workers: 2, Timeout: time.Second}},
		{name: "no rate: bounded by the count limit", cfg: LoadConfig{Targets: target, Duration: time.Second},
			want: LoadConfig{Targets: target, Duration: time.Second, Count: MaxLoadCount, Workers: 2, Timeout: time.Second}},
		{name: "no targets", cfg: LoadConfig{Duration: time.Second}, wantErr: "no targets"},
		{name: "IPv6", cfg: LoadConfig{Targets: []netip.AddrPort{netip.MustParseAddrPort("[2001:db8::1]:80")}, Duration: time.Second}, wantErr: "want an IPv4 address"},
		{name: "port 0", cfg: LoadConfig{Targets: []netip.AddrPort{netip.MustParseAddrPort("198.19.0.1:0")}, Duration: time.Second}, wantErr: "want an IPv4 address and a port"},
		{name: "unbounded in time", cfg: LoadConfig{Targets: target}, wantErr: "duration 0s out of range"},
		{name: "too long", cfg: LoadConfig{Targets: target, Duration: time.Hour}, wantErr: "duration 1h0m0s out of range"},
		{name: "rate", cfg: LoadConfig{Targets: target, Duration: time.Second, Rate: -1}, wantErr: "rate -1 out of range"},
		{name: "count", cfg: LoadConfig{Targets: target, Duration: time.Second, Count: MaxLoadCount + 1}, wantErr: "count 50000001 out of range"},
		{name: "workers", cfg: LoadConfig{Targets: target, Duration: time.Second, Workers: 65}, wantErr: "workers 65 out of range"},
		{name: "timeout", cfg: LoadConfig{Targets: target, Duration: time.Second, Timeout: time.Hour}, wantErr: "timeout 1h0m0s out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			err := cfg.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, cfg, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestDueAt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		i    int
		rate float64
		want time.Duration
	}{
		{0, 1000, 0},
		{1, 1000, time.Millisecond},
		{10_000, 10_000, time.Second},
		{3, 2, 1500 * time.Millisecond},
	} {
		if got := dueAt(tc.i, tc.rate); got != tc.want {
			t.Errorf("dueAt(%d, %v) = %v, want %v", tc.i, tc.rate, got, tc.want)
		}
	}
}

// TestConnectLoad connects to a loopback listener and to a closed port: one
// is connected, the other refused, and the load stops at its count.
func TestConnectLoad(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	closed, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := netip.MustParseAddrPort(closed.Addr().String())
	closed.Close()
	t.Cleanup(func() { l.Close() })
	res, err := ConnectLoad(context.Background(), LoadConfig{
		Targets:  []netip.AddrPort{netip.MustParseAddrPort(l.Addr().String()), refusing},
		Count:    40,
		Workers:  1,
		Duration: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Connections != 40 || res.Connected != 20 || res.Refused != 20 {
		t.Errorf("result %+v, want 40 connections: 20 connected, 20 refused", res)
	}
}

func TestCPUOverhead(t *testing.T) {
	t.Parallel()
	// Work per connection: client + fleet + irq over 1,000,000 connections,
	// so each CPU second is 1 µs per connection.
	sample := func(on bool, work float64) cpuSample {
		return cpuSample{observer: on, load: LoadResult{Connections: 1_000_000, UserCPU: work / 2, SystemCPU: work / 2}}
	}
	samples := []cpuSample{
		sample(false, 80), sample(true, 83), // +3
		sample(true, 90), sample(false, 89), // +1
		sample(false, 70), sample(true, 75), // +5
	}
	o, ok := cpuOverhead(samples)
	if !ok {
		t.Fatal("no overhead from three pairs")
	}
	want := overhead{off: 80, on: 83, cost: 3, lo: 1, hi: 5}
	if diff := cmp.Diff(want, o, cmp.AllowUnexported(overhead{}), cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if b := o.bound(2); b != 3 {
		t.Errorf("bound with programs at 2 µs = %v, want the paired 3", b)
	}
	if b := o.bound(4); b != 4 {
		t.Errorf("bound with programs at 4 µs = %v, want the programs' 4", b)
	}
	if _, ok := cpuOverhead(samples[:1]); ok {
		t.Error("an overhead from a single round")
	}
	if pct := atRate(1.5, passiveCPURate); pct != 3 {
		t.Errorf("1.5 µs per connection at 20,000/s = %v %% of a core, want 3", pct)
	}
}

func TestPassiveGoals(t *testing.T) {
	t.Parallel()
	good := func() *passiveResult {
		return &passiveResult{
			slice: 2,
			with:  detectRun{ran: true, detected: []float64{0.4, 0.6}, fromEarliest: []float64{0.41, 0.61}, triggers: 5},
			without: detectRun{ran: true, w1: 63, w3: 93, detected: []float64{70, 71},
				fromEarliest: []float64{70, 71}},
			cpu: cpuResult{
				samples: []cpuSample{
					{observer: false, load: LoadResult{Connections: 1e6, UserCPU: 80}},
					{observer: true, load: LoadResult{Connections: 1e6, UserCPU: 81}},
				},
				progNs: 500 * 1e6, progRuns: 6e6, progConns: 1e6, // 0.5 µs per connection
			},
			mem: memResult{targets: 1_000_000, maps: []bpfMapMemory{
				{Name: "watch4", Bytes: 40 << 20}, {Name: "watch6", Bytes: 16 << 20}, {Name: "stats", Bytes: 70 << 20},
			}},
		}
	}
	met := func(r *passiveResult) map[string]bool {
		s := &Scenario{}
		passiveGoals(s, r)
		out := map[string]bool{}
		for _, g := range s.Goals {
			out[strings.SplitN(g.What, " ", 2)[0]] = g.Met
		}
		return out
	}
	all := map[string]bool{"refusing": true, "active": true, "0": true, "observer": true, "watch": true}
	for _, tc := range []struct {
		name   string
		change func(*passiveResult)
		want   map[string]bool
	}{
		{name: "every goal met", change: func(*passiveResult) {}, want: all},
		{name: "passive detection at 1 s", change: func(r *passiveResult) { r.with.fromEarliest[1] = 1.0 }, want: map[string]bool{"refusing": false}},
		{name: "a refusing target not detected", change: func(r *passiveResult) { r.with.detected = r.with.detected[:1] }, want: map[string]bool{"refusing": false}},
		{name: "active detection after W3", change: func(r *passiveResult) { r.without.detected[1] = 94 }, want: map[string]bool{"active": false}},
		{name: "a false trigger", change: func(r *passiveResult) { r.with.falseTriggers = 1 }, want: map[string]bool{"0": false}},
		{name: "a trigger without a passive block", change: func(r *passiveResult) { r.without.triggers = 1 }, want: map[string]bool{"0": false}},
		{name: "programs over 1.5 µs", change: func(r *passiveResult) { r.cpu.progNs = 1600 * 1e6 }, want: map[string]bool{"observer": false}},
		{name: "paired difference over 1.5 µs", change: func(r *passiveResult) { r.cpu.samples[1].load.UserCPU = 82 }, want: map[string]bool{"observer": false}},
		{name: "watch maps over 64 MiB", change: func(r *passiveResult) { r.mem.maps[0].Bytes = 49 << 20 }, want: map[string]bool{"watch": false}},
		{name: "quick: active detection not a goal", change: func(r *passiveResult) { r.quick = true; r.without.detected = nil },
			want: map[string]bool{"active": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good()
			tc.change(r)
			want := map[string]bool{}
			for k, v := range all {
				want[k] = v
			}
			for k, v := range tc.want {
				want[k] = v
			}
			if tc.name == "quick: active detection not a goal" {
				delete(want, "active")
			}
			if diff := cmp.Diff(want, met(r)); diff != "" {
				t.Errorf("goals met (-want +got)\n%s", diff)
			}
		})
	}
}

func TestParseCPUStat(t *testing.T) {
	t.Parallel()
	got, err := parseCPUStat("cpu  100 5 50 1000 20 3 7 9 0 0")
	if err != nil {
		t.Fatal(err)
	}
	// busy: user, nice, system, irq, softirq; steal and guest left out.
	if want := (cpuStat{busy: 165, total: 1185, irq: 10, steal: 9}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5", "cpu 1 2 x 4 5", "cpu 1 2"} {
		if _, err := parseCPUStat(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestNewFDs(t *testing.T) {
	t.Parallel()
	if diff := cmp.Diff([]int{5, 9}, newFDs([]int{3, 4, 7}, []int{3, 4, 5, 7, 9})); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if got := newFDs([]int{3}, []int{3}); len(got) != 0 {
		t.Errorf("got %v, want none", got)
	}
}

func TestDetectRunCount(t *testing.T) {
	t.Parallel()
	slice := netip.MustParsePrefix("198.19.32.12/30")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	evs := []faultEvent{
		{Kind: "passive", Target: "198.19.32.12:80", To: "recheck", Time: t0},
		{Kind: "state", Target: "198.19.32.12:80", To: "unhealthy", Time: t0.Add(time.Second)},
		{Kind: "state", Target: "198.19.32.12:80", To: "unhealthy", Time: t0.Add(2 * time.Second)}, // not the first
		{Kind: "state", Target: "198.19.32.13:80", To: "healthy", Time: t0},
		{Kind: "passive", Target: "198.19.32.1:80", To: "recheck", Time: t0},
		{Kind: "state", Target: "198.19.32.2:80", To: "unhealthy", Time: t0},
		{Kind: "route", Target: "198.19.32.3:80", To: "removed", Time: t0},
	}
	var r detectRun
	detected := map[netip.Addr]time.Time{}
	r.count(evs, slice, detected)
	if r.triggers != 2 || r.falseTriggers != 1 || r.falseUnhealthy != 1 {
		t.Errorf("triggers %d, false triggers %d, false unhealthy %d; want 2, 1, 1", r.triggers, r.falseTriggers, r.falseUnhealthy)
	}
	want := map[netip.Addr]time.Time{netip.MustParseAddr("198.19.32.12"): t0.Add(time.Second)}
	if diff := cmp.Diff(want, detected, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("detected (-want +got)\n%s", diff)
	}
}

func TestPassiveConfig(t *testing.T) {
	t.Parallel()
	p := passivePlan{targets: netip.MustParsePrefix("198.19.32.0/28"), interval: 30 * time.Second, timeout: time.Second, fall: 3}
	with, without := passiveConfig(p, true), passiveConfig(p, false)
	if !strings.Contains(with, "passive: {failures: 3, window: 10s, action: recheck}") {
		t.Errorf("config with passive evidence has no passive block:\n%s", with)
	}
	if strings.Contains(without, "failures") {
		t.Errorf("config without passive evidence has a passive block:\n%s", without)
	}
	if strings.Replace(with, ", passive: {failures: 3, window: 10s, action: recheck}", "", 1) != without {
		t.Errorf("the configs differ by more than the passive block:\n%s\n%s", with, without)
	}
}
