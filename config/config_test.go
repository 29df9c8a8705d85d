package config

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/internal/safefile"
	"github.com/sondeprobe/sonde/internal/testenv"
	httpprobe "github.com/sondeprobe/sonde/probe/http"
	"github.com/sondeprobe/sonde/scheduler"
)

// effective is the part of a check and its pool that preset tests compare.
type effective struct {
	Protocol     Protocol
	Port         uint16
	Method       string
	Path         string
	Healthy      string
	UserAgent    string
	Host, SNI    string
	DefaultHost  string
	Cadence      scheduler.Cadence
	Interval     time.Duration
	Timeout      time.Duration
	Rise, Fall   int
	Window       scheduler.Window
	Initial      scheduler.State
	FailOpen     bool
	MaxUnhealthy int
}

func effectiveOf(cfg *Config) effective {
	c, p := cfg.Checks[0], cfg.Pools[0]
	return effective{
		Protocol: c.Protocol, Port: c.DefaultPort(), Method: c.Method, Path: c.Path,
		Healthy: c.HealthyStatus.String(), UserAgent: c.UserAgent, Host: c.Host, SNI: c.SNI,
		DefaultHost: c.DefaultHost, Cadence: c.Cadence, Interval: c.Interval, Timeout: c.Timeout, Rise: c.Rise, Fall: c.Fall,
		Window: c.Window, Initial: c.Initial, FailOpen: p.FailOpen, MaxUnhealthy: p.MaxUnhealthyPercent,
	}
}

