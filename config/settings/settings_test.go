package settings

import (
	"testing"

	"github.com/sondeprobe/sonde/config"
)

// parse loads a configuration written inline; its targets are addresses,
// so nothing is looked up.
func parse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), t.TempDir(), config.LoadOptions{})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

// TestOfProbeAccess: the view carries what /probe may do with a check.
func TestOfProbeAccess(t *testing.T) {
	t.Parallel()
	cfg := parse(t, `
checks:
  trusted:
    protocol: tcp
    port: 80
    probe_targets: any_with_credentials
    probe_allow_addresses: ["169.254.169.254", "fe80::/64", "::ffff:169.254.170.0/120"]
pools:
  - {name: c, check: trusted, targets: ["127.0.0.1"]}
`)
	if s := Of(cfg.CheckByName("trusted")); s.ProbeTargets != config.ProbeTargetsAnyWithCredentials || len(s.ProbeAllowAddresses) != 3 {
		t.Errorf("settings of trusted: probe_targets %v, allow %v", s.ProbeTargets, s.ProbeAllowAddresses)
	}
}

// TestText pins the text forms that `sonde config check` and the status
// page print: evaluation, probe (header values only when asked), and the
// settings that are not defaults.
func TestText(t *testing.T) {
	t.Parallel()
	cfg := parse(t, `
checks:
  web:
    protocol: http
    path: /health
    healthy_status: "200-299,404"
    headers: {X-Key: secret}
    window: {size: 4, required: 2}
    fast_recheck_interval: 1s
    probe_targets: any
  raw:
    protocol: tcp
    port: 22
    rise: 2
    fall: 3
pools:
  - {name: a, check: web, targets: ["127.0.0.1"]}
  - {name: b, check: raw, targets: ["127.0.0.1"]}
`)
	web, raw := Of(cfg.CheckByName("web")), Of(cfg.CheckByName("raw"))
	for _, c := range []struct{ name, got, want string }{
		{"web evaluation", web.EvaluationText(), "window 2 of 4, recheck 1s"},
		{"raw evaluation", raw.EvaluationText(), "rise 2 fall 3"},
		{"web probe, values hidden", web.ProbeText(false), `GET /health, healthy 200-299,404, header X-Key: (set), probe_targets any`},
		{"web probe, values shown", web.ProbeText(true), `GET /health, healthy 200-299,404, header X-Key: "secret", probe_targets any`},
		{"raw probe", raw.ProbeText(true), "tcp_mode auto, syn_retransmit 1s"},
		{"seconds", Seconds(0.5) + " " + Seconds(2), "0.5s 2s"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
}

// TestOfPassive: the view carries a check's passive rule, and nothing for a
// check without one.
func TestOfPassive(t *testing.T) {
	t.Parallel()
	cfg := parse(t, `
checks:
  watched: {protocol: tcp, port: 80, passive: {failures: 5, window: 2s, action: eject, recheck_gap: 1s}}
  plain: {protocol: tcp, port: 80}
pools:
  - {name: a, check: watched, targets: ["127.0.0.1"]}
  - {name: b, check: plain, targets: ["127.0.0.2"]}
`)
	want := Passive{Failures: 5, WindowSeconds: 2, Action: "eject", RecheckGapSeconds: 1}
	if s := Of(cfg.CheckByName("watched")); s.Passive == nil || *s.Passive != want {
		t.Errorf("passive of watched: %+v, want %+v", s.Passive, want)
	}
	if s := Of(cfg.CheckByName("plain")); s.Passive != nil {
		t.Errorf("passive of plain: %+v, want none", s.Passive)
	}
}
