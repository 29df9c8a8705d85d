package deploy

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	_ "github.com/prometheus/prometheus/discovery/kubernetes" // kubernetes_sd_configs in the scrape example
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/sondeprobe/sonde/internal/testenv"
)

var ruleFiles = []string{"prometheus/sonde-recording.rules.yaml", "prometheus/sonde-alerts.rules.yaml"}

var promql = parser.NewParser(parser.Options{})

// rule is one rule of the shipped files, in file order.
type rule struct {
	file, group string
	rulefmt.Rule
}

// loadRules parses the shipped rule files as Prometheus does, strictly.
func loadRules(t *testing.T) []rule {
	t.Helper()
	var rules []rule
	for _, f := range ruleFiles {
		groups, errs := rulefmt.ParseFile(f, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
		for _, err := range errs {
			t.Errorf("%s: %v", f, err)
		}
		if groups == nil {
			t.FailNow()
		}
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				rules = append(rules, rule{file: f, group: g.Name, Rule: r})
			}
		}
	}
	return rules
}

// metricNames returns the metric names an expression selects.
func metricNames(t *testing.T, expr string) []string {
	t.Helper()
	e, err := promql.ParseExpr(expr)
	if err != nil {
		t.Errorf("parse %q: %v", expr, err)
		return nil
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel {
				name = m.Value
			}
		}
		if name == "" {
			t.Errorf("%q selects series without a metric name", expr)
		}
		names = append(names, name)
		return nil
	})
	return names
}

// TestRules checks every rule beyond what Prometheus checks: it selects only
// metrics sonde exports or rules record, a recorded series is defined before
// a rule of the same file uses it, and every alert says how bad and what.
func TestRules(t *testing.T) {
	exported := exportedNames(t)
	recorded := map[string]bool{}
	alerts := 0
	for _, r := range loadRules(t) {
		for _, name := range metricNames(t, r.Expr) {
			if !exported[name] && !recorded[name] {
				t.Errorf("%s: %s%s uses %s, which sonde does not export (docs/metrics.md) and no earlier rule records",
					r.file, r.Alert, r.Record, name)
			}
		}
		if r.Record != "" {
			if strings.Count(r.Record, ":") < 1 || strings.HasPrefix(r.Record, "sonde_") {
				t.Errorf("recording rule %s: want level:metric:operations", r.Record)
			}
			if _, dup := recorded[r.Record]; dup {
				t.Errorf("%s is recorded twice", r.Record)
			}
			recorded[r.Record] = true
			continue
		}
		alerts++
		if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
			t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, s)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("alert %s: want a summary and a description", r.Alert)
		}
		if !strings.HasPrefix(r.Alert, "Sonde") {
			t.Errorf("alert %s: want the Sonde prefix", r.Alert)
		}
	}
	if alerts == 0 || len(recorded) == 0 {
		t.Fatalf("%d alerts, %d recording rules", alerts, len(recorded))
	}
}

// ruleTest is the part of a promtool test file this package reads.
type ruleTest struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		PromQL []struct {
			Expr string `json:"expr"`
		} `json:"promql_expr_test"`
		Alerts []struct {
			Name      string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestRulesAllTested makes sure promtool's tests cover every rule: each
// recording rule is queried by a promql_expr_test, each alert is seen firing
// by an alert_rule_test, and each test file loads all the shipped rules.
func TestRulesAllTested(t *testing.T) {
	files, err := filepath.Glob("prometheus/tests/*.test.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool test files: %v", err)
	}
	queried, fired := map[string]bool{}, map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rt ruleTest
		if err := yaml.Unmarshal(b, &rt); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var loaded []string
		for _, rf := range rt.RuleFiles {
			loaded = append(loaded, filepath.Join("prometheus", filepath.Base(rf)))
		}
		if !slices.Equal(setOf(loaded...), setOf(ruleFiles...)) {
			t.Errorf("%s loads %v, want %v", f, rt.RuleFiles, ruleFiles)
		}
		for _, tc := range rt.Tests {
			for _, q := range tc.PromQL {
				for _, n := range metricNames(t, q.Expr) {
					queried[n] = true
				}
			}
			for _, a := range tc.Alerts {
				if len(a.ExpAlerts) > 0 {
					fired[a.Name] = true
				}
			}
		}
	}
	for _, r := range loadRules(t) {
		switch {
		case r.Record != "" && !queried[r.Record]:
			t.Errorf("recording rule %s: no promql_expr_test queries it", r.Record)
		case r.Alert != "" && !fired[r.Alert]:
			t.Errorf("alert %s: no alert_rule_test sees it fire", r.Alert)
		}
	}
}

func TestPromtoolCheckRules(t *testing.T) {
	promtool := testenv.Tool(t, "promtool", "prometheus")
	out, err := exec.Command(promtool, append([]string{"check", "rules"}, ruleFiles...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

func TestPromtoolTestRules(t *testing.T) {
	promtool := testenv.Tool(t, "promtool", "prometheus")
	files, err := filepath.Glob("prometheus/tests/*.test.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool test files: %v", err)
	}
	out, err := exec.Command(promtool, append([]string{"test", "rules"}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	if got := strings.Count(string(out), "SUCCESS"); got != len(files) {
		t.Fatalf("promtool test rules: %d of %d files succeeded\n%s", got, len(files), out)
	}
}

// TestScrapeExample loads the plain-Prometheus example with Prometheus's
// own config loader (Debian's promtool lacks Kubernetes discovery) and runs
// its relabeling on the discovery labels of pods.
func TestScrapeExample(t *testing.T) {
	cfg, err := config.LoadFile("kubernetes/prometheus-scrape.yaml", false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.ScrapeConfigs) != 1 || cfg.ScrapeConfigs[0].JobName != "sonde" {
		t.Fatalf("want one scrape config, job sonde")
	}
	sc := cfg.ScrapeConfigs[0]
	pod := func(extra ...string) labels.Labels {
		kv := []string{
			"__address__", "10.1.2.3:9123",
			"__meta_kubernetes_namespace", "monitoring",
			"__meta_kubernetes_pod_name", "sonde-vantage-b-1",
			"__meta_kubernetes_pod_phase", "Running",
			"__meta_kubernetes_pod_label_app_kubernetes_io_name", "sonde",
			"__meta_kubernetes_pod_label_vantage", "b",
			"__meta_kubernetes_pod_container_port_name", "metrics",
		}
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		for i := 0; i < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return labels.FromMap(m)
	}
	for _, tc := range []struct {
		name string
		in   labels.Labels
		keep bool
	}{
		{"sonde pod", pod(), true},
		{"other app", pod("__meta_kubernetes_pod_label_app_kubernetes_io_name", "nginx"), false},
		{"other port", pod("__meta_kubernetes_pod_container_port_name", "debug"), false},
		{"pending pod", pod("__meta_kubernetes_pod_phase", "Pending"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lb := labels.NewBuilder(tc.in)
			keep := relabel.ProcessBuilder(lb, sc.RelabelConfigs...)
			out := lb.Labels()
			if keep != tc.keep {
				t.Fatalf("kept %v, want %v", keep, tc.keep)
			}
			if !keep {
				return
			}
			for k, want := range map[string]string{"vantage": "b", "namespace": "monitoring", "pod": "sonde-vantage-b-1"} {
				if got := out.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}