func TestPresetsDefaultsAndOverrides(t *testing.T) {
	t.Parallel()
	appService := effective{Protocol: HTTP, Port: 80, Method: "GET", Path: "/health", Healthy: "200-299", Cadence: scheduler.FixedRate,
		Interval: time.Minute, Timeout: time.Minute, Rise: 1, Fall: 10, FailOpen: true, MaxUnhealthy: 50}
	frontDoor := effective{Protocol: HTTP, Port: 80, Method: "HEAD", Path: "/", Healthy: "200", UserAgent: "Edge Health Probe",
		Cadence: scheduler.FixedRate, Interval: 30 * time.Second, Timeout: 30 * time.Second, Rise: 2, Fall: 3,
		Window: scheduler.Window{Size: 4, Required: 2}, FailOpen: true, MaxUnhealthy: 100}
	appGateway := effective{Protocol: HTTP, Port: 80, Method: "GET", Path: "/", Healthy: "200-399", DefaultHost: "127.0.0.1",
		Cadence: scheduler.FixedRate, Interval: 30 * time.Second, Timeout: 30 * time.Second, Rise: 1, Fall: 3,
		Initial: scheduler.Unhealthy, FailOpen: false, MaxUnhealthy: 100}
	globalAccel := effective{Protocol: TCP, Port: 9000, Interval: 2 * time.Second, Timeout: 3 * time.Second,
		Rise: 3, Fall: 3, FailOpen: false, MaxUnhealthy: 100}
	noPreset := effective{Protocol: HTTP, Port: 80, Method: "GET", Path: "/", Healthy: "200-299",
		Interval: 10 * time.Second, Timeout: 3 * time.Second, Rise: 2, Fall: 3, FailOpen: true, MaxUnhealthy: 100}

	with := func(e effective, f func(*effective)) effective { f(&e); return e }
	tests := []struct {
		name  string
		check string // YAML of the check "c"
		pool  string // extra YAML of the pool
		want  effective
	}{
		{name: "appservice", check: "preset: appservice\npath: /health", want: appService},
		{name: "frontdoor", check: "preset: frontdoor", want: frontDoor},
		{name: "appgateway", check: "preset: appgateway", want: appGateway},
		{name: "globalaccelerator tcp", check: "preset: globalaccelerator\nport: 9000", want: globalAccel},
		{name: "globalaccelerator http", check: "preset: globalaccelerator\nprotocol: http", want: with(globalAccel, func(e *effective) {
			e.Protocol, e.Port, e.Method, e.Path, e.Healthy = HTTP, 80, "GET", "/", "200-399"
		})},
		{name: "no preset http", check: "protocol: http", want: noPreset},
		{name: "no preset tcp", check: "protocol: tcp\nport: 22", want: effective{Protocol: TCP, Port: 22,
			Interval: 10 * time.Second, Timeout: 3 * time.Second, Rise: 2, Fall: 3, FailOpen: true, MaxUnhealthy: 100}},
		{name: "https default port and sni from host", check: "protocol: https\nhost: api.internal:8443", want: with(noPreset, func(e *effective) {
			e.Protocol, e.Port, e.Host, e.SNI = HTTPS, 443, "api.internal:8443", "api.internal"
		})},
		{name: "https host IP gives no sni", check: "protocol: https\nhost: 10.0.0.1", want: with(noPreset, func(e *effective) {
			e.Protocol, e.Port, e.Host = HTTPS, 443, "10.0.0.1"
		})},
		{name: "appgateway overrides; the timeout follows a shorter interval", check: "preset: appgateway\nport: 8080\ninterval: 5s\nhealthy_status: 200-399,403\ninitial_state: unknown", want: with(appGateway, func(e *effective) {
			e.Port, e.Interval, e.Timeout, e.Healthy, e.Initial = 8080, 5*time.Second, 5*time.Second, "200-399,403", scheduler.Unknown
		})},
		{name: "appgateway host replaces 127.0.0.1", check: "preset: appgateway\nhost: api.internal", want: with(appGateway, func(e *effective) {
			e.Host, e.DefaultHost = "api.internal", ""
		})},
		{name: "appgateway empty host sends the target's", check: "preset: appgateway\nhost: \"\"", want: with(appGateway, func(e *effective) {
			e.DefaultHost = ""
		})},
		{name: "appgateway fast recheck (v1) shortens the timeout", check: "preset: appgateway\nfast_recheck_interval: 2s", want: with(appGateway, func(e *effective) {
			e.Timeout = 2 * time.Second
		})},
		{name: "appservice after completion keeps its timeout", check: "preset: appservice\npath: /health\ncadence: after_completion\ninterval: 10s", want: with(appService, func(e *effective) {
			e.Cadence, e.Interval = scheduler.AfterCompletion, 10*time.Second
		})},
		{name: "no preset fixed rate", check: "protocol: http\ncadence: fixed_rate\ninterval: 2s", want: with(noPreset, func(e *effective) {
			e.Cadence, e.Interval, e.Timeout = scheduler.FixedRate, 2*time.Second, 2*time.Second
		})},
		{name: "frontdoor fall replaces window, rise from window", check: "preset: frontdoor\nfall: 5", want: with(frontDoor, func(e *effective) {
			e.Window, e.Fall = scheduler.Window{}, 5
		})},
		{name: "frontdoor rise and fall", check: "preset: frontdoor\nrise: 1\nfall: 2\nmethod: GET\nuser_agent: probe", want: with(frontDoor, func(e *effective) {
			e.Window, e.Rise, e.Fall, e.Method, e.UserAgent = scheduler.Window{}, 1, 2, "GET", "probe"
		})},
		{name: "appservice window replaces rise and fall", check: "preset: appservice\npath: /health\nwindow: {size: 20, required: 5}", want: with(appService, func(e *effective) {
			e.Window, e.Rise, e.Fall = scheduler.Window{Size: 20, Required: 5}, 5, 16
		})},
		{name: "appservice fall lower bound", check: "preset: appservice\npath: /health\nfall: 2", want: with(appService, func(e *effective) { e.Fall = 2 })},
		{name: "globalaccelerator range bounds", check: "preset: globalaccelerator\nport: 9000\ninterval: 50s\nrise: 2\nfall: 10", want: with(globalAccel, func(e *effective) {
			e.Interval, e.Rise, e.Fall = 50*time.Second, 2, 10
		})},
		{name: "globalaccelerator interval lower bound", check: "preset: globalaccelerator\nport: 9000\ninterval: 1s", want: with(globalAccel, func(e *effective) { e.Interval = time.Second })},
		{name: "globalaccelerator timeout is a setting", check: "preset: globalaccelerator\nport: 9000\ntimeout: 500ms", want: with(globalAccel, func(e *effective) { e.Timeout = 500 * time.Millisecond })},
		{name: "pool policy overrides", check: "preset: appservice\npath: /health", pool: "max_unhealthy_percent: 100\nfail_open: false", want: with(appService, func(e *effective) {
			e.MaxUnhealthy, e.FailOpen = 100, false
		})},
		{name: "no preset millisecond bounds", check: "protocol: http\ninterval: 1ms\ntimeout: 24h\nrise: 1000\nfall: 1", want: with(noPreset, func(e *effective) {
			e.Interval, e.Timeout, e.Rise, e.Fall = time.Millisecond, 24*time.Hour, 1000, 1
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yaml := "checks:\n  c:\n" + indent(tt.check, "    ") + "\npools:\n  - name: p\n    check: c\n    targets: [\"127.0.0.1\"]\n" + indent(tt.pool, "    ")
			cfg := mustParse(t, yaml, "")
			if diff := cmp.Diff(tt.want, effectiveOf(cfg)); diff != "" {
				t.Errorf("effective settings (-want +got):\n%s", diff)
			}
			if err := cfg.Checks[0].Timing.Validate(); err != nil {
				t.Errorf("Timing.Validate(): %v", err)
			}
		})
	}
}

func indent(s, prefix string) string {
	if s == "" {
		return ""
	}
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// TestPresetWindows checks the detection windows of every preset's defaults,
// as docs/semantics.md computes them (W1, W2 with r = t, W3).
func TestPresetWindows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		check      string
		w1, w2, w3 time.Duration
	}{
		{"preset: appservice\npath: /h", 600 * time.Second, 60 * time.Second, 660 * time.Second},
		{"preset: frontdoor", 90 * time.Second, 60 * time.Second, 120 * time.Second},
		{"preset: appgateway", 90 * time.Second, 30 * time.Second, 120 * time.Second},
		{"preset: globalaccelerator\nport: 80", 13 * time.Second, 13 * time.Second, 15 * time.Second},
		{"preset: globalaccelerator\nprotocol: http", 13 * time.Second, 13 * time.Second, 15 * time.Second},
		{"preset: appgateway\ncadence: after_completion", 150 * time.Second, 30 * time.Second, 180 * time.Second},
	}
	for _, tt := range tests {
		cfg := mustParse(t, "checks:\n  c:\n"+indent(tt.check, "    ")+"\npools: [{name: p, check: c, targets: [127.0.0.1]}]\n", "")
		c := cfg.Checks[0]
		if w1, w2, w3 := c.FailureWindow(), c.SuccessWindow(c.Timeout), c.FailureWindowFromOnset(); w1 != tt.w1 || w2 != tt.w2 || w3 != tt.w3 {
			t.Errorf("%s: W1 %v W2 %v W3 %v, want %v %v %v", tt.check, w1, w2, w3, tt.w1, tt.w2, tt.w3)
		}
	}
}

