package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/sondeprobe/sonde/config/discovery"
)

// TestUnresolvedNames checks that a name that does not resolve leaves the
// configuration valid: the pool probes the rest, and lists the name with
// why.
func TestUnresolvedNames(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, `checks:
  web: {protocol: http}
  six: {protocol: http, ip_family: ip6}
pools:
  - {name: p, check: web, targets: ["127.0.0.1", "nxdomain.test", "api-2.internal:8080"]}
  - {name: q, check: six, targets: ["v4only.test", "v6only.test"]}
`, "")
	if diff := cmp.Diff([]string{"127.0.0.1:80", "api-2.internal=198.18.1.20:8080"}, endpoints(cfg, 0)); diff != "" {
		t.Errorf("pool p members (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"v6only.test=[2001:db8::6]:80"}, endpoints(cfg, 1)); diff != "" {
		t.Errorf("pool q members (-want +got):\n%s", diff)
	}
	type un struct {
		Host string
		Port uint16
		Err  string
	}
	got := func(p *Pool) []un {
		var out []un
		for _, u := range p.Unresolved {
			out = append(out, un{u.Host, u.Port, u.Err})
		}
		return out
	}
	want := []un{{"nxdomain.test", 80, `cannot resolve "nxdomain.test": lookup nxdomain.test: no such host`}}
	if diff := cmp.Diff(want, got(cfg.Pools[0])); diff != "" {
		t.Errorf("pool p unresolved (-want +got):\n%s", diff)
	}
	want = []un{{"v4only.test", 80, `"v4only.test" has no IPv6 address`}}
	if diff := cmp.Diff(want, got(cfg.Pools[1])); diff != "" {
		t.Errorf("pool q unresolved (-want +got):\n%s", diff)
	}
	names := cfg.DiscoveryPools()[0].Names
	if len(names) != 2 || names[0].Host != "nxdomain.test" || names[0].Seed == nil || names[0].Seed.Err == nil ||
		names[1].Host != "api-2.internal" || names[1].Port != 8080 {
		t.Errorf("pool p names = %+v, want nxdomain.test (failed) and api-2.internal:8080", names)
	}
	if cfg.Static().Pools[0].Members == nil || len(cfg.Static().Pools[0].Members) != 1 {
		t.Errorf("static pool p members = %v, want only the address", cfg.Static().Pools[0].Members)
	}
}

// TestLowestAddress checks that a name's target is the lowest address of
// its family, whatever order the server answers in.
func TestLowestAddress(t *testing.T) {
	t.Parallel()
	opt := testOptions()
	opt.Resolver = fakeResolver{"rr.internal": {"198.18.1.31", "198.18.1.30", "2001:db8::31", "2001:db8::30"}}
	cfg, err := Parse([]byte("checks: {c: {protocol: http}}\npools: [{name: p, check: c, targets: [rr.internal]}]\n"), "", opt)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"rr.internal=198.18.1.30:80", "rr.internal=[2001:db8::30]:80"}, endpoints(cfg, 0)); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
}

func lbls(kv ...string) labels.Labels { return labels.FromStrings(kv...) }

