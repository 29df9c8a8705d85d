package bench

import (
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/bench/bpfobjs"
)

func TestCPUOverhead(t *testing.T) {
	t.Parallel()
	// Work per connection: client + fleet + irq over 1,000,000 connections,
	// so each CPU second is 1 µs per connection.
	sample := func(on bool, work float64) cpuSample {
		return cpuSample{observer: on, conns: 1_000_000, client: work / 2, benchCPU: work / 2}
	}
	samples := []cpuSample{
		sample(false, 80), sample(true, 83), // +3
		sample(true, 90), sample(false, 89), // +1
		sample(false, 70), sample(true, 75), // +5
	}
	o, ok := cpuOverhead(samples, 2)
	if !ok {
		t.Fatal("no overhead from three pairs")
	}
	// Differences +3, +1, +5 with the programs attached twice: per
	// attachment 1.5, 0.5, 2.5; mean 1.5, standard deviation 1, standard
	// error 1/√3.
	want := overhead{off: 80, on: 83, attachments: 2, cost: 1.5, lo: 0.5, hi: 2.5, mean: 1.5, se: 1 / math.Sqrt(3)}
	if diff := cmp.Diff(want, o, cmp.AllowUnexported(overhead{}), cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if b := o.bound(1); b != 1.5 {
		t.Errorf("bound with programs at 1 µs = %v, want the paired mean 1.5", b)
	}
	if b := (overhead{cost: 2, mean: 1}).bound(0.5); b != 1 {
		t.Errorf("bound with the median above the mean = %v, want the mean 1", b)
	}
	if b := o.bound(4); b != 4 {
		t.Errorf("bound with programs at 4 µs = %v, want the programs' 4", b)
	}
	if _, ok := cpuOverhead(samples[:2], 1); ok {
		t.Error("an overhead from a single pair")
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
					{observer: false, conns: 1e6, client: 80},
					{observer: true, conns: 1e6, client: 81},
					{observer: true, conns: 1e6, client: 82},
					{observer: false, conns: 1e6, client: 81},
				},
				progNs: 500 * 1e6, progRuns: 6e6, progConns: 1e6, // 0.5 µs per connection
			},
			mem: memResult{targets: 1_000_000, maps: []bpfobjs.Map{
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
		{name: "paired difference over 1.5 µs", change: func(r *passiveResult) {
			// 10 µs more with the programs attached cpuAttachments (6) times.
			r.cpu.samples[1].client, r.cpu.samples[2].client = 90, 91
		}, want: map[string]bool{"observer": false}},
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
