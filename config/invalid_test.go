package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sondeprobe/sonde/scheduler"
)

// invalidConfigs maps every testdata/invalid-*.yaml to its exact error.
var invalidConfigs = map[string]string{
	"invalid-syn-retransmit.yaml":                `checks.edge.syn_retransmit: "fast" is not "kernel", "off" or a whole number of milliseconds such as "200ms"`,
	"invalid-syn-retransmit-short.yaml":          `checks.edge.syn_retransmit: 5ms is out of range 10ms..24h (or "kernel", "off")`,
	"invalid-syn-retransmit-timeout.yaml":        `checks.edge.syn_retransmit: 2s is not shorter than timeout 2s: it would never fire; want a shorter one, or "off"`,
	"invalid-syn-retransmit-connect.yaml":        `checks.edge.syn_retransmit: only for tcp_mode syn or auto: connect() retransmits in the kernel`,
	"invalid-syn-retransmit-http.yaml":           `checks.web.syn_retransmit: only for protocol tcp, not http`,
	"invalid-labels-name.yaml":                   `pools[0].labels.1zone: "1zone" is not a valid label name; want letters, digits and _, not first a digit`,
	"invalid-labels-reserved.yaml":               `pools[0].labels.__address__: labels starting with __ are reserved for discovery`,
	"invalid-metric-labels-dup.yaml":             `pools[0].metric_labels[1]: "zone" is listed twice`,
	"invalid-metric-labels-reserved.yaml":        `pools[0].metric_labels[1]: "pool" is a label every per-target series has already`,
	"invalid-relabel-action.yaml":                `pools[0].relabel_configs[0]: unknown relabel action "rename"`,
	"invalid-relabel-no-discovery.yaml":          `pools[0].relabel_configs: set without a discovery list; relabeling applies to discovered targets (static_configs, file_sd_configs, http_sd_configs, dns_sd_configs, kubernetes_sd_configs and consul_sd_configs)`,
	"invalid-relabel-target.yaml":                `pools[0].relabel_configs[0]: relabel configuration for replace action requires 'target_label' value`,
	"invalid-relabel-regex-states.yaml":          `pools[0].relabel_configs[0].regex: "(.*){1000}b" can keep 1001 states alive at once while it matches, more than 32 (each costs a step for every byte of label it reads): repeat fewer groups that can match anything`,
	"invalid-relabel-regex-long.yaml":            `pools[0].relabel_configs[0].regex: 4799 bytes, more than 4096`,
	"invalid-relabel-replacement-refs.yaml":      `pools[0].relabel_configs[0].replacement: "$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1" refers to the match 17 times, more than 16`,
	"invalid-sd-static-label-value.yaml":         `pools[0].static_configs[0].labels.zone: value of 4097 bytes, more than 4096`,
	"invalid-sd-dns-type.yaml":                   `pools[0].dns_sd_configs[0]: invalid DNS-SD records type TXT`,
	"invalid-sd-field.yaml":                      `pools[0].file_sd_configs[0]: line 8: unknown field refresh`,
	"invalid-sd-http-url.yaml":                   `pools[0].http_sd_configs[0]: URL is missing`,
	"invalid-sd-kubernetes-role.yaml":            `pools[0].kubernetes_sd_configs[0]: unknown Kubernetes SD role "deployment"`,
	"invalid-sd-not-list.yaml":                   `pools[0].file_sd_configs: expected a list, got a mapping`,
	"invalid-sd-static-empty.yaml":               `pools[0].static_configs[0].targets: missing; a static group needs targets`,
	"invalid-sd-unknown-kind.yaml":               `pools[0].ec2_sd_configs: unknown field; the discovery sonde supports is static_configs, file_sd_configs, http_sd_configs, dns_sd_configs, kubernetes_sd_configs and consul_sd_configs`,
	"invalid-alias-bomb.yaml":                    `checks.c100.headers.X-H900: YAML aliases expand to more than 100000 nodes`,
	"invalid-appservice-fall.yaml":               `checks.app.fall: 1 is out of range 2..10 for preset appservice`,
	"invalid-appservice-path.yaml":               `checks.app.path: missing for preset appservice; there is no default path`,
	"invalid-auth-both.yaml":                     `checks.app.auth_token: set exactly one of secret_file and secret_env, not both`,
	"invalid-auth-env-unset.yaml":                `checks.app.auth_token.secret_env: environment variable SONDE_TEST_UNSET is not set`,
	"invalid-auth-file-missing.yaml":             `checks.app.auth_token.secret_file: "no-such-secret.txt": no such file or directory`,
	"invalid-auth-neither.yaml":                  `checks.app.auth_token: set exactly one of secret_file and secret_env`,
	"invalid-auth-secret-literal.yaml":           `checks.app.auth_token.secret: unknown field`,
	"invalid-body-head.yaml":                     `checks.edge.body_contains: cannot be used with method HEAD (a HEAD response has no body)`,
	"invalid-body-too-long.yaml":                 `checks.gw.body_contains: 4091 characters, more than 4090`,
	"invalid-cadence.yaml":                       `checks.web.cadence: "fixed" is not one of fixed_rate, after_completion`,
	"invalid-check-name.yaml":                    `checks.web.v2: invalid check name; want 1..64 letters, digits, "-" or "_"`,
	"invalid-cidr-too-large.yaml":                `pools[0].targets[0]: block 10.0.0.0/7 has 33554432 addresses, more than the limit of 16777216 targets`,
	"invalid-cidr-total.yaml":                    `pools[1].targets[0]: block 10.0.0.0/8 brings the number of targets to 16777217, more than the limit of 16777216`,
	"invalid-cidr-v6-too-large.yaml":             `pools[0].targets[0]: block 2001:db8::/64 has 2^64 addresses, more than the limit of 16777216 targets`,
	"invalid-disabled-not-member.yaml":           `pools[0].disabled[1]: 198.18.0.8:80 (from "198.18.0.8") is not a member of pool "api"`,
	"invalid-disabled-other-port.yaml":           `pools[0].disabled[0]: 127.0.0.1:8080 is not a member of pool "api"`,
	"invalid-duplicate-check.yaml":               `checks.web: defined more than once`,
	"invalid-duplicate-key.yaml":                 `checks.web.port: set more than once`,
	"invalid-duration-ms.yaml":                   `checks.web.timeout: "1500us" is not a whole number of milliseconds`,
	"invalid-duration-unit.yaml":                 `checks.web.interval: "5" is not a duration (want a number with a unit, such as "5s" or "250ms")`,
	"invalid-duration.yaml":                      `checks.web.interval: "5x" is not a duration (want a number with a unit, such as "5s" or "250ms")`,
	"invalid-empty-check-name.yaml":              `checks: line 2 column 3: empty key; want a name`,
	"invalid-empty-key-top.yaml":                 `config: line 1 column 1: empty key; want a field name`,
	"invalid-empty-key.yaml":                     `checks.web: line 4 column 5: empty key; want a field name`,
	"invalid-empty.yaml":                         `config: the file is empty`,
	"invalid-fall-preset.yaml":                   `checks.edge.fall: 11 is out of range 2..10 for preset globalaccelerator`,
	"invalid-fall-zero.yaml":                     `checks.edge.fall: 0 is out of range 1..1000`,
	"invalid-fixed-rate-recheck.yaml":            `checks.web.fast_recheck_interval: 1s is shorter than the timeout 3s; cadence fixed_rate needs timeout ≤ fast_recheck_interval`,
	"invalid-fixed-rate-timeout.yaml":            `checks.gw.timeout: 45s is longer than the interval 30s; cadence fixed_rate for preset appgateway needs timeout ≤ interval (cadence after_completion allows it)`,
	"invalid-fixed-rate-unhealthy-interval.yaml": `checks.app.unhealthy_interval: 30s is shorter than the timeout 1m; cadence fixed_rate for preset appservice needs timeout ≤ unhealthy_interval`,
	"invalid-ga-interval.yaml":                   `checks.ga.interval: 51s is out of range 1s..50s for preset globalaccelerator`,
	"invalid-ga-path-char.yaml":                  `checks.ga.path: "/health<1>" contains "<"; allowed are letters, digits and -/.%?#&_;~!()*[]@$^:',+ for preset globalaccelerator`,
	"invalid-ga-path-long.yaml":                  `checks.ga.path: "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" is 81 characters long, more than 80 for preset globalaccelerator`,
	"invalid-header-reserved.yaml":               `checks.web.headers.Host: cannot be set here; set it with the host setting`,
	"invalid-header-token.yaml":                  `checks.web.headers.X-Ms-Auth-Internal-Token: cannot be set here; set it with the auth token setting`,
	"invalid-header-value-long.yaml":             `checks.web.headers.X-Long: 4097 bytes, more than 4096`,
	"invalid-health-checks-type.yaml":            `pools[0].health_checks: expected true or false, got "off"`,
	"invalid-host.yaml":                          `checks.web.host: "[10.0.0.1]:80" is not a host name or IP address with an optional port`,
	"invalid-http-field-on-tcp.yaml":             `checks.ga.path: only for protocol http or https, not tcp`,
	"invalid-initial-state.yaml":                 `checks.web.initial_state: "up" is not one of unknown, unhealthy, healthy`,
	"invalid-interval-zero.yaml":                 `checks.web.interval: 0s is out of range 1ms..24h`,
	"invalid-ip-family.yaml":                     `checks.web.ip_family: "ipv4" is not one of any, ip4, ip6`,
	"invalid-jitter.yaml":                        `checks.web.jitter: 6s is out of range 0s..5s (at most the interval)`,
	"invalid-latency-margin.yaml":                `pools[0].latency_margin: -1s is out of range 0s..24h`,
	"invalid-max-body-bytes-range.yaml":          `checks.gw.max_body_bytes: 0 is out of range 1..16777216`,
	"invalid-max-body-bytes.yaml":                `checks.gw.max_body_bytes: 4 is less than the 7 bytes of body_contains`,
	"invalid-max-unhealthy.yaml":                 `pools[0].max_unhealthy_percent: 101 is out of range 1..100`,
	"invalid-method.yaml":                        `checks.web.method: "POST" is not one of GET, HEAD`,
	"invalid-missing-check.yaml":                 `pools[1].check: "nope" is not a defined check`,
	"invalid-no-pools.yaml":                      `pools: missing; a config needs at least one pool`,
	"invalid-path-authority.yaml":                `checks.web.path: "//evil/health" is not a request path; want printable ASCII without spaces, not starting with "//"`,
	"invalid-path-slash.yaml":                    `checks.web.path: "health" must start with "/"`,
	"invalid-pool-name-dup.yaml":                 `pools[1].name: "api" is already the name of pools[0]`,
	"invalid-pool-no-targets.yaml":               `pools[0]: no targets; set targets, targets_file or a discovery list (static_configs, file_sd_configs, http_sd_configs, dns_sd_configs, kubernetes_sd_configs and consul_sd_configs)`,
	"invalid-port.yaml":                          `checks.web.port: 70000 is out of range 1..65535`,
	"invalid-preset.yaml":                        `checks.web.preset: "elb" is not one of appservice, frontdoor, appgateway, globalaccelerator`,
	"invalid-probe-allow-host.yaml":              `checks.web.probe_allow_addresses[0]: "metadata.google.internal" is not an IP address or CIDR block`,
	"invalid-probe-allow-public.yaml":            `checks.web.probe_allow_addresses[1]: 10.0.0.0/8 is not inside a link-local or metadata block (169.254.0.0/16, fe80::/10, fd00:ec2::/32, 100.100.100.200/32, 168.63.129.16/32, 64:ff9b::a9fe:0/112); /probe needs no allow for other addresses`,
	"invalid-probe-allow-wide.yaml":              `checks.web.probe_allow_addresses[0]: 169.0.0.0/8 is not inside a link-local or metadata block (169.254.0.0/16, fe80::/10, fd00:ec2::/32, 100.100.100.200/32, 168.63.129.16/32, 64:ff9b::a9fe:0/112); /probe needs no allow for other addresses`,
	"invalid-probe-targets.yaml":                 `checks.web.probe_targets: "everywhere" is not one of pools, any, any_with_credentials`,
	"invalid-protocol-missing.yaml":              `checks.web.protocol: missing; want one of tcp, http, https`,
	"invalid-protocol-preset.yaml":               `checks.app.protocol: "tcp" is not one of http, https for preset appservice`,
	"invalid-protocol.yaml":                      `checks.web.protocol: "ftp" is not one of tcp, http, https`,
	"invalid-remediation-after.yaml":             `remediation[0].after: 0s is out of range 1ms..24h`,
	"invalid-remediation-budget.yaml":            `remediation[0].max_per_day: -1 is out of range 0..1048576`,
	"invalid-remediation-empty-command.yaml":     `remediation[0].command: no program; want [program, arguments...]`,
	"invalid-remediation-name-dup.yaml":          `remediation[1].name: "plan-a" is already the name of remediation[0]`,
	"invalid-remediation-no-action.yaml":         `remediation[0]: no action; set command, webhook or both`,
	"invalid-remediation-no-pools.yaml":          `remediation[0].pools: missing; name the pools whose targets the remediation may act on`,
	"invalid-remediation-secret-missing.yaml":    `remediation[0].webhook.secret_file: "no-such-hook.key": no such file or directory`,
	"invalid-remediation-unknown-field.yaml":     `remediation[0].max_per_week: unknown field`,
	"invalid-remediation-unknown-pool.yaml":      `remediation[0].pools[1]: "app-b" is not a defined pool`,
	"invalid-remediation-webhook-url.yaml":       `remediation[0].webhook.url: "ftp://ops.example/replace" has scheme "ftp"; want http or https`,
	"invalid-rise-preset.yaml":                   `checks.ga.rise: 1 is out of range 2..10 for preset globalaccelerator`,
	"invalid-sni-ip.yaml":                        `checks.web.sni: "10.0.0.1" is not a host name`,
	"invalid-source-address.yaml":                `checks.web.source_address: "10.0.0.256" is not an IP address`,
	"invalid-source-family.yaml":                 `pools[0].targets[1]: ::1 is IPv6 but source_address 127.0.0.1 of check "web" is IPv4`,
	"invalid-status-empty-element.yaml":          `checks.web.healthy_status: "200,,204": element 2 is empty`,
	"invalid-status-range.yaml":                  `checks.web.healthy_status: "200,600": element "600" is out of range 100..599`,
	"invalid-status-reversed.yaml":               `checks.web.healthy_status: "200-199": element "200-199" has its start after its end`,
	"invalid-target-hostbits.yaml":               `pools[0].targets[0]: "198.18.0.5/24" has host bits set; did you mean 198.18.0.0/24?`,
	"invalid-target-port.yaml":                   `pools[0].targets[0]: "127.0.0.1:0" has port 0, out of range 1..65535`,
	"invalid-target-v6-port.yaml":                `pools[0].targets[0]: "[2001:db8::1]:65536" has port 65536, out of range 1..65535`,
	"invalid-target.yaml":                        `pools[0].targets[2]: "10.0.0.300" is not an IP address, CIDR block or host name`,
	"invalid-targets-file-line.yaml":             `pools[0].targets_file: bad-targets.txt:5: "127.0.0.0/33" is not a valid CIDR block`,
	"invalid-targets-file-missing.yaml":          `pools[0].targets_file: "no-such-targets.txt": no such file or directory`,
	"invalid-tcp-mode-on-http.yaml":              `checks.web.tcp_mode: only for protocol tcp, not http`,
	"invalid-tcp-mode.yaml":                      `checks.ga.tcp_mode: "raw" is not one of auto, syn, connect`,
	"invalid-tcp-no-port.yaml":                   `pools[0].targets[1]: "127.0.0.2" has no port and check "ga" has none (protocol tcp has no default port)`,
	"invalid-timeout-long.yaml":                  `checks.web.timeout: 25h is out of range 1ms..24h`,
	"invalid-tls-ca-missing.yaml":                `checks.web.tls.ca_file: "no-such-ca.pem": no such file or directory`,
	"invalid-tls-ca-not-pem.yaml":                `checks.web.tls.ca_file: "not-a-certificate.pem": no PEM certificate found`,
	"invalid-tls-cert-not-pem.yaml":              `checks.web.tls.cert_file: "not-a-certificate.pem" with key_file "not-a-certificate.pem": tls: failed to find any PEM data in certificate input`,
	"invalid-tls-cert-without-key.yaml":          `checks.web.tls.cert_file: set without key_file; set both or neither`,
	"invalid-tls-on-http.yaml":                   `checks.web.tls: only for protocol https, not http`,
	"invalid-tls-server-name-conflict.yaml":      `checks.web.tls.server_name: "b.internal" differs from sni "a.internal"; set one of them`,
	"invalid-two-documents.yaml":                 `config: the file holds more than one YAML document`,
	"invalid-type.yaml":                          `checks.web.rise: expected an integer, got "three"`,
	"invalid-unknown-field-pool.yaml":            `pools[0].target: unknown field`,
	"invalid-unknown-field.yaml":                 `checks.web.intervall: unknown field`,
	"invalid-unknown-top.yaml":                   `targets: unknown field`,
	"invalid-webhook-kind.yaml":                  `webhooks[0].events.kinds[1]: "routes" is not one of state, route, preferred, fail_open, passive`,
	"invalid-webhook-name-dup.yaml":              `webhooks[1].name: "127.0.0.1:9000" (the host of the url) is already the name of webhooks[0]; set name to tell them apart`,
	"invalid-webhook-pool.yaml":                  `webhooks[0].events.pools[0]: "apii" is not the name of a pool`,
	"invalid-webhook-secret-missing.yaml":        `webhooks[0].secret_file: "no-such-secret": no such file or directory`,
	"invalid-webhook-timeout.yaml":               `webhooks[0].timeout: 10m is out of range 1ms..5m`,
	"invalid-webhook-url-missing.yaml":           `webhooks[0].url: missing; want an http:// or https:// URL`,
	"invalid-webhook-url-scheme.yaml":            `webhooks[0].url: "ftp://127.0.0.1/hook" has scheme "ftp"; want http or https`,
	"invalid-webhook-url-user.yaml":              `webhooks[0].url: "http://user:pw@127.0.0.1:9000/hook" carries user information; sign requests with secret_file instead`,
	"invalid-user-agent-long.yaml":               `checks.web.user_agent: 4097 bytes, more than 4096`,
	"invalid-window-and-rise.yaml":               `checks.web.window: cannot be set together with rise or fall; use one evaluation`,
	"invalid-window-missing-required.yaml":       `checks.web.window.required: missing; want 1..size`,
	"invalid-window-required.yaml":               `checks.web.window.required: 5 is out of range 1..4`,
	"invalid-window-size.yaml":                   fmt.Sprintf("checks.web.window.size: 65 is out of range 1..%d", scheduler.MaxWindow), // the evaluator's limit
	"invalid-yaml-syntax.yaml":                   `config: line 1: did not find expected key`,
}

func TestInvalidConfigs(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/invalid-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 20 {
		t.Fatalf("found %d invalid configs, want at least 20", len(files))
	}
	for _, f := range files {
		if _, ok := invalidConfigs[filepath.Base(f)]; !ok {
			t.Errorf("%s has no expected message in invalidConfigs", f)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(invalidConfigs)) {
		want := invalidConfigs[name]
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", name)
			if _, err := os.Stat(path); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path, testOptions())
			if err == nil {
				t.Fatalf("Load(%s) succeeded, want error %q", name, want)
			}
			if got := err.Error(); got != want {
				t.Errorf("Load(%s) error:\n got %s\nwant %s", name, got, want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Load(%s) error %v does not wrap ErrInvalid", name, err)
			}
			// Validity does not depend on the shard: each shard checks
			// every target, its own or not.
			for i := range 3 {
				opt := testOptions()
				opt.Shard = Shard{Index: i, Count: 3}
				if _, err := Load(path, opt); err == nil || err.Error() != want {
					t.Errorf("Load(%s) as shard %v: error %v, want %q", name, opt.Shard, err, want)
				}
			}
		})
	}
}
