package config

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/internal/safefile"
)

func TestParseShard(t *testing.T) {
	tests := []struct {
		in      string
		want    Shard
		wantErr string
	}{
		{"0/1", Shard{0, 1}, ""},
		{"2/3", Shard{2, 3}, ""},
		{"1023/1024", Shard{1023, 1024}, ""},
		{"3/3", Shard{}, "shard index 3 is out of range 0..2 for 3 shards"},
		{"-1/3", Shard{}, "shard index -1 is out of range 0..2 for 3 shards"},
		{"0/0", Shard{}, "shard count 0 is out of range 1..1024"},
		{"0/1025", Shard{}, "shard count 1025 is out of range 1..1024"},
		{"1", Shard{}, "want i/N, shard i of N shards (0 <= i < N)"},
		{"", Shard{}, "want i/N, shard i of N shards (0 <= i < N)"},
		{"a/3", Shard{}, `shard index "a" is not a number; want i/N with i in 0..2`},
		{"1/x", Shard{}, `shard count "x" is not a number; want i/N with N in 1..1024`},
		{"1/3/4", Shard{}, `shard count "3/4" is not a number; want i/N with N in 1..1024`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseShard(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("ParseShard(%q) = %v, %v; want error %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseShard(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			if got.String() != tt.in {
				t.Errorf("String() = %q, want %q", got.String(), tt.in)
			}
		})
	}
	if s := (Shard{}); s.String() != "0/1" || !s.Owns(netip.MustParseAddrPort("198.18.0.1:80")) {
		t.Errorf("zero Shard is %s and does not own every target; want 0/1 owning all", s)
	}
}

// TestShardOfStable pins the hash: a change moves targets between shards
// when a fleet upgrades, which must be a decision, not an accident.
func TestShardOfStable(t *testing.T) {
	want := map[string][5]int{ // shards of 2, 3, 4, 10 and 1024
		"198.18.0.1:80":     {1, 1, 3, 3, 616},
		"198.18.0.2:80":     {1, 1, 1, 1, 873},
		"198.18.0.1:443":    {1, 2, 2, 2, 167},
		"[2001:db8::1]:443": {0, 0, 0, 7, 418},
		"10.0.0.7:8080":     {1, 1, 1, 5, 851},
		"127.0.0.1:9123":    {0, 0, 0, 0, 853},
	}
	for ep, w := range want {
		a := netip.MustParseAddrPort(ep)
		var got [5]int
		for i, n := range []int{2, 3, 4, 10, 1024} {
			got[i] = ShardOf(a, n)
		}
		if got != w {
			t.Errorf("ShardOf(%s) over 2, 3, 4, 10, 1024 shards = %v, want %v", ep, got, w)
		}
	}
	// An IPv4 address is one endpoint however it is written.
	if a, b := netip.MustParseAddrPort("198.18.0.1:80"), netip.MustParseAddrPort("[::ffff:198.18.0.1]:80"); ShardOf(a, 7) != ShardOf(b, 7) {
		t.Error("IPv4 and IPv4-mapped forms of one endpoint land in different shards")
	}
}

