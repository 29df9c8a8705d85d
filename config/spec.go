package config

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// File is a configuration file as written: the YAML document decoded field by
// field, before presets and defaults are applied. Optional settings are
// pointers, so that "not set" (take the preset's or the default value) differs
// from an explicit zero. [Parse] turns a File into a [Config].
type File struct {
	Checks      map[string]*CheckSpec `yaml:"checks"`      // checks by name
	Pools       []*PoolSpec           `yaml:"pools"`       // pools in file order
	Remediation []*RemediationSpec    `yaml:"remediation"` // remediation actions (R1, R2)
	Metrics     *MetricsSpec          `yaml:"metrics"`     // metrics options
	Webhooks    []*EventWebhookSpec   `yaml:"webhooks"`    // where events are posted
}

// CheckSpec is one entry of "checks" as written. See [Check] for the
// effective settings and what each one means.
type CheckSpec struct {
	Preset              *string           `yaml:"preset"`
	Protocol            *string           `yaml:"protocol"`
	Port                *int              `yaml:"port"`
	Path                *string           `yaml:"path"`
	Method              *string           `yaml:"method"`
	Cadence             *string           `yaml:"cadence"`
	Interval            *Duration         `yaml:"interval"`
	Timeout             *Duration         `yaml:"timeout"`
	Rise                *int              `yaml:"rise"`
	Fall                *int              `yaml:"fall"`
	Window              *WindowSpec       `yaml:"window"`
	HealthyStatus       *string           `yaml:"healthy_status"`
	BodyContains        *string           `yaml:"body_contains"`
	MaxBodyBytes        *int              `yaml:"max_body_bytes"`
	Host                *string           `yaml:"host"`
	SNI                 *string           `yaml:"sni"`
	UserAgent           *string           `yaml:"user_agent"`
	Headers             map[string]string `yaml:"headers"`
	AuthToken           *AuthTokenSpec    `yaml:"auth_token"`
	TLS                 *TLSSpec          `yaml:"tls"`
	InitialState        *string           `yaml:"initial_state"`
	FastRecheckInterval *Duration         `yaml:"fast_recheck_interval"`
	UnhealthyInterval   *Duration         `yaml:"unhealthy_interval"`
	Jitter              *Duration         `yaml:"jitter"`
	TCPMode             *string           `yaml:"tcp_mode"`
	SynRetransmit       *string           `yaml:"syn_retransmit"`
	SourceAddress       *string           `yaml:"source_address"`
	IPFamily            *string           `yaml:"ip_family"`
	ProbeTargets        *string           `yaml:"probe_targets"`         // what /probe may probe with the check
	ProbeAllowAddresses []string          `yaml:"probe_allow_addresses"` // link-local and metadata blocks /probe may probe
	Passive             *PassiveSpec      `yaml:"passive"`               // evidence from this host's own connections to the targets
}

// WindowSpec is a sliding-window evaluation as written (E2).
type WindowSpec struct {
	Size     *int `yaml:"size"`
	Required *int `yaml:"required"`
}

// AuthTokenSpec says where the secret of the App Service probe token (H10)
// is: exactly one of a file or an environment variable. The file holds no
// secret itself.
type AuthTokenSpec struct {
	SecretFile *string `yaml:"secret_file"`
	SecretEnv  *string `yaml:"secret_env"`
}

// TLSSpec holds the TLS settings of an HTTPS check as written.
type TLSSpec struct {
	CAFile             *string `yaml:"ca_file"`
	CertFile           *string `yaml:"cert_file"`
	KeyFile            *string `yaml:"key_file"`
	ServerName         *string `yaml:"server_name"`
	InsecureSkipVerify *bool   `yaml:"insecure_skip_verify"`
}

// PoolSpec is one entry of "pools" as written. See [Pool].
type PoolSpec struct {
	Name                *string   `yaml:"name"`
	Check               *string   `yaml:"check"`
	Targets             []string  `yaml:"targets"`
	TargetsFile         *string   `yaml:"targets_file"`
	Disabled            []string  `yaml:"disabled"`
	HealthChecks        *bool     `yaml:"health_checks"`
	MaxUnhealthyPercent *int      `yaml:"max_unhealthy_percent"`
	FailOpen            *bool     `yaml:"fail_open"`
	LatencyMargin       *Duration `yaml:"latency_margin"`
	// Labels are the labels of every target of the pool; discovered
	// targets have them under their own, before relabeling.
	Labels map[string]string `yaml:"labels"`
	// MetricLabels are the target labels exported on per-target series.
	MetricLabels []string `yaml:"metric_labels"`
	// Prometheus service discovery, with Prometheus's own field names:
	// decoded by Prometheus's types (see sd.go).
	StaticConfigs       *yaml.Node `yaml:"static_configs"`
	FileSDConfigs       *yaml.Node `yaml:"file_sd_configs"`
	HTTPSDConfigs       *yaml.Node `yaml:"http_sd_configs"`
	DNSSDConfigs        *yaml.Node `yaml:"dns_sd_configs"`
	KubernetesSDConfigs *yaml.Node `yaml:"kubernetes_sd_configs"`
	ConsulSDConfigs     *yaml.Node `yaml:"consul_sd_configs"`
	RelabelConfigs      *yaml.Node `yaml:"relabel_configs"`
}

// RemediationSpec is one entry of "remediation" as written. See
// [Remediation].
type RemediationSpec struct {
	Name      *string      `yaml:"name"`
	Pools     []string     `yaml:"pools"`
	After     *Duration    `yaml:"after"`
	MaxPerH   *int         `yaml:"max_per_hour"`
	MaxPer12H *int         `yaml:"max_per_12h"`
	MaxPerDay *int         `yaml:"max_per_day"`
	Command   []string     `yaml:"command"`
	Webhook   *WebhookSpec `yaml:"webhook"`
	Timeout   *Duration    `yaml:"timeout"`
}

// WebhookSpec is a remediation's webhook as written.
type WebhookSpec struct {
	URL        *string `yaml:"url"`
	SecretFile *string `yaml:"secret_file"`
}

// MetricsSpec holds the metrics options as written.
type MetricsSpec struct {
	PerTarget *bool `yaml:"per_target"`
}

// Duration is a duration written as a Go duration string ("5s", "1m30s",
// "250ms"). In a configuration it must be a whole number of milliseconds,
// the scheduler's resolution.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// ParseDuration parses a duration as a config file writes it: a Go duration
// string that is a whole number of milliseconds. The error names the text
// and what is allowed; commands parse their duration flags with it, so that
// a duration is read the same way everywhere.
func ParseDuration(s string) (Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (want a number with a unit, such as \"5s\" or \"250ms\")", s)
	}
	if d%time.Millisecond != 0 {
		return 0, fmt.Errorf("%q is not a whole number of milliseconds", s)
	}
	return Duration(d), nil
}
