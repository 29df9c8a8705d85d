package config

import (
	"strings"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/scheduler/passive"
)

func TestPassive(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, check string
		want        *passive.Rule
	}{
		{"off without a block", `{protocol: tcp, port: 80}`, nil},
		{"every default", `{protocol: tcp, port: 80, passive: {}}`,
			&passive.Rule{Failures: 3, Window: 10 * time.Second, Action: passive.Recheck, Gap: DefaultRecheckGap}},
		{"the gap follows the fast re-check", `{protocol: tcp, port: 80, fast_recheck_interval: 100ms, passive: {action: eject}}`,
			&passive.Rule{Failures: 3, Window: 10 * time.Second, Action: passive.Eject, Gap: 100 * time.Millisecond}},
		{"every field", `{protocol: http, passive: {failures: 1, window: 2s, action: observe, recheck_gap: 1s}}`,
			&passive.Rule{Failures: 1, Window: 2 * time.Second, Action: passive.Observe, Gap: time.Second}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, "checks:\n  c: "+tt.check+"\npools:\n  - {name: p, check: c, targets: [127.0.0.1]}\n", t.TempDir())
			got := cfg.Checks[0].Passive
			if (got == nil) != (tt.want == nil) || got != nil && *got != *tt.want {
				t.Fatalf("passive rule %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestPassiveInvalid(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ block, want string }{
		{`{failures: 0}`, "checks.c.passive.failures: 0 is out of range 1..255"},
		{`{failures: 300}`, "checks.c.passive.failures: 300 is out of range 1..255"},
		{`{window: 2h}`, "checks.c.passive.window: 2h"},
		{`{action: drop}`, `checks.c.passive.action: "drop"`},
		{`{recheck_gap: 1ms}`, "checks.c.passive.recheck_gap: 1ms is out of range 10ms..24h"},
		{`{failure: 3}`, "failure"},
	} {
		_, err := Parse([]byte("checks:\n  c: {protocol: tcp, port: 80, passive: "+tt.block+"}\npools:\n  - {name: p, check: c, targets: [127.0.0.1]}\n"), t.TempDir(), testOptions())
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("passive %s: error %v, want one with %q", tt.block, err, tt.want)
		}
	}
}
