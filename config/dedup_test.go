package config

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/config/fleet"
)

// row describes one target for comparison: endpoint, check name, leader id
// and whether it is disabled everywhere.
type row struct {
	EP       string
	Check    string
	Leader   uint32
	Disabled bool
}

func rows(cfg *Config) []row {
	out := make([]row, len(cfg.Targets))
	for id, t := range cfg.Targets {
		out[id] = row{EP: t.AddrPort().String(), Check: cfg.Checks[t.Check].Name, Leader: t.Leader(), Disabled: t.Disabled()}
	}
	return out
}

func TestDedup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		yaml     string
		targets  []row
		members  [][]uint32
		disabled [][]uint32
		streams  int
	}{
		{
			name: "pools sharing targets with one check share targets",
			yaml: `checks: {c: {protocol: tcp, port: 22}}
pools:
  - {name: a, check: c, targets: ["198.18.0.0/31", "198.18.0.5"]}
  - {name: b, check: c, targets: ["198.18.0.5", "198.18.0.1", "198.18.0.9"]}
`,
			targets: []row{{"198.18.0.0:22", "c", 0, false}, {"198.18.0.1:22", "c", 1, false}, {"198.18.0.5:22", "c", 2, false}, {"198.18.0.9:22", "c", 3, false}},
			members: [][]uint32{{0, 1, 2}, {1, 2, 3}},
			streams: 4,
		},
		{
			name: "two checks in one probe class: leader and followers",
			yaml: `checks:
  fast: {protocol: tcp, port: 22, interval: 1s, rise: 1}
  slow: {protocol: tcp, port: 22, interval: 30s, fall: 10, initial_state: unhealthy, jitter: 1s}
pools:
  - {name: a, check: slow, targets: ["198.18.0.1", "198.18.0.2"]}
  - {name: b, check: fast, targets: ["198.18.0.2", "198.18.0.3"]}
`,
			targets: []row{{"198.18.0.1:22", "slow", 0, false}, {"198.18.0.2:22", "slow", 1, false}, {"198.18.0.2:22", "fast", 1, false}, {"198.18.0.3:22", "fast", 3, false}},
			members: [][]uint32{{0, 1}, {2, 3}},
			streams: 3,
		},
		{
			name: "different ports are different streams",
			yaml: `checks:
  c80: {protocol: http, port: 80}
  c81: {protocol: http, port: 81}
pools:
  - {name: a, check: c80, targets: ["127.0.0.1", "127.0.0.2:81"]}
  - {name: b, check: c81, targets: ["127.0.0.1", "127.0.0.2"]}
`,
			// c80 and c81 are one class (the check's port is not part of it):
			// 127.0.0.2:81 is listed by both and shares one stream.
			targets: []row{{"127.0.0.1:80", "c80", 0, false}, {"127.0.0.2:81", "c80", 1, false}, {"127.0.0.1:81", "c81", 2, false}, {"127.0.0.2:81", "c81", 1, false}},
			members: [][]uint32{{0, 1}, {2, 3}},
			streams: 3,
		},
		{
			name: "different probes on one endpoint are different streams",
			yaml: `checks:
  a: {protocol: http, path: /a}
  b: {protocol: http, path: /b}
  c: {protocol: http, path: /a, timeout: 1s}
pools:
  - {name: a, check: a, targets: ["127.0.0.1"]}
  - {name: b, check: b, targets: ["127.0.0.1"]}
  - {name: c, check: c, targets: ["127.0.0.1"]}
`,
			targets: []row{{"127.0.0.1:80", "a", 0, false}, {"127.0.0.1:80", "b", 1, false}, {"127.0.0.1:80", "c", 2, false}},
			members: [][]uint32{{0}, {1}, {2}},
			streams: 3,
		},
		{
			name: "disabled in every pool vs in one",
			yaml: `checks:
  c: {protocol: tcp, port: 22}
  d: {protocol: tcp, port: 22, interval: 5s}
pools:
  - {name: a, check: c, targets: ["198.18.0.1", "198.18.0.2", "198.18.0.3"], disabled: ["198.18.0.1", "198.18.0.2"]}
  - {name: b, check: c, targets: ["198.18.0.2"]}
  - {name: e, check: d, targets: ["198.18.0.1", "198.18.0.4"], disabled: ["198.18.0.4"]}
`,
			// 198.18.0.1 with check c is disabled everywhere, so the stream
			// on 198.18.0.1:22 is led by its follower with check d.
			targets:  []row{{"198.18.0.1:22", "c", 3, true}, {"198.18.0.2:22", "c", 1, false}, {"198.18.0.3:22", "c", 2, false}, {"198.18.0.1:22", "d", 3, false}, {"198.18.0.4:22", "d", 4, true}},
			members:  [][]uint32{{0, 1, 2}, {1}, {3, 4}},
			disabled: [][]uint32{{0, 1}, nil, {4}},
			streams:  3,
		},
		{
			name: "host names change HTTP probes without host",
			yaml: `checks:
  plain: {protocol: http}
  hosted: {protocol: http, host: api.internal, interval: 5s}
  tcp: {protocol: tcp, port: 80}
pools:
  - {name: a, check: plain, targets: ["api-2.internal", "alias.internal", "198.18.1.20"]}
  - {name: b, check: hosted, targets: ["api-2.internal", "alias.internal"]}
  - {name: c, check: tcp, targets: ["198.18.1.20", "alias.internal"]}
`,
			targets: []row{{"198.18.1.20:80", "plain", 0, false}, {"198.18.1.20:80", "plain", 1, false}, {"198.18.1.20:80", "plain", 2, false},
				{"198.18.1.20:80", "hosted", 3, false}, {"198.18.1.20:80", "tcp", 4, false}},
			members: [][]uint32{{0, 1, 2}, {3}, {4}},
			streams: 5,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, tt.yaml, "")
			if diff := cmp.Diff(tt.targets, rows(cfg)); diff != "" {
				t.Errorf("targets (-want +got):\n%s", diff)
			}
			for i, p := range cfg.Pools {
				if diff := cmp.Diff(tt.members[i], p.Members); diff != "" {
					t.Errorf("pool %s members (-want +got):\n%s", p.Name, diff)
				}
				var wantDis []uint32
				if tt.disabled != nil {
					wantDis = tt.disabled[i]
				}
				if diff := cmp.Diff(wantDis, p.Disabled); diff != "" {
					t.Errorf("pool %s disabled (-want +got):\n%s", p.Name, diff)
				}
			}
			if got := cfg.Streams(); got != tt.streams {
				t.Errorf("Streams() = %d, want %d", got, tt.streams)
			}
			checkInvariants(t, cfg)
		})
	}
}