// TestShardBalanceAndMovement checks rendezvous hashing over 20,000
// endpoints: shards get even slices, and going from N to N+1 shards moves
// about 1/(N+1) of the endpoints, every one of them to the new shard.
func TestShardBalanceAndMovement(t *testing.T) {
	const endpoints = 20000
	eps := make([]netip.AddrPort, 0, endpoints)
	a := netip.MustParseAddr("10.0.0.0")
	for i := range endpoints {
		eps = append(eps, netip.AddrPortFrom(a, uint16(80+i%4)))
		if i%4 == 3 {
			a = a.Next()
		}
	}
	prev := make([]int, endpoints)
	for n := 1; n <= 8; n++ {
		counts := make([]int, n)
		moved := 0
		for i, ep := range eps {
			s := ShardOf(ep, n)
			counts[s]++
			if s != prev[i] {
				moved++
				if s != n-1 {
					t.Fatalf("%s moved from shard %d to %d going to %d shards; only the new shard %d may take targets", ep, prev[i], s, n, n-1)
				}
			}
			prev[i] = s
		}
		mean := float64(endpoints) / float64(n)
		for s, c := range counts {
			if d := float64(c)/mean - 1; d < -0.06 || d > 0.06 {
				t.Errorf("%d shards: shard %d has %d endpoints, more than 6 %% off the mean %.0f", n, s, c, mean)
			}
		}
		if n > 1 {
			share, want := float64(moved)/endpoints, 1/float64(n)
			if share < want-0.02 || share > want+0.02 {
				t.Errorf("going to %d shards moved %.1f %% of endpoints, want %.1f %% ± 2", n, 100*share, 100*want)
			}
		}
	}
}

// shardConfig has what sharding must keep whole or split exactly: a block,
// probe streams shared by pools and checks (P4, P5), host names, disabled
// entries of every shard and a targets file.
const shardConfig = `
checks:
  fast: {protocol: tcp, port: 7000, interval: 1s}
  slow: {protocol: tcp, port: 7000, interval: 5s}
  web:  {protocol: http, path: /health}
pools:
  - name: blocks
    check: fast
    targets: ["198.18.0.0/24", "198.18.1.5:7001", "198.18.1.6:7001"]
    disabled: ["198.18.0.0/28"]
    max_unhealthy_percent: 50
  - name: shared
    check: slow
    targets: ["198.18.0.0/25", "198.18.2.1"]
    disabled: ["198.18.0.9", "198.18.0.10", "198.18.0.11"]
  - name: names
    check: web
    targets: ["api-1.internal", "api-2.internal", "alias.internal", "198.18.1.20:80"]
    targets_file: targets.txt
  - name: tiny
    check: web
    targets: ["198.18.3.1"]
`

// member is a pool member by what it is, not by its shard-local id.
type member struct {
	Pool, Check, Endpoint, Host string
	Disabled                    bool
}

func membersOf(cfg *Config) []member {
	var out []member
	for _, p := range cfg.Pools {
		for _, id := range p.Members {
			t := cfg.Targets[id]
			_, dis := slices.BinarySearch(p.Disabled, id)
			out = append(out, member{p.Name, cfg.Checks[t.Check].Name, t.AddrPort().String(), cfg.Hostnames[id], dis})
		}
	}
	return out
}

// TestShardsPartitionConfig loads one configuration whole and as every shard
// of N: the shards' pool members are the whole one's, each exactly once; a
// probe stream and an endpoint are never split; streams and probe rates add
// up.
func TestShardsPartitionConfig(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "targets.txt", "198.18.4.0/28\n198.18.4.100:8080 # one more\n")
	opt := testOptions()
	whole, err := Parse([]byte(shardConfig), dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	all := membersOf(whole)
	if len(all) < 400 {
		t.Fatalf("whole config has %d members, want the blocks expanded", len(all))
	}
	for _, n := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var got []member
			owner := map[netip.AddrPort]int{}
			streams, targets := 0, 0
			rate := 0.0
			for i := range n {
				opt.Shard = Shard{Index: i, Count: n}
				cfg, err := Parse([]byte(shardConfig), dir, opt)
				if err != nil {
					t.Fatalf("shard %d/%d: %v", i, n, err)
				}
				if cfg.Shard != opt.Shard || len(cfg.Pools) != len(whole.Pools) {
					t.Fatalf("shard %d/%d: Shard %v and %d pools, want %v and %d", i, n, cfg.Shard, len(cfg.Pools), opt.Shard, len(whole.Pools))
				}
				for id, tg := range cfg.Targets {
					if o, ok := owner[tg.AddrPort()]; ok && o != i {
						t.Errorf("endpoint %s is in shards %d and %d", tg.AddrPort(), o, i)
					}
					owner[tg.AddrPort()] = i
					if ld := cfg.Targets[tg.Leader()]; ld.AddrPort() != tg.AddrPort() {
						t.Errorf("shard %d: target %d (%s) led by %d (%s)", i, id, tg.AddrPort(), tg.Leader(), ld.AddrPort())
					}
				}
				got = append(got, membersOf(cfg)...)
				streams += cfg.Streams()
				targets += len(cfg.Targets)
				rate += cfg.ProbeRates().Total
			}
			want := slices.SortedFunc(slices.Values(all), cmpMember)
			slices.SortFunc(got, cmpMember)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("members of the %d shards differ from the whole config's (-want +got):\n%s", n, diff)
			}
			if streams != whole.Streams() || targets != len(whole.Targets) {
				t.Errorf("shards have %d streams and %d targets, whole config %d and %d", streams, targets, whole.Streams(), len(whole.Targets))
			}
			if d := rate - whole.ProbeRates().Total; d > 1e-6 || d < -1e-6 {
				t.Errorf("shards probe %.3f/s in total, whole config %.3f/s", rate, whole.ProbeRates().Total)
			}
		})
	}
}

