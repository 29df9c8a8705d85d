package config

import (
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkLoadMillion loads configs of a million targets and more from
// CIDR blocks: "one-block" is a single /12 (1,048,576 targets) in one pool;
// "shared" adds a /13 of the same block in a second pool (shared targets) and
// a /13 with a second check of the same probe class (followers), 2,097,152
// listings deduplicated into 1,572,864 targets and 1,048,576 streams.
func BenchmarkLoadMillion(b *testing.B) {
	cases := []struct {
		name, yaml string
		targets    int
	}{
		{"one-block", `checks: {fleet: {preset: globalaccelerator, port: 443}}
pools: [{name: fleet, check: fleet, targets: ["10.0.0.0/12"]}]
`, 1 << 20},
		{"shared", `checks:
  fleet: {preset: globalaccelerator, port: 443}
  slow: {preset: globalaccelerator, port: 443, interval: 10s}
pools:
  - {name: fleet, check: fleet, targets: ["10.0.0.0/12"]}
  - {name: half, check: fleet, targets: ["10.0.0.0/13"]}
  - {name: slow, check: slow, targets: ["10.8.0.0/13"]}
`, 3 << 19},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			data := []byte(tc.yaml)
			b.ReportAllocs()
			var cfg *Config
			for b.Loop() {
				var err error
				if cfg, err = Parse(data, "", testOptions()); err != nil {
					b.Fatal(err)
				}
			}
			if len(cfg.Targets) != tc.targets {
				b.Fatalf("%d targets, want %d", len(cfg.Targets), tc.targets)
			}
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapAlloc)/float64(len(cfg.Targets)), "heap-bytes/target")
			runtime.KeepAlive(cfg)
		})
	}
}

// BenchmarkLoadMillionSharded loads the one-block million as one shard of N:
// every shard hashes every listed target N times, so the load costs more
// with N while the shard keeps about 1/N of the targets.
func BenchmarkLoadMillionSharded(b *testing.B) {
	data := []byte(`checks: {fleet: {preset: globalaccelerator, port: 443}}
pools: [{name: fleet, check: fleet, targets: ["10.0.0.0/12"]}]
`)
	for _, n := range []int{4, 64} {
		b.Run(fmt.Sprintf("shards-%d", n), func(b *testing.B) {
			opt := testOptions()
			opt.Shard = Shard{Index: 1, Count: n}
			b.ReportAllocs()
			var cfg *Config
			for b.Loop() {
				var err error
				if cfg, err = Parse(data, "", opt); err != nil {
					b.Fatal(err)
				}
			}
			if want := (1 << 20) / n; len(cfg.Targets) < want*9/10 || len(cfg.Targets) > want*11/10 {
				b.Fatalf("%d targets, want about %d", len(cfg.Targets), want)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(1<<20), "ns/listed-target")
		})
	}
}
