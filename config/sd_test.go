package config

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/config/discovery"
	// The kinds of discovery sonde builds in, as the daemon links them:
	// config's tests read every discovery list.
	_ "github.com/sondeprobe/sonde/config/discovery/kinds"
)

// TestDecodeSources checks that each discovery list is read by the kind
// registered for it, in the order of the lists, with paths made relative
// to the config file's directory. Package kinds checks Prometheus's
// defaults.
func TestDecodeSources(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := mustParse(t, `checks: {web: {protocol: http}}
pools:
  - name: p
    check: web
    labels: {team: edge}
    metric_labels: [zone]
    static_configs:
      - targets: ["198.18.0.1:8080"]
        labels: {zone: a}
    file_sd_configs:
      - files: [targets/*.json]
    http_sd_configs:
      - url: http://127.0.0.1:9999/sd
        refresh_interval: 15s
    dns_sd_configs:
      - names: [_http._tcp.api.internal]
    kubernetes_sd_configs:
      - role: endpointslice
        api_server: http://127.0.0.1:6443
        namespaces: {names: [default]}
    consul_sd_configs:
      - server: 127.0.0.1:8500
        services: [api]
    relabel_configs:
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
`, dir)
	p := cfg.Pools[0]
	d := p.Discovery
	var keys []string
	for _, s := range d.Sources {
		keys = append(keys, s.Name()+" "+s.Config.Mechanism())
	}
	want := []string{"static_configs[0] static", "file_sd_configs[0] file", "http_sd_configs[0] http",
		"dns_sd_configs[0] dns", "kubernetes_sd_configs[0] kubernetes", "consul_sd_configs[0] consul"}
	if diff := cmp.Diff(want, keys); diff != "" {
		t.Fatalf("sources (-want +got):\n%s", diff)
	}
	st := d.Sources[0].Config.(*discovery.StaticSD).Groups
	if len(st) != 1 || st[0].Targets[0]["__address__"] != "198.18.0.1:8080" || st[0].Labels["zone"] != "a" {
		t.Errorf("static group = %+v", st)
	}
	if f := d.Sources[1].Config.(*discovery.FileSD); f.Files[0] != filepath.Join(dir, "targets/*.json") || f.RefreshInterval == 0 {
		t.Errorf("file_sd = %+v, want the glob under %s and Prometheus's default refresh", f, dir)
	}
	if h := d.Sources[2].Config.(*discovery.HTTPSD); h.URL != "http://127.0.0.1:9999/sd" || h.RefreshInterval.String() != "15s" {
		t.Errorf("http_sd = %+v", h)
	}
	if len(d.Relabel) != 1 || d.Relabel[0].TargetLabel != "namespace" || d.Relabel[0].Action != "replace" {
		t.Errorf("relabel = %+v", d.Relabel)
	}
	if p.Labels.String() != `{team="edge"}` || d.Labels.String() != `{team="edge"}` || !cmp.Equal(p.MetricLabels, []string{"zone"}) {
		t.Errorf("labels %v, discovery labels %v, metric labels %v", p.Labels, d.Labels, p.MetricLabels)
	}
	if len(p.Members) != 0 {
		t.Errorf("a pool of discovery only has members %v at load", p.Members)
	}
}

// TestDecodeSourcesAliases checks that a YAML alias is expanded into a
// discovery block, within the decoder's budget.
func TestDecodeSourcesAliases(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, `checks: {web: {protocol: http}}
pools:
  - name: p
    check: web
    file_sd_configs:
      - &one {files: [a.json, b.json]}
      - *one
`, "")
	srcs := cfg.Pools[0].Discovery.Sources
	if len(srcs) != 2 || len(srcs[1].Config.(*discovery.FileSD).Files) != 2 {
		t.Errorf("sources = %+v, want the alias expanded", srcs)
	}
}

// TestDecodeSourcesNotBuiltIn: a discovery list whose kind this program
// does not have (a build without it, or a program that does not link
// package kinds) is refused, naming the kind and those it has.
func TestDecodeSourcesNotBuiltIn(t *testing.T) {
	t.Parallel()
	spec := `checks: {web: {protocol: http}}
pools:
  - name: p
    check: web
    static_configs: [{targets: ["198.18.0.1:80"]}]
    kubernetes_sd_configs: [{role: pod}]
`
	f, err := decodeFile([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		has  []string
		want string
	}{
		{"without kubernetes", []string{"static_configs", "file_sd_configs", "http_sd_configs", "dns_sd_configs", "consul_sd_configs"},
			"pools[0].kubernetes_sd_configs: kubernetes discovery is not built into this program, which has static, file, http, dns and consul"},
		{"without any", nil, "pools[0].static_configs: static discovery is not built into this program, which has none"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lookup := func(key string) (discovery.Kind, bool) {
				if !slices.Contains(tt.has, key) {
					return discovery.Kind{}, false
				}
				return discovery.LookupKind(key)
			}
			_, err := decodeSources(f.Pools[0], "pools[0]", "", lookup)
			if err == nil || err.Error() != tt.want || !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v, want %q wrapping ErrInvalid", err, tt.want)
			}
		})
	}
	if _, err := decodeSources(f.Pools[0], "pools[0]", "", discovery.LookupKind); err != nil {
		t.Errorf("with every kind: %v", err)
	}
}
