package settings

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/scheduler"
)

// Check holds a check's effective settings (after its preset) and
// detection windows, as `sonde config check` and the status page show them:
// its probe settings as [config.Probe] holds them, its timing in seconds. For a
// window check, Rise and Fall are the equivalent consecutive thresholds:
// Rise = k of W2 (required successes), Fall = k of W1 (size - required + 1).
type Check struct {
	Name     string  `json:"name"`
	Preset   *string `json:"preset"`
	Port     *uint16 `json:"port"`      // null: every target gives its own
	PortWins bool    `json:"port_wins"` // the check's port overrides the targets' own (App Gateway)
	config.Probe
	Cadence                  scheduler.Cadence `json:"cadence"` // fixed_rate or after_completion
	IntervalSeconds          float64           `json:"interval_seconds"`
	TimeoutSeconds           float64           `json:"timeout_seconds"`
	Rise                     int               `json:"rise"`
	Fall                     int               `json:"fall"`
	Window                   *scheduler.Window `json:"window"`
	FailureWindowSeconds     float64           `json:"failure_window_seconds"`            // W1
	SuccessWindowSeconds     float64           `json:"success_window_seconds"`            // W2 with r = timeout
	OnsetWindowSeconds       float64           `json:"failure_window_from_onset_seconds"` // W3
	InitialState             scheduler.State   `json:"initial_state"`
	FastRecheckSeconds       float64           `json:"fast_recheck_interval_seconds"`
	UnhealthyIntervalSeconds float64           `json:"unhealthy_interval_seconds"`
	JitterSeconds            float64           `json:"jitter_seconds"`
	ProbeRate                float64           `json:"probe_rate_per_target"` // highest probes/s one target receives
	ProbeClass               int               `json:"probe_class"`
	// ProbeTargets and ProbeAllowAddresses are what /probe may do with the
	// check (see [config.ProbeAccess]).
	ProbeTargets        config.ProbeTargets `json:"probe_targets"`
	ProbeAllowAddresses []netip.Prefix      `json:"probe_allow_addresses,omitempty"`
	// Passive is the check's passive rule, null without one.
	Passive *Passive `json:"passive"`
}

// Of returns the effective settings and windows of check c.
func Of(c *config.Check) Check {
	s := Check{
		Name:                     c.Name,
		PortWins:                 c.PortWins,
		Probe:                    c.Probe,
		Cadence:                  c.Cadence,
		IntervalSeconds:          c.Interval.Seconds(),
		TimeoutSeconds:           c.Timeout.Seconds(),
		Rise:                     c.Rise,
		Fall:                     c.Fall,
		FailureWindowSeconds:     c.FailureWindow().Seconds(),
		SuccessWindowSeconds:     c.SuccessWindow(c.Timeout).Seconds(),
		OnsetWindowSeconds:       c.FailureWindowFromOnset().Seconds(),
		InitialState:             c.Initial,
		FastRecheckSeconds:       c.FastRecheck.Seconds(),
		UnhealthyIntervalSeconds: c.UnhealthyInterval.Seconds(),
		JitterSeconds:            c.Jitter.Seconds(),
		ProbeRate:                c.ProbeRate(),
		ProbeClass:               c.Class,
		ProbeTargets:             c.ProbeAccess.Targets,
		ProbeAllowAddresses:      c.ProbeAccess.AllowAddresses,
		Passive:                  passiveOf(c),
	}
	if c.Preset != "" {
		s.Preset = &c.Preset
	}
	if p := c.DefaultPort(); p != 0 {
		s.Port = &p
	}
	if c.Window.Size > 0 {
		s.Window = &c.Window
	}
	return s
}

// EvaluationText describes how results become states: "rise 2 fall 3" or
// "window 2 of 4", with a fast recheck, an interval while unhealthy and the
// jitter when they are set.
func (s *Check) EvaluationText() string {
	eval := fmt.Sprintf("rise %d fall %d", s.Rise, s.Fall)
	if s.Window != nil {
		eval = fmt.Sprintf("window %d of %d", s.Window.Required, s.Window.Size)
	}
	if s.FastRecheckSeconds > 0 {
		eval += ", recheck " + Seconds(s.FastRecheckSeconds)
	}
	if s.UnhealthyIntervalSeconds > 0 {
		eval += ", unhealthy every " + Seconds(s.UnhealthyIntervalSeconds)
	}
	if s.JitterSeconds > 0 {
		eval += ", jitter " + Seconds(s.JitterSeconds)
	}
	return eval
}

// ProbeText describes what one probe of the check sends and accepts and,
// where they are not the defaults, what /probe may do with it. The
// values of extra headers are shown only with headerValues: they may carry
// credentials, which a page shown to others must not.
func (s *Check) ProbeText(headerValues bool) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+" "+v)
		}
	}
	if s.Protocol == config.TCP {
		add("tcp_mode", s.TCPMode.String())
		if s.TCPMode != config.TCPConnect {
			add("syn_retransmit", s.SynRetransmit.String())
		}
	} else {
		parts = append(parts, s.Method+" "+s.Path)
		add("healthy", s.HealthyStatus.String())
		if s.BodyContains != "" {
			add("body_contains", strconv.Quote(s.BodyContains))
			add("max_body_bytes", strconv.Itoa(s.MaxBodyBytes))
		}
		add("host", s.Host)
		if s.DefaultHost != "" {
			add("host", s.DefaultHost+"[:port]")
		}
		add("sni", s.SNI)
		if s.UserAgent != "" {
			add("user_agent", strconv.Quote(s.UserAgent))
		}
		for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
			v := "(set)"
			if headerValues {
				v = strconv.Quote(s.Headers[k])
			}
			add("header", k+": "+v)
		}
		add("auth_token from file", s.AuthToken.SecretFile)
		add("auth_token from env", s.AuthToken.SecretEnv)
		add("tls.ca_file", s.TLS.CAFile)
		add("tls.cert_file", s.TLS.CertFile)
		if s.TLS.InsecureSkipVerify {
			parts = append(parts, "tls.insecure_skip_verify")
		}
	}
	if s.IPFamily != config.IPAny {
		add("ip_family", s.IPFamily.String())
	}
	if s.SourceAddress.IsValid() {
		add("source_address", s.SourceAddress.String())
	}
	if s.ProbeTargets != config.ProbeTargetsPools {
		add("probe_targets", s.ProbeTargets.String())
	}
	for _, p := range s.ProbeAllowAddresses {
		add("probe_allow_addresses", p.String())
	}
	return strings.Join(parts, ", ")
}

// Seconds formats a number of seconds as the configuration writes them:
// "2s", "0.5s".
func Seconds(s float64) string {
	return strconv.FormatFloat(s, 'f', -1, 64) + "s"
}

// Passive is a check's passive rule in its settings.
type Passive struct {
	Failures          int     `json:"failures"`
	WindowSeconds     float64 `json:"window_seconds"`
	Action            string  `json:"action"`
	RecheckGapSeconds float64 `json:"recheck_gap_seconds"`
}

// passiveOf returns c's passive rule, nil without one.
func passiveOf(c *config.Check) *Passive {
	if c.Passive == nil {
		return nil
	}
	return &Passive{Failures: c.Passive.Failures, WindowSeconds: c.Passive.Window.Seconds(),
		Action: c.Passive.Action.String(), RecheckGapSeconds: c.Passive.Gap.Seconds()}
}