// TestWithFound checks found targets merged with a pool's own: labels,
// port rules, disabled entries, the shard, targets the check cannot probe,
// and that targets found earlier are replaced.
func TestWithFound(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, `checks:
  web: {protocol: http, port: 8080}
  tcp: {protocol: tcp}
pools:
  - name: web
    check: web
    labels: {team: edge}
    targets: ["198.18.0.1"]
    disabled: ["198.18.0.3:8080", "skip.internal"]
    static_configs: [{targets: ["198.18.0.9"]}]
  - {name: tcp, check: tcp, targets: ["198.18.0.1:22"], static_configs: [{targets: ["198.18.0.1:22"]}]}
`, "")
	found := map[string]discovery.Found{
		"web": {Targets: []discovery.Target{
			{Addr: netip.MustParseAddr("198.18.0.2"), Labels: lbls("team", "edge", "zone", "a")},
			{Addr: netip.MustParseAddr("198.18.0.3"), Labels: lbls("team", "edge", "zone", "b")},
			{Addr: netip.MustParseAddr("198.18.0.4"), Port: 9000, Host: "skip.internal", Labels: lbls("team", "edge")},
			{Addr: netip.MustParseAddr("198.18.0.1"), Labels: lbls("zone", "dup")}, // the file's wins
		}},
		"tcp": {Targets: []discovery.Target{
			{Addr: netip.MustParseAddr("198.18.0.5")}, // no port: tcp has none
			{Addr: netip.MustParseAddr("198.18.0.6"), Port: 23, Labels: lbls("rack", "r1")},
		}},
	}
	n, err := cfg.WithFound(found)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for pos, id := range n.Pools[0].Members {
		s := n.Targets[id].AddrPort().String() + " " + n.Pools[0].MemberLabels(pos).String()
		if slices.Contains(n.Pools[0].Disabled, id) {
			s += " disabled"
		}
		got = append(got, s)
	}
	want := []string{
		`198.18.0.1:8080 {team="edge"}`,
		`198.18.0.2:8080 {team="edge", zone="a"}`,
		`198.18.0.3:8080 {team="edge", zone="b"} disabled`,
		`198.18.0.4:9000 {team="edge"} disabled`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pool web (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"198.18.0.1:22", "198.18.0.6:23"}, endpoints(n, 1)); diff != "" {
		t.Errorf("pool tcp (-want +got):\n%s", diff)
	}
	if u := n.Pools[1].Unresolved; len(u) != 1 || u[0].Host != "198.18.0.5" || !strings.Contains(u[0].Err, "no port") {
		t.Errorf("pool tcp unresolved = %+v, want 198.18.0.5 without a port", u)
	}
	// Each pool's label names are those of its own targets, though the
	// pools' label sets are shared.
	for i, want := range [][]string{{"team", "zone"}, {"rack"}} {
		if diff := cmp.Diff(want, n.Pools[i].LabelNames()); diff != "" {
			t.Errorf("pool %s label names (-want +got):\n%s", n.Pools[i].Name, diff)
		}
	}
	if n.Static() != cfg.Static() || len(cfg.Pools[0].Members) != 1 {
		t.Errorf("WithFound changed its receiver or lost the static configuration")
	}
	checkInvariants(t, n)

	// Found again: the earlier found targets go.
	m, err := n.WithFound(map[string]discovery.Found{"web": {Targets: []discovery.Target{{Addr: netip.MustParseAddr("198.18.0.7")}}}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"198.18.0.1:8080", "198.18.0.7:8080"}, endpoints(m, 0)); diff != "" {
		t.Errorf("pool web after a second update (-want +got):\n%s", diff)
	}
	if got := m.Pools[0].MemberLabels(1); !got.IsEmpty() {
		t.Errorf("a found target without labels has %v", got)
	}
	// Nothing found: the static configuration itself.
	if e, err := n.WithFound(nil); err != nil || e != cfg.Static() {
		t.Errorf("WithFound(nil) = %p, %v; want the static configuration %p", e, err, cfg.Static())
	}
}

// TestWithFoundShardAndLimit checks that found targets are filtered by the
// shard and counted against the limit.
func TestWithFoundShardAndLimit(t *testing.T) {
	t.Parallel()
	opt := testOptions()
	opt.MaxTargets = 3
	opt.Shard = Shard{Index: 1, Count: 2}
	cfg, err := Parse([]byte("checks: {c: {protocol: tcp, port: 22}}\npools: [{name: p, check: c, targets: [198.18.0.1], static_configs: [{targets: [x:1]}]}]\n"), "", opt)
	if err != nil {
		t.Fatal(err)
	}
	var ts []discovery.Target
	for i := range 2 {
		ts = append(ts, discovery.Target{Addr: netip.AddrFrom4([4]byte{198, 18, 1, byte(i)})})
	}
	n, err := cfg.WithFound(map[string]discovery.Found{"p": {Targets: ts}})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range n.Pools[0].Members {
		if !opt.Shard.Owns(n.Targets[id].AddrPort()) {
			t.Errorf("target %v is not the shard's", n.Targets[id].AddrPort())
		}
	}
	ts = append(ts, discovery.Target{Addr: netip.MustParseAddr("198.18.2.1")})
	if _, err := cfg.WithFound(map[string]discovery.Found{"p": {Targets: ts}}); err == nil ||
		err.Error() != `pool "p": 198.18.2.1 brings the number of targets over the limit of 3` {
		t.Errorf("over the limit: %v", err)
	}
}