func TestLoadExample(t *testing.T) {
	t.Parallel()
	cfg, err := Load("testdata/example.yaml", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Metrics.PerTarget {
		t.Error("metrics.per_target = true, want false as set in the file")
	}
	var names []string
	for _, c := range cfg.Checks {
		names = append(names, c.Name+"/"+c.Preset)
	}
	want := []string{"app/appservice", "edge/frontdoor", "ga/globalaccelerator", "ga-slow/globalaccelerator", "gateway/appgateway", "web/"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("checks (-want +got):\n%s", diff)
	}
	// ga and ga-slow differ only in interval: one probe class.
	if ga, slow := cfg.CheckByName("ga"), cfg.CheckByName("ga-slow"); ga.Class != slow.Class {
		t.Errorf("ga class %d, ga-slow class %d: want one class", ga.Class, slow.Class)
	}
	if got := cfg.CheckByName("nope"); got != nil {
		t.Errorf("CheckByName(nope) = %v, want nil", got)
	}
	gw := cfg.Pools[2]
	if gw.Name != "gateway" || len(gw.Members) != 3 || !gw.FailOpen {
		t.Errorf("pool gateway = %+v, want 3 members from targets.txt and fail_open", gw)
	}
	if got := cfg.Streams(); got != 12 {
		t.Errorf("Streams() = %d, want 12", got)
	}
}

func TestMetricsDefault(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, "checks: {c: {protocol: http}}\npools: [{name: p, check: c, targets: [127.0.0.1]}]\n", "")
	if !cfg.Metrics.PerTarget {
		t.Error("metrics.per_target defaults to false, want true")
	}
}

func TestFilesRelativeToConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("secret", "s3cret\n")
	writeCertFiles(t, dir, "ca.pem", "ca.key")
	writeCertFiles(t, dir, "client.pem", "client.key")
	write("targets.txt", "# fleet\n127.0.0.1\n\n  127.0.0.2:8443 # spare\n")
	write("sonde.yaml", `checks:
  file-token:
    preset: appservice
    protocol: https
    path: /health
    auth_token: {secret_file: secret}
    tls: {ca_file: ca.pem, cert_file: client.pem, key_file: client.key, server_name: api.internal}
  env-token:
    preset: appservice
    path: /health
    auth_token: {secret_env: SONDE_TEST_TOKEN}
pools:
  - {name: a, check: file-token, targets_file: targets.txt}
  - {name: b, check: env-token, targets: ["127.0.0.1"]}
`)
	cfg, err := Load(filepath.Join(dir, "sonde.yaml"), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	env, file := cfg.Checks[0], cfg.Checks[1]
	if diff := cmp.Diff(AuthToken{SecretEnv: "SONDE_TEST_TOKEN"}, env.AuthToken); diff != "" {
		t.Errorf("env auth token (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(AuthToken{SecretFile: filepath.Join(dir, "secret")}, file.AuthToken); diff != "" {
		t.Errorf("file auth token (-want +got):\n%s", diff)
	}
	wantTLS := httpprobe.TLSOptions{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "client.pem"), KeyFile: filepath.Join(dir, "client.key")}
	if diff := cmp.Diff(wantTLS, file.TLS); diff != "" {
		t.Errorf("tls (-want +got):\n%s", diff)
	}
	if file.SNI != "api.internal" {
		t.Errorf("SNI = %q, want tls.server_name api.internal", file.SNI)
	}
	var eps []string
	for _, id := range cfg.Pools[0].Members {
		eps = append(eps, cfg.Targets[id].AddrPort().String())
	}
	if diff := cmp.Diff([]string{"127.0.0.1:443", "127.0.0.2:8443"}, eps); diff != "" {
		t.Errorf("targets from file (-want +got):\n%s", diff)
	}
}

func TestAuthTokenEmptyEnv(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte("checks: {c: {protocol: http, auth_token: {secret_env: SONDE_TEST_EMPTY}}}\npools: [{name: p, check: c, targets: [127.0.0.1]}]\n"), "", testOptions())
	want := "checks.c.auth_token.secret_env: environment variable SONDE_TEST_EMPTY is empty"
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %q", err, want)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	_, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), testOptions())
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrInvalid) {
		t.Errorf("Load(missing) = %v, want a not-exist error that is not ErrInvalid", err)
	}
	_, err = Load("testdata/invalid-targets-file-missing.yaml", testOptions())
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrInvalid) {
		t.Errorf("missing targets_file: %v, want both ErrInvalid and fs.ErrNotExist", err)
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "pools[0].targets_file" {
		t.Errorf("missing targets_file: %v, want a FieldError on pools[0].targets_file", err)
	}
}

// TestTargetsFileNotRegular checks that a FIFO, a directory or a device as
// targets_file is refused at once: reading a FIFO nobody writes would hang
// the load.
func TestTargetsFileNotRegular(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"fifo", "dir", "/dev/null"} {
		t.Run(name, func(t *testing.T) {
			var err error
			testenv.ReturnsWithin(t, "the load of targets_file "+name, func() {
				_, err = Parse([]byte("checks: {c: {protocol: http}}\npools: [{name: p, check: c, targets_file: "+name+"}]\n"), dir, testOptions())
			})
			want := fmt.Sprintf("pools[0].targets_file: %q is not a regular file", name)
			if err == nil || err.Error() != want {
				t.Fatalf("error %v, want %q", err, want)
			}
		})
	}
}