func TestDedupHostnames(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, `checks:
  plain: {protocol: http}
  tcp: {protocol: tcp, port: 80}
pools:
  - {name: a, check: plain, targets: ["api-2.internal", "alias.internal", "198.18.1.20"]}
  - {name: c, check: tcp, targets: ["198.18.1.20", "alias.internal", "api-2.internal"]}
`, "")
	want := map[uint32]string{1: "api-2.internal", 2: "alias.internal", 3: "alias.internal"}
	if diff := cmp.Diff(want, cfg.Hostnames); diff != "" {
		t.Errorf("Hostnames (-want +got):\n%s", diff)
	}

	// App Gateway's default probe sends Host 127.0.0.1 whatever the name,
	// over HTTP: two names of one address are one target. Over HTTPS the
	// name is still the TLS server name.
	cfg = mustParse(t, `checks:
  gw: {preset: appgateway}
  gws: {preset: appgateway, protocol: https}
pools:
  - {name: a, check: gw, targets: ["api-2.internal", "alias.internal"]}
  - {name: b, check: gws, targets: ["api-2.internal", "alias.internal"]}
`, "")
	if got := len(cfg.Pools[0].Members); got != 1 {
		t.Errorf("appgateway over http: %d targets for two names of one address, want 1", got)
	}
	if got := len(cfg.Pools[1].Members); got != 2 {
		t.Errorf("appgateway over https: %d targets for two names of one address, want 2 (two server names)", got)
	}
	checkInvariants(t, cfg)
}