func cmpMember(a, b member) int {
	return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
}

// TestShardEmptySlice: a shard that owns none of a pool's targets keeps the
// pool, empty; a shard may own no target at all.
func TestShardEmptySlice(t *testing.T) {
	const yaml = `
checks:
  c: {protocol: tcp, port: 80}
pools:
  - {name: one, check: c, targets: ["198.18.0.1"], disabled: ["198.18.0.1"]}
`
	owner := ShardOf(netip.MustParseAddrPort("198.18.0.1:80"), 2)
	opt := testOptions()
	for i := range 2 {
		opt.Shard = Shard{Index: i, Count: 2}
		cfg, err := Parse([]byte(yaml), "", opt)
		if err != nil {
			t.Fatalf("shard %d/2: %v", i, err)
		}
		wantTargets := map[bool]int{true: 1, false: 0}[i == owner]
		if len(cfg.Pools) != 1 || len(cfg.Targets) != wantTargets || len(cfg.Pools[0].Members) != wantTargets || len(cfg.Pools[0].Disabled) != wantTargets {
			t.Errorf("shard %d/2 (owner %d): %d pools, %d targets, pool %+v", i, owner, len(cfg.Pools), len(cfg.Targets), cfg.Pools[0])
		}
	}
}

// TestLoadFiles lists the files a configuration reads, for the watcher.
func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "targets.txt", "198.18.4.1\n")
	writeFile(t, dir, "secret.txt", "s\n")
	writeFile(t, dir, "hook.secret", "h\n")
	writeFile(t, dir, "sonde.yaml", `
checks:
  a: {protocol: http, port: 80, auth_token: {secret_file: secret.txt}}
  b: {protocol: http, port: 80, path: /b, auth_token: {secret_file: secret.txt}}
pools:
  - {name: p, check: a, targets_file: targets.txt}
  - {name: q, check: b, targets_file: targets.txt}
webhooks:
  - {url: "http://127.0.0.1:9124/", secret_file: hook.secret}
  - {url: "http://127.0.0.1:9125/", secret_file: secret.txt}
`)
	path := filepath.Join(dir, "sonde.yaml")
	cfg, err := Load(path, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	want := []safefile.File{
		{Path: path, Max: safefile.MaxConfig},
		{Path: filepath.Join(dir, "targets.txt"), Max: safefile.MaxTargets},
		{Path: filepath.Join(dir, "secret.txt"), Max: safefile.MaxSecret},
		{Path: filepath.Join(dir, "hook.secret"), Max: safefile.MaxSecret},
	}
	if diff := cmp.Diff(want, cfg.Files); diff != "" {
		t.Errorf("Files (-want +got):\n%s", diff)
	}
}
