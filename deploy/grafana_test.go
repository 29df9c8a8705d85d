package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

const dashboardFile = "grafana/sonde.json"

// dashPanel is the part of a Grafana panel this package reads.
type dashPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ X, Y, W, H int } `json:"gridPos"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"` // of a collapsed row
}

type dashboard struct {
	UID        string      `json:"uid"`
	Title      string      `json:"title"`
	Panels     []dashPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// grafanaDurations stand in for Grafana's interval variables when parsing.
var grafanaDurations = map[string]string{
	"__rate_interval": "5m", "__interval": "1m", "__range": "1h",
}

var grafanaVar = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// substitute replaces Grafana's variables in q as Grafana would before
// sending it: interval variables with durations, the dashboard's own
// variables (inside label matchers) with a value. It reports variables the
// dashboard does not define.
func substitute(t *testing.T, where, q string, defined map[string]bool) string {
	t.Helper()
	return grafanaVar.ReplaceAllStringFunc(q, func(m string) string {
		sm := grafanaVar.FindStringSubmatch(m)
		name := sm[1] + sm[2] + sm[3]
		if d, ok := grafanaDurations[name]; ok {
			return d
		}
		if !defined[name] {
			t.Errorf("%s: %s is not a variable of the dashboard", where, m)
		}
		return "x"
	})
}

var labelValues = regexp.MustCompile(`^label_values\((.*),\s*(\w+)\)$`)

// TestDashboard parses every query of the dashboard, panels and variables,
// with the PromQL parser, and checks each metric it selects is one sonde
// exports (deploy/README.md) or a rule of deploy/prometheus records.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard needs a uid and a title")
	}
	known := exportedNames(t)
	for _, r := range loadRules(t) {
		if r.Record != "" {
			known[r.Record] = true
		}
	}
	check := func(where, q string) {
		for _, name := range metricNames(t, q) {
			if !known[name] {
				t.Errorf("%s: %s is neither exported by sonde (deploy/README.md) nor recorded by a rule", where, name)
			}
		}
	}

	defined := map[string]bool{}
	for _, v := range d.Templating.List {
		defined[v.Name] = true
	}
	for _, want := range []string{"datasource", "vantage", "pool", "shard", "instance"} {
		if !defined[want] {
			t.Errorf("dashboard has no %s variable", want)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q, want label_values(selector, label)", v.Name, q.Query)
			continue
		}
		check("variable "+v.Name, substitute(t, "variable "+v.Name, m[1], defined))
	}

	ids := map[int]string{}
	queries := 0
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup {
				t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			if g := p.GridPos; g.W < 1 || g.X < 0 || g.X+g.W > 24 || g.H < 1 {
				t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, g)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				where := "panel " + p.Title
				check(where, substitute(t, where, tg.Expr, defined))
				queries++
			}
		}
	}
	walk(d.Panels)
	if queries < 30 {
		t.Errorf("%d queries; the dashboard lost panels", queries)
	}
	// What the dashboard must show.
	for _, want := range []string{
		"vantage_pool:sonde_pool_healthy:ratio", "vantage_pool:sonde_pool_routable:ratio", "sonde_check_failure_window_seconds",
		"sonde_probes_total", "sonde_scheduler_lateness_seconds_bucket", "sonde_syn_replies_total", "sonde_config_reloads_total",
		"sonde_shard_info", "pool_target:sonde_target_unhealthy:quorum",
		// Issue 12: the state and targets of the discovery sources.
		"vantage_pool_source:sonde_discovery_source_healthy:min", "vantage_pool_source:sonde_discovery_targets:max",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("dashboard does not show %s", want)
		}
	}
}
