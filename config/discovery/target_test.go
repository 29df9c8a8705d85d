package discovery

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	"go.yaml.in/yaml/v2"

	"github.com/sondeprobe/sonde/internal/endpointtest"
	"github.com/sondeprobe/sonde/probe/endpoint"
)

func TestParseAddress(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string // addr|host:port, or "error: ..." part of the error
	}{
		{"10.0.0.7", "10.0.0.7:0"},
		{"10.0.0.7:8080", "10.0.0.7:8080"},
		{"[2001:db8::1]:8080", "2001:db8::1:8080"},
		{"2001:db8::1", "2001:db8::1:0"},
		{"::ffff:10.0.0.7", "10.0.0.7:0"},
		{"API-1.Internal.", "api-1.internal:0"},
		{"api-1.internal:80", "api-1.internal:80"},
		{"", "error: no __address__"},
		{"http://10.0.0.7/", "error: no URL scheme"},
		{"[2001:db8::1]", "2001:db8::1:0"},
		{"10.0.0.7:0", "error: out of range 1..65535"},
		{"10.0.0.7:99999", "error: out of range 1..65535"},
		{"10.0.0.7:http", "error: bad port"},
		{"api.test:", "error: bad port"},
		{"[10.0.0.7]:80", "error: is not an IP address"},
		{"10.0.0.0/24", "error: is a CIDR block"},
		{"fe80::1%eth0", "error: zone"},
		{"[fe80::1%eth0]:80", "error: zone"},
		{"-bad-.example", "error: is not an IP address, CIDR block or host name"},
		{"a:b:c", "error: [addr]:port"},
	}
	for _, tt := range tests {
		ep, err := parseAddress(tt.in)
		var got string
		switch {
		case err != nil:
			got = "error: " + err.Error()
			if !strings.Contains(got, strings.TrimPrefix(tt.want, "error: ")) || !strings.HasPrefix(tt.want, "error: ") {
				t.Errorf("parseAddress(%q): %s, want %s", tt.in, got, tt.want)
			}
			continue
		case ep.Host != "":
			got = ep.Host
		default:
			got = ep.Addr.String()
		}
		got += ":" + strconv.Itoa(int(ep.Port))
		if got != tt.want {
			t.Errorf("parseAddress(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func rules(t *testing.T, text string) []*relabel.Config {
	t.Helper()
	var rs []*relabel.Config
	if err := yaml.UnmarshalStrict([]byte(text), &rs); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if err := r.Validate(model.UTF8Validation); err != nil {
			t.Fatal(err)
		}
	}
	return rs
}

// TestRelabel checks how a discovered target becomes a target: the pool's
// labels under the group's under the target's, the rules, "__" labels
// removed, and drops with their reasons.
func TestRelabel(t *testing.T) {
	t.Parallel()
	rl := newRelabeler(labels.FromStrings("team", "edge", "zone", "pool"), rules(t, `
- {source_labels: [__meta_kubernetes_pod_label_app], regex: web, action: keep}
- {source_labels: [__meta_kubernetes_pod_ip], target_label: __address__, replacement: "$1:8080"}
- {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
`))
	group := model.LabelSet{"zone": "group", "__meta_kubernetes_namespace": "prod"}
	ep, ls, ok, reason, _ := processSets(rl, group, model.LabelSet{
		"__address__": "ignored:1", "__meta_kubernetes_pod_ip": "10.1.2.3", "__meta_kubernetes_pod_label_app": "web", "zone": "target",
	})
	if !ok || reason != "" {
		t.Fatalf("kept target dropped: %q", reason)
	}
	if ep.Addr.String() != "10.1.2.3" || ep.Port != 8080 {
		t.Errorf("endpoint %v:%d, want 10.1.2.3:8080", ep.Addr, ep.Port)
	}
	if want := `{namespace="prod", team="edge", zone="target"}`; ls.String() != want {
		t.Errorf("labels %s, want %s", ls, want)
	}
	if _, _, ok, reason, _ := processSets(rl, group, model.LabelSet{"__meta_kubernetes_pod_label_app": "db", "__meta_kubernetes_pod_ip": "10.1.2.4"}); ok || reason != "" {
		t.Errorf("a target the rules drop: kept %v, reason %q", ok, reason)
	}
	long := model.LabelSet{"__meta_kubernetes_pod_label_app": "web", "__meta_kubernetes_pod_ip": "10.1.2.5", "x": model.LabelValue(strings.Repeat("v", MaxLabelValueBytes+1))}
	if _, _, ok, reason, detail := processSets(rl, group, long); ok || reason != reasonValueSize || !strings.Contains(detail, "label x has a value of 4097 bytes") {
		t.Errorf("a label too long: kept %v, reason %q (%s)", ok, reason, detail)
	}
	bad := model.LabelSet{"__meta_kubernetes_pod_label_app": "web", "__meta_kubernetes_pod_ip": "not an ip"}
	if _, _, ok, reason, detail := processSets(rl, group, bad); ok || reason != reasonAddress || !strings.Contains(detail, `"not an ip:8080"`) {
		t.Errorf("a bad address: kept %v, reason %q (%s)", ok, reason, detail)
	}
	many := model.LabelSet{"__meta_kubernetes_pod_label_app": "web", "__meta_kubernetes_pod_ip": "10.1.2.6"}
	for i := range MaxLabels + 1 {
		many[model.LabelName("l"+strconv.Itoa(i+1))] = "v"
	}
	if _, _, ok, reason, _ := processSets(rl, group, many); ok || reason != reasonLabelCount {
		t.Errorf("too many labels: kept %v, reason %q", ok, reason)
	}
}

// processSets relabels one target given as Prometheus's label sets, kept
// in a chunk as a source keeps it.
func processSets(rl *relabeler, group, target model.LabelSet) (ep endpoint.Entry, ls labels.Labels, kept bool, reason, detail string) {
	c := chunkOf(&targetgroup.Group{Labels: group, Targets: []model.LabelSet{target}})
	c.each(func(gl, tl []label) bool {
		ep, ls, kept, reason, detail = rl.process(gl, c.over, tl)
		return false
	})
	return ep, ls, kept, reason, detail
}

// TestEntryPointsAddress runs the shared table's entries through
// parseAddress: a bad __address__ gives the error of a bad target in a
// config file, a block is refused, an empty one is missing; the endpoints
// of the others are tested through the runner and the config (package
// config's TestEntryPointsDiscovery).
func TestEntryPointsAddress(t *testing.T) {
	t.Parallel()
	for _, c := range endpointtest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			e, err := parseAddress(c.Entry)
			var ee *endpoint.EntryError
			switch {
			case c.Entry == "":
				if err == nil || err.Error() != "no __address__" {
					t.Fatalf("parseAddress(%q) = %v, want no __address__", c.Entry, err)
				}
			case c.Kind == endpointtest.EntryErr:
				if !errors.As(err, &ee) || ee.Error() != c.Err || err.Error() != "__address__ "+c.Err {
					t.Fatalf("parseAddress(%q) = %v, want __address__ %s", c.Entry, err, c.Err)
				}
			case c.Kind == endpointtest.BlockRefused:
				if err == nil || !strings.Contains(err.Error(), "is a CIDR block") {
					t.Fatalf("parseAddress(%q) = %v, want a CIDR block refused", c.Entry, err)
				}
			default:
				want, _ := endpoint.ParseEntry(c.Entry)
				if err != nil || e != want {
					t.Fatalf("parseAddress(%q) = %+v, %v; want %+v", c.Entry, e, err, want)
				}
			}
		})
	}
}
