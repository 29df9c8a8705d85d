package server

import (
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/config"
)

// TestUpdatePool changes a pool's targets the way service discovery does,
// without a file: added targets are probed and shown, removed ones go,
// a target also listed by another pool is one target in both, and targets
// the update does not name keep their state.
func TestUpdatePool(t *testing.T) {
	a, b, c := newGate(t), newGate(t), newGate(t)
	td := startDaemon(t, fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 100ms, timeout: 2s, rise: 1, fall: 2}
pools:
  - {name: disc, check: web, targets: [%q]}
  - {name: static, check: web, targets: [%q]}
`, a.addr(), b.addr()))
	keep := td.waitState(t, "static", b.addr(), "healthy")
	td.waitState(t, "disc", a.addr(), "healthy")
	time.Sleep(4 * sinceSlack) // a state started afresh by the update would have a later since
	ep := func(g *gate) config.Endpoint { return config.Endpoint{AddrPort: netip.MustParseAddrPort(g.addr())} }

	if err := td.d.UpdatePool("disc", []config.Endpoint{ep(c), ep(b)}, []config.Endpoint{ep(a)}); err != nil {
		t.Fatal(err)
	}
	if _, ok := td.target(t, "disc", a.addr()); ok {
		t.Error("a removed target is still listed")
	}
	td.waitState(t, "disc", c.addr(), "healthy")
	shared := td.waitState(t, "disc", b.addr(), "healthy")
	k, _ := td.target(t, "static", b.addr())
	if shared.ID != keep.ID || k.ID != keep.ID || k.StateSince.Sub(keep.StateSince).Abs() > sinceSlack {
		t.Errorf("the target both pools list: ids %d and %d since %v, want id %d since %v", shared.ID, k.ID, k.StateSince, keep.ID, keep.StateSince)
	}
	for _, tt := range []struct {
		pool string
		add  []config.Endpoint
		want string
	}{
		{"nope", nil, `pool "nope": no such pool`},
		{"disc", []config.Endpoint{{AddrPort: netip.AddrPortFrom(netip.IPv4Unspecified(), 80)}}, `pool "disc": target 0.0.0.0:80: want an IP address without zone`},
	} {
		if err := td.d.UpdatePool(tt.pool, tt.add, nil); err == nil || err.Error() != tt.want {
			t.Errorf("UpdatePool(%s, %v) = %v, want %q", tt.pool, tt.add, err, tt.want)
		}
	}
}

// BenchmarkUpdatePool100k measures what a service-discovery update of
// 100,000 targets costs: added to a pool next to 100,000 running targets,
// then removed again, with the daemon's engine stopped and stepped by hand
// so that the measure holds the update (matching, edit, generation, the
// shards applying it) and not the probes that follow. It reports process
// CPU time per update.
func BenchmarkUpdatePool100k(b *testing.B) {
	const n = 100_000
	td := startDaemonWith(b, `
checks:
  web: {protocol: tcp, port: 9, tcp_mode: connect, interval: 1h, timeout: 1s}
pools:
  - {name: base, check: web, targets: ["127.4.0.0/16", "127.5.0.0/17", "127.5.128.0/19"]}
  - {name: disc, check: web, targets: ["127.9.0.1"]}
`, func(o *Options) { o.NoMemoryLimit = true })
	d := td.d
	d.cancel() // no probing: the engine and the pools stop
	<-d.done
	if got := d.cur.Load().targets; got < n {
		b.Fatalf("%d base targets, want %d", got, n)
	}
	add := make([]config.Endpoint, n)
	for i := range add {
		add[i] = config.Endpoint{AddrPort: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 8, byte(i >> 8), byte(i)}), 9)}
	}
	step := func() { d.engine.Step(d.opt.Clock.Nanotime()) }
	var addCPU, removeCPU time.Duration
	b.ReportAllocs()
	for b.Loop() {
		c0 := processCPU()
		if err := d.UpdatePool("disc", add, nil); err != nil {
			b.Fatal(err)
		}
		step()
		c1 := processCPU()
		if err := d.UpdatePool("disc", nil, add); err != nil {
			b.Fatal(err)
		}
		step()
		addCPU += c1 - c0
		removeCPU += processCPU() - c1
	}
	b.ReportMetric(float64(addCPU.Milliseconds())/float64(b.N), "add-cpu-ms/100k")
	b.ReportMetric(float64(removeCPU.Milliseconds())/float64(b.N), "remove-cpu-ms/100k")
}

// processCPU returns the process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