// checkInvariants checks what must hold for every config: leaders lead
// themselves, share the follower's endpoint and class, and are enabled
// when the follower is; (address, port, check) is unique unless a host name
// changes the probe; members are ascending.
func checkInvariants(t *testing.T, cfg *Config) {
	t.Helper()
	seen := make(map[row]bool)
	for id, tg := range cfg.Targets {
		r := row{EP: tg.AddrPort().String(), Check: cfg.Checks[tg.Check].Name}
		if cfg.Checks[tg.Check].HostNameMatters() {
			r.EP += " " + cfg.Hostnames[uint32(id)] // the Host header tells these apart
		}
		if seen[r] {
			t.Errorf("target %d %v is not unique", id, r)
		}
		seen[r] = true
		l := cfg.Targets[tg.Leader()]
		if l.Leader() != tg.Leader() {
			t.Errorf("target %d: leader %d does not lead itself", id, tg.Leader())
		}
		if l.AddrPort() != tg.AddrPort() || cfg.Checks[l.Check].Class != cfg.Checks[tg.Check].Class {
			t.Errorf("target %d (%v) has leader %d (%v) of another endpoint or class", id, tg.AddrPort(), tg.Leader(), l.AddrPort())
		}
		if !tg.Disabled() && l.Disabled() {
			t.Errorf("target %d is enabled but its leader %d is disabled", id, tg.Leader())
		}
	}
	for _, p := range cfg.Pools {
		for i := 1; i < len(p.Members); i++ {
			if p.Members[i] <= p.Members[i-1] {
				t.Errorf("pool %s members not ascending: %v", p.Name, p.Members)
			}
		}
	}
}

func TestProbeRates(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, `checks:
  fast: {protocol: tcp, port: 22, interval: 500ms}
  slow: {protocol: tcp, port: 22, interval: 10s, unhealthy_interval: 4s}
  web:  {protocol: http, port: 22, interval: 1s}
pools:
  - {name: a, check: slow, targets: ["198.18.0.1", "198.18.0.2"]}
  - {name: b, check: fast, targets: ["198.18.0.1", "198.18.0.3"], disabled: ["198.18.0.3"]}
  - {name: c, check: web, targets: ["198.18.0.1"]}
`, "")
	// 198.18.0.1:22: one TCP stream (fast and slow: max(2, 0.25) = 2/s) plus
	// one HTTP stream (1/s); 198.18.0.2:22: slow alone, 1/4s; 198.18.0.3 is
	// disabled everywhere and gets none.
	want := []fleet.EndpointRate{
		{Endpoint: netip.MustParseAddrPort("198.18.0.1:22"), Rate: 3},
		{Endpoint: netip.MustParseAddrPort("198.18.0.2:22"), Rate: 0.25},
	}
	if diff := cmp.Diff(want, cfg.EndpointRates(), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
		t.Errorf("EndpointRates (-want +got):\n%s", diff)
	}
	got := cfg.ProbeRates()
	if got.Endpoints != 2 || got.Max != 3 || got.MaxEndpoint.String() != "198.18.0.1:22" || got.Total != 3.25 {
		t.Errorf("ProbeRates() = %+v, want 2 endpoints, max 3 on 198.18.0.1:22, total 3.25", got)
	}
	if got := cfg.Streams(); got != 3 {
		t.Errorf("Streams() = %d, want 3", got)
	}
}

// TestDedupIDsFollowFileOrder checks ids on a larger mix of pools.
func TestDedupIDsFollowFileOrder(t *testing.T) {
	t.Parallel()
	yaml := "checks:\n  a: {protocol: tcp, port: 1}\n  b: {protocol: tcp, port: 1, interval: 3s}\npools:\n"
	for i := range 8 {
		check := "ab"[i%2 : i%2+1]
		yaml += fmt.Sprintf("  - {name: p%d, check: %s, targets: [\"10.0.%d.0/26\", \"10.0.0.0/27\"]}\n", i, check, i%3)
	}
	cfg := mustParse(t, yaml, "")
	checkInvariants(t, cfg)
	// The first pool introduces 10.0.0.0/26 with check a: ids 0..63 in
	// address order.
	for id := range 64 {
		if got, want := cfg.Targets[id].AddrPort().String(), fmt.Sprintf("10.0.0.%d:1", id); got != want || cfg.Targets[id].Check != 0 {
			t.Fatalf("target %d = %s check %d, want %s check a", id, got, cfg.Targets[id].Check, want)
		}
	}
}
