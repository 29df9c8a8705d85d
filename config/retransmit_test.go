package config

import (
	"testing"
	"time"
)

func TestSynRetransmit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, check string
		want        time.Duration
	}{
		{"tcp default: the kernel's", "{protocol: tcp, port: 80}", time.Second},
		{"tcp_mode syn default", "{protocol: tcp, port: 80, tcp_mode: syn}", time.Second},
		{"kernel", "{protocol: tcp, port: 80, syn_retransmit: kernel}", time.Second},
		{"off", "{protocol: tcp, port: 80, syn_retransmit: off}", 0},
		{"short, for a short timeout", "{protocol: tcp, port: 80, timeout: 500ms, syn_retransmit: 150ms}", 150 * time.Millisecond},
		{"connect: the kernel retransmits", "{protocol: tcp, port: 80, tcp_mode: connect}", 0},
		{"http: the kernel retransmits", "{protocol: http, port: 80}", 0},
		{"preset globalaccelerator", "{preset: globalaccelerator, protocol: tcp, port: 80}", time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustParse(t, "checks:\n  c: "+tc.check+"\npools:\n  - {name: p, check: c, targets: [\"192.0.2.1\"]}\n", t.TempDir())
			if got := cfg.Checks[0].SynRetransmit.D(); got != tc.want {
				t.Errorf("syn_retransmit = %v, want %v", got, tc.want)
			}
		})
	}
}

// Two checks that differ only in their retransmission are two probes.
func TestSynRetransmitInProbeKey(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, `checks:
  a: {protocol: tcp, port: 80}
  b: {protocol: tcp, port: 80, syn_retransmit: off}
pools:
  - {name: p, check: a, targets: ["192.0.2.1"]}
  - {name: q, check: b, targets: ["192.0.2.1"]}
`, t.TempDir())
	if cfg.Checks[0].ProbeKey() == cfg.Checks[1].ProbeKey() {
		t.Error("checks with different syn_retransmit share a probe key")
	}
}
