package config

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/config/fleet"
	"github.com/sondeprobe/sonde/internal/safefile"
)

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
	t.Parallel()
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
	t.Parallel()
	const yaml = `
checks:
  c: {protocol: tcp, port: 80}
pools:
  - {name: one, check: c, targets: ["198.18.0.1"], disabled: ["198.18.0.1"]}
`
	owner := fleet.ShardOf(netip.MustParseAddrPort("198.18.0.1:80"), 2)
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
	t.Parallel()
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