// TestLoadNotRegular checks that Load refuses a FIFO as the config file at
// once, naming it, where reading it would wait for a writer.
func TestLoadNotRegular(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "sonde.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A load that hangs is released when the test ends, by a writer.
	t.Cleanup(func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	var err error
	testenv.ReturnsWithin(t, "Load of a FIFO", func() { _, err = Load(fifo, testOptions()) })
	if want := "read config: " + fifo + ": not a regular file"; err == nil || err.Error() != want || !errors.Is(err, safefile.ErrNotRegular) {
		t.Fatalf("error %v, want %q", err, want)
	}
}

// TestLoadSums checks that Load keeps the digests of the bytes it parsed,
// of the config file and of a targets file that two pools name, and that a
// file whose two reads differ gets the zero sum.
func TestLoadSums(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path, targets := filepath.Join(dir, "sonde.yaml"), filepath.Join(dir, "targets.txt")
	yaml := "checks: {c: {protocol: http}}\npools:\n  - {name: a, check: c, targets_file: targets.txt}\n  - {name: b, check: c, targets_file: targets.txt}\n"
	for _, f := range []struct{ path, data string }{{path, yaml}, {targets, "192.0.2.1\n"}} {
		if err := os.WriteFile(f.path, []byte(f.data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := Load(path, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][sha256.Size]byte{path: sha256.Sum256([]byte(yaml)), targets: sha256.Sum256([]byte("192.0.2.1\n"))}
	if diff := cmp.Diff(want, cfg.Sums); diff != "" {
		t.Errorf("sums (-want +got):\n%s", diff)
	}

	one, two := sha256.Sum256([]byte("1")), sha256.Sum256([]byte("2"))
	sums := addSum(addSum(nil, "f", one), "f", one)
	if sums["f"] != one {
		t.Errorf("two reads of the same content: sum %x, want %x", sums["f"], one)
	}
	if sums = addSum(addSum(sums, "f", two), "f", two); sums["f"] != ([sha256.Size]byte{}) {
		t.Errorf("reads of different contents: sum %x, want zero", sums["f"])
	}
}

// TestRemediation parses the remediation contract and the defaults
// App Service has (R1).
func TestRemediation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hook.key"), []byte("k3y\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := mustParse(t, `checks:
  app: {preset: appservice, path: /health}
pools:
  - {name: app-a, check: app, targets: ["127.0.0.1:8081", "127.0.0.2:8081"]}
  - {name: app-b, check: app, targets: ["127.0.0.1:8082"]}
remediation:
  - name: plan-a
    pools: [app-a, app-b]
    after: 1h
    max_per_hour: 1
    max_per_day: 3
    max_per_12h: 0
    command: ["/usr/local/bin/replace-instance", "--plan", "plan-a"]
    webhook: {url: "https://ops.example/replace", secret_file: hook.key}
  - name: plan-b
    pools: [app-b]
    after: 2s
    command: [bin/replace]
`, dir)
	want := []*Remediation{
		{
			Name: "plan-a", Pools: []string{"app-a", "app-b"}, PoolIndex: []int{0, 1}, After: time.Hour,
			MaxPerHour: 1, MaxPerDay: 3, Command: []string{"/usr/local/bin/replace-instance", "--plan", "plan-a"},
			WebhookURL: "https://ops.example/replace", WebhookSecretFile: filepath.Join(dir, "hook.key"), Timeout: time.Minute,
		},
		{
			Name: "plan-b", Pools: []string{"app-b"}, PoolIndex: []int{1}, After: 2 * time.Second,
			MaxPerHour: DefaultMaxPerHour, MaxPerDay: DefaultMaxPerDay, MaxPer12h: DefaultMaxPer12h,
			Command: []string{filepath.Join(dir, "bin/replace")}, Timeout: DefaultRemediationTimeout, index: 1,
		},
	}
	if diff := cmp.Diff(want, cfg.Remediations, cmp.AllowUnexported(Remediation{})); diff != "" {
		t.Errorf("remediations (-want +got):\n%s", diff)
	}
	// A reload follows the webhook's secret file.
	if diff := cmp.Diff([]safefile.File{{Path: filepath.Join(dir, "hook.key"), Max: safefile.MaxSecret}}, cfg.Files); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}

// TestHealthChecksOff checks the switch of Front Door's disabled probes and
// Global Accelerator's health checks off: the pool keeps its members, none
// is disabled in it, and a target no other pool probes is not probed.
func TestHealthChecksOff(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, `checks:
  edge: {preset: frontdoor}
pools:
  - {name: static, check: edge, targets: ["127.0.0.1", "127.0.0.2"], health_checks: false}
  - {name: probed, check: edge, targets: ["127.0.0.2"]}
`, "")
	static := cfg.Pools[0]
	if static.HealthChecks || len(static.Members) != 2 || len(static.Disabled) != 0 {
		t.Fatalf("pool static = %+v, want health checks off, 2 members, none disabled", static)
	}
	if !cfg.Pools[1].HealthChecks {
		t.Fatal("pool probed has health checks off; the default is on")
	}
	if !cfg.Targets[0].Disabled() || cfg.Targets[1].Disabled() {
		t.Fatalf("targets %+v: want 127.0.0.1 not probed, 127.0.0.2 probed for pool probed", cfg.Targets)
	}
	if got := cfg.Streams(); got != 1 {
		t.Fatalf("Streams() = %d, want 1", got)
	}
}
