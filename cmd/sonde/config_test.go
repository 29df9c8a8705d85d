package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// presetsConfig has one check per preset with default settings.
const presetsConfig = `checks:
  app: {preset: appservice, path: /health}
  edge: {preset: frontdoor}
  gw: {preset: appgateway}
  ga: {preset: globalaccelerator, port: 9000}
  ga-follower: {preset: globalaccelerator, port: 9000, interval: 10s}
pools:
  - {name: app, check: app, targets: ["127.0.0.1:8081", "127.0.0.2:8081"], disabled: ["127.0.0.2:8081"]}
  - {name: edge, check: edge, targets: ["127.0.0.1"]}
  - {name: gw, check: gw, targets: ["127.0.0.1:8080"]}
  - {name: ga, check: ga, targets: ["127.0.0.0/30"]}
  - {name: ga-follower, check: ga-follower, targets: ["127.0.0.1", "127.0.0.9"]}
`

func writeConfig(t *testing.T, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sonde.yaml")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigCheckJSON(t *testing.T) {
	file := writeConfig(t, presetsConfig)
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"config", "check", "-json", file}, &out, &errOut)
	if code := report(err, &errOut); code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	var rep struct {
		Checks []struct {
			Name                 string                        `json:"name"`
			Preset               *string                       `json:"preset"`
			Protocol             string                        `json:"protocol"`
			Port                 *int                          `json:"port"`
			IntervalSeconds      float64                       `json:"interval_seconds"`
			TimeoutSeconds       float64                       `json:"timeout_seconds"`
			Rise                 int                           `json:"rise"`
			Fall                 int                           `json:"fall"`
			Window               *struct{ Size, Required int } `json:"window"`
			FailureWindowSeconds float64                       `json:"failure_window_seconds"`
			SuccessWindowSeconds float64                       `json:"success_window_seconds"`
			OnsetWindowSeconds   float64                       `json:"failure_window_from_onset_seconds"`
			Cadence              string                        `json:"cadence"`
			ProbeClass           int                           `json:"probe_class"`
		} `json:"checks"`
		Pools []struct {
			Name                string `json:"name"`
			Check               string `json:"check"`
			Targets             int    `json:"targets"`
			Disabled            int    `json:"disabled"`
			MaxUnhealthyPercent int    `json:"max_unhealthy_percent"`
			FailOpen            bool   `json:"fail_open"`
		} `json:"pools"`
		Targets      int `json:"targets"`
		ProbeStreams int `json:"probe_streams"`
		ProbeRate    struct {
			Endpoints      int     `json:"endpoints"`
			MaxPerEndpoint float64 `json:"max_per_endpoint"`
			MaxEndpoint    string  `json:"max_endpoint"`
			Total          float64 `json:"total"`
		} `json:"probe_rate"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("decode %s: %v", out.String(), err)
	}

	type windows struct {
		preset, cadence   string
		interval, timeout float64
		rise, fall        int
		window            bool
		w1, w2, w3        float64
	}
	want := map[string]windows{
		// Fixed rate: W1 = i*(k-1) + t, W2 = i*(k-1) + r with r = t.
		// After completion: W1 = t*k + i*(k-1), W2 = r*k + i*(k-1).
		// Both: W3 = W1 + i.
		"app":  {"appservice", "fixed_rate", 60, 60, 1, 10, false, 600, 60, 660},
		"edge": {"frontdoor", "fixed_rate", 30, 30, 2, 3, true, 90, 60, 120},
		"gw":   {"appgateway", "fixed_rate", 30, 30, 1, 3, false, 90, 30, 120},
		"ga":   {"globalaccelerator", "after_completion", 2, 3, 3, 3, false, 13, 3*3 + 2*2, 13 + 2},
	}
	seen := 0
	for _, c := range rep.Checks {
		w, ok := want[c.Name]
		if !ok {
			continue
		}
		seen++
		if c.Preset == nil || *c.Preset != w.preset || c.Cadence != w.cadence {
			t.Errorf("%s: preset %v cadence %s, want %s %s", c.Name, c.Preset, c.Cadence, w.preset, w.cadence)
		}
		if c.IntervalSeconds != w.interval || c.TimeoutSeconds != w.timeout || c.Rise != w.rise || c.Fall != w.fall || (c.Window != nil) != w.window {
			t.Errorf("%s: interval %v timeout %v rise %d fall %d window %v, want %v %v %d %d window %t",
				c.Name, c.IntervalSeconds, c.TimeoutSeconds, c.Rise, c.Fall, c.Window, w.interval, w.timeout, w.rise, w.fall, w.window)
		}
		if c.FailureWindowSeconds != w.w1 || c.SuccessWindowSeconds != w.w2 || c.OnsetWindowSeconds != w.w3 {
			t.Errorf("%s: W1 %v W2 %v W3 %v, want %v %v %v", c.Name, c.FailureWindowSeconds, c.SuccessWindowSeconds, c.OnsetWindowSeconds, w.w1, w.w2, w.w3)
		}
	}
	if seen != len(want) {
		t.Errorf("found %d of the %d preset checks in %s", seen, len(want), out.String())
	}
	if ga := rep.Checks[2]; ga.Name != "ga" || ga.Protocol != "tcp" || ga.Port == nil || *ga.Port != 9000 {
		t.Errorf("checks[2] = %+v, want ga, tcp, port 9000", ga)
	}
	if c := rep.Checks[1]; c.Name != "edge" || c.Window == nil || c.Window.Size != 4 || c.Window.Required != 2 {
		t.Errorf("checks[1] = %+v, want edge with window 4/2", c)
	}
	if len(rep.Pools) != 5 || rep.Pools[0].Name != "app" || rep.Pools[0].Targets != 2 || rep.Pools[0].Disabled != 1 ||
		rep.Pools[0].MaxUnhealthyPercent != 50 || !rep.Pools[0].FailOpen || rep.Pools[3].FailOpen {
		t.Errorf("pools = %+v", rep.Pools)
	}
	// ga and ga-follower share 127.0.0.1:9000 (one stream); app's second
	// target is disabled everywhere: 2+1+1+4+2 = 10 targets, 8 streams.
	if rep.Targets != 10 || rep.ProbeStreams != 8 {
		t.Errorf("targets %d, probe streams %d, want 10 and 8", rep.Targets, rep.ProbeStreams)
	}
	if rep.ProbeRate.MaxPerEndpoint != 0.5 || rep.ProbeRate.Endpoints != 8 {
		t.Errorf("probe rate %+v, want max 0.5/s over 8 endpoints", rep.ProbeRate)
	}
}

func TestConfigCheckText(t *testing.T) {
	file := writeConfig(t, presetsConfig)
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"config", "check", "-endpoints", file}, &out, &errOut); err != nil {
		t.Fatalf("run: %v (stderr %q)", err, errOut.String())
	}
	// Rows of the check table, compared field by field.
	wantRows := map[string]string{
		"ga":   "ga globalaccelerator tcp 9000 after_completion 2s 3s rise 3 fall 3 unknown 13s 13s 15s 0.5/s 2",
		"edge": "edge frontdoor http 80 fixed_rate 30s 30s window 2 of 4 unknown 90s 60s 120s 0.03333/s 1",
		"app":  "app appservice http 80 fixed_rate 60s 60s rise 1 fall 10 unknown 600s 60s 660s 0.01667/s 0",
		"gw":   "gw appgateway http 80 fixed_rate 30s 30s rise 1 fall 3 unhealthy 90s 30s 120s 0.03333/s 3",
	}
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && wantRows[f[0]] != "" && len(f) > 2 && strings.HasSuffix(f[len(f)-2], "/s") {
			if got := strings.Join(f, " "); got != wantRows[f[0]] {
				t.Errorf("row %s:\n got %s\nwant %s", f[0], got, wantRows[f[0]])
			}
			delete(wantRows, f[0])
		}
	}
	if len(wantRows) > 0 {
		t.Errorf("rows missing: %v\n%s", wantRows, out.String())
	}
	for _, want := range []string{
		"10 unique targets, 8 probe streams after deduplication",
		"127.0.0.1:9000  0.5",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestConfigCheckInvalid(t *testing.T) {
	file := writeConfig(t, "checks:\n  edge: {preset: globalaccelerator, port: 80, fall: 11}\npools: [{name: p, check: edge, targets: [127.0.0.1]}]\n")
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"config", "check", "-json", file}, &out, &errOut)
	if code := report(err, &errOut); code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
	want := "sonde: " + file + ": checks.edge.fall: 11 is out of range 2..10 for preset globalaccelerator\n"
	if errOut.String() != want {
		t.Errorf("stderr %q, want %q", errOut.String(), want)
	}
	if out.Len() != 0 {
		t.Errorf("stdout %q, want nothing", out.String())
	}
}

func TestConfigUsage(t *testing.T) {
	for _, args := range [][]string{
		{"config"},
		{"config", "lint"},
		{"config", "check"},
		{"config", "check", "a.yaml", "b.yaml"},
		{"config", "check", "-nope", "a.yaml"},
		{"config", "check", filepath.Join(t.TempDir(), "missing.yaml")},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, &out, &errOut)
		if code := report(err, &errOut); code != exitUsage {
			t.Errorf("%q: exit %d, want %d (stderr %q)", args, code, exitUsage, errOut.String())
		}
	}
}

func TestExampleConfig(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"config", "check", "../../examples/sonde.yaml"}, &out, &errOut)
	if code := report(err, &errOut); code != exitOK {
		t.Fatalf("examples/sonde.yaml: exit %d, stderr %q", code, errOut.String())
	}
}

// TestConfigCheckRemediation checks what `sonde config check` shows of a
// remediation (its budget, action and the instances it covers), of a pool
// with health checks off, and of App Gateway's probe port and Host.
func TestConfigCheckRemediation(t *testing.T) {
	file := writeConfig(t, `checks:
  app: {preset: appservice, path: /health}
  gw: {preset: appgateway, port: 8080}
pools:
  - {name: app-a, check: app, targets: ["127.0.0.1:8081", "127.0.0.2:8081"]}
  - {name: app-b, check: app, targets: ["127.0.0.1:8082"]}
  - {name: static, check: app, targets: ["127.0.0.3:8081"], health_checks: false}
  - {name: gw, check: gw, targets: ["127.0.0.4:9000"]}
remediation:
  - name: plan-a
    pools: [app-a, app-b, static]
    after: 1h
    command: ["/usr/local/bin/replace-instance", "--plan", "plan-a"]
`)
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"config", "check", "-json", file}, &out, &errOut); err != nil {
		t.Fatalf("run: %v (stderr %q)", err, errOut.String())
	}
	var rep struct {
		Checks []struct {
			Name        string `json:"name"`
			PortWins    bool   `json:"port_wins"`
			DefaultHost string `json:"default_host"`
		} `json:"checks"`
		Pools []struct {
			Name         string `json:"name"`
			HealthChecks bool   `json:"health_checks"`
		} `json:"pools"`
		Remediations []struct {
			Name               string   `json:"name"`
			AfterSeconds       float64  `json:"after_seconds"`
			MaxPerHour         int      `json:"max_per_hour"`
			MaxPer12h          int      `json:"max_per_12h"`
			MaxPerDay          int      `json:"max_per_day"`
			Command            []string `json:"command"`
			Instances          int      `json:"instances"`
			MultiPoolInstances int      `json:"multi_pool_instances"`
		} `json:"remediations"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Remediations) != 1 {
		t.Fatalf("remediations %+v", rep.Remediations)
	}
	r := rep.Remediations[0]
	if r.Name != "plan-a" || r.AfterSeconds != 3600 || r.MaxPerHour != 1 || r.MaxPer12h != 0 || r.MaxPerDay != 3 ||
		len(r.Command) != 3 || r.Instances != 2 || r.MultiPoolInstances != 1 {
		t.Errorf("remediation %+v: want App Service's budget, 2 instances (127.0.0.3 is in a pool without health checks), 1 in two pools", r)
	}
	if gw := rep.Checks[1]; gw.Name != "gw" || !gw.PortWins || gw.DefaultHost != "127.0.0.1" {
		t.Errorf("check %+v: want gw's port winning and Host 127.0.0.1", gw)
	}
	if p := rep.Pools[2]; p.Name != "static" || p.HealthChecks {
		t.Errorf("pool %+v: want health checks off", p)
	}

	out.Reset()
	if err := run(context.Background(), []string{"config", "check", file}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"plan-a       app-a,app-b,static  3600s  1/h 3/day  2 (1 in several pools)",
		`command ["/usr/local/bin/replace-instance" "--plan" "plan-a"], timeout 60s`,
		"8080!",
		"host 127.0.0.1[:port]",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestConfigCheckWebhooks shows the webhooks: where events go, which, and
// whether requests are signed.
func TestConfigCheckWebhooks(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hook.secret"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "sonde.yaml")
	if err := os.WriteFile(file, []byte(presetsConfig+`webhooks:
  - {url: "http://127.0.0.1:9124/", name: lb, secret_file: hook.secret, timeout: 5s, events: {kinds: [route, fail_open], pools: [app]}}
  - {url: "https://hooks.internal/sonde"}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"config", "check", file}, &out, &errOut); err != nil {
		t.Fatalf("run: %v (stderr %q)", err, errOut.String())
	}
	for _, want := range []string{
		"lb http://127.0.0.1:9124/ route,fail_open app true 5s",
		"hooks.internal https://hooks.internal/sonde all all false 10s",
	} {
		found := false
		for line := range strings.Lines(out.String()) {
			found = found || strings.Join(strings.Fields(line), " ") == want
		}
		if !found {
			t.Errorf("output lacks the row %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"config", "check", "-json", file}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Webhooks []webhookReport `json:"webhooks"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Webhooks) != 2 || !rep.Webhooks[0].Signed || rep.Webhooks[0].TimeoutSeconds != 5 || rep.Webhooks[1].Name != "hooks.internal" {
		t.Fatalf("JSON webhooks %+v", rep.Webhooks)
	}
}

// TestConfigCheckDiscovery checks that config check shows a pool's
// discovery sources, labels and the host names that do not resolve. It
// runs in a network namespace with only loopback, so the lookup of the
// name fails without a packet leaving the machine.
func TestConfigCheckDiscovery(t *testing.T) {
	isolated := testenv.IsolatedNetwork(t, "a network namespace, so that no DNS query leaves")
	file := writeConfig(t, `checks: {web: {protocol: http}}
pools:
  - name: p
    check: web
    targets: [127.0.0.1, nowhere.invalid]
    labels: {team: edge}
    metric_labels: [zone]
    file_sd_configs: [{files: [sd/*.json]}]
    relabel_configs: [{source_labels: [__meta_zone], target_label: zone}]
`)
	out, err := isolated(testenv.Sonde(t), "config", "check", "-json", file).CombinedOutput()
	if err != nil {
		t.Fatalf("config check: %v\n%s", err, out)
	}
	var rep struct {
		Pools []struct {
			Targets      int               `json:"targets"`
			Sources      []string          `json:"discovery_sources"`
			RelabelRules int               `json:"relabel_rules"`
			Labels       map[string]string `json:"labels"`
			MetricLabels []string          `json:"metric_labels"`
			HostNames    int               `json:"host_names"`
			Unresolved   []struct {
				Host  string `json:"host"`
				Port  int    `json:"port"`
				Error string `json:"error"`
			} `json:"unresolved"`
		} `json:"pools"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	p := rep.Pools[0]
	if p.Targets != 1 || len(p.Sources) != 1 || p.Sources[0] != "file_sd_configs[0]" || p.RelabelRules != 1 ||
		p.Labels["team"] != "edge" || len(p.MetricLabels) != 1 || p.HostNames != 1 {
		t.Errorf("pool report %+v", p)
	}
	if len(p.Unresolved) != 1 || p.Unresolved[0].Host != "nowhere.invalid" || p.Unresolved[0].Port != 80 ||
		!strings.HasPrefix(p.Unresolved[0].Error, `cannot resolve "nowhere.invalid"`) {
		t.Errorf("unresolved %+v, want nowhere.invalid:80 with the lookup's error", p.Unresolved)
	}
	text, err := isolated(testenv.Sonde(t), "config", "check", file).CombinedOutput()
	if err != nil || !strings.Contains(string(text), "pool p: nowhere.invalid:80 not probed until it resolves: cannot resolve") ||
		!strings.Contains(string(text), "file_sd_configs[0]") {
		t.Errorf("config check text (%v):\n%s", err, text)
	}
}

// TestConfigCheckStdin: "-" reads the config from standard input, and a
// pipe or FIFO is read to its end (kubectl kustomize … | sonde config check
// -), with the messages and exit codes of a file.
func TestConfigCheckStdin(t *testing.T) {
	var out, errOut bytes.Buffer
	err := runConfigWith(context.Background(), []string{"check", "-json", "-"}, strings.NewReader(presetsConfig), &out, &errOut)
	if err != nil {
		t.Fatalf("config check -: %v (%s)", err, errOut.String())
	}
	var rep struct {
		Checks []json.RawMessage `json:"checks"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Checks) != 5 {
		t.Fatalf("report %s (%v): want the five checks", out.String(), err)
	}

	out.Reset()
	err = runConfigWith(context.Background(), []string{"check", "-"}, strings.NewReader("checks: {c: {fall: 0}}\n"), &out, &errOut)
	if code := report(err, &errOut); code != exitUsage || !strings.Contains(errOut.String(), "sonde: -: ") {
		t.Errorf("invalid config on stdin: exit %d, stderr %q; want %d naming -", code, errOut.String(), exitUsage)
	}

	fifo := filepath.Join(t.TempDir(), "config.fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := os.WriteFile(fifo, []byte(presetsConfig), 0o600); err != nil {
			t.Error(err)
		}
	}()
	out.Reset()
	if err := runConfigWith(context.Background(), []string{"check", fifo}, strings.NewReader(""), &out, &errOut); err != nil {
		t.Fatalf("config check FIFO: %v", err)
	}
	if !strings.Contains(out.String(), "ga-follower") {
		t.Errorf("FIFO report %q lacks the config's checks", out.String())
	}

	// A FIFO nobody writes: the read ends with the command's context.
	lonely := filepath.Join(t.TempDir(), "lonely.fifo")
	if err := unix.Mkfifo(lonely, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := runConfigWith(ctx, []string{"check", lonely}, strings.NewReader(""), &out, &errOut); err == nil {
		t.Error("a FIFO without a writer: no error after the context ended")
	}
}
