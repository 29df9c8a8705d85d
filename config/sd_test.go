package config

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	promsd "github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/consul"
	"github.com/prometheus/prometheus/discovery/dns"
	"github.com/prometheus/prometheus/discovery/file"
	"github.com/prometheus/prometheus/discovery/http"
	"github.com/prometheus/prometheus/discovery/kubernetes"
)

// TestDecodeSources checks that each discovery list is read by
// Prometheus's own types, with its defaults, and paths made relative to the
// config file's directory.
func TestDecodeSources(t *testing.T) {
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
		keys = append(keys, s.Name()+" "+s.Config.Name())
	}
	want := []string{"static_configs[0] static", "file_sd_configs[0] file", "http_sd_configs[0] http",
		"dns_sd_configs[0] dns", "kubernetes_sd_configs[0] kubernetes", "consul_sd_configs[0] consul"}
	if diff := cmp.Diff(want, keys); diff != "" {
		t.Fatalf("sources (-want +got):\n%s", diff)
	}
	st := d.Sources[0].Config.(promsd.StaticConfig)
	if len(st) != 1 || st[0].Targets[0]["__address__"] != "198.18.0.1:8080" || st[0].Labels["zone"] != "a" {
		t.Errorf("static group = %+v", st)
	}
	if f := d.Sources[1].Config.(*file.SDConfig); f.Files[0] != filepath.Join(dir, "targets/*.json") || f.RefreshInterval == 0 {
		t.Errorf("file_sd = %+v, want the glob under %s and Prometheus's default refresh", f, dir)
	}
	if h := d.Sources[2].Config.(*http.SDConfig); h.URL != "http://127.0.0.1:9999/sd" || h.RefreshInterval.String() != "15s" {
		t.Errorf("http_sd = %+v", h)
	}
	if n := d.Sources[3].Config.(*dns.SDConfig); n.Type != "SRV" || n.RefreshInterval.String() != "30s" {
		t.Errorf("dns_sd = %+v, want SRV every 30s (Prometheus's defaults)", n)
	}
	if k := d.Sources[4].Config.(*kubernetes.SDConfig); k.Role != kubernetes.RoleEndpointSlice || k.NamespaceDiscovery.Names[0] != "default" {
		t.Errorf("kubernetes_sd = %+v", k)
	}
	if c := d.Sources[5].Config.(*consul.SDConfig); c.Server != "127.0.0.1:8500" || c.Services[0] != "api" {
		t.Errorf("consul_sd = %+v", c)
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
	cfg := mustParse(t, `checks: {web: {protocol: http}}
pools:
  - name: p
    check: web
    file_sd_configs:
      - &one {files: [a.json, b.json]}
      - *one
`, "")
	srcs := cfg.Pools[0].Discovery.Sources
	if len(srcs) != 2 || len(srcs[1].Config.(*file.SDConfig).Files) != 2 {
		t.Errorf("sources = %+v, want the alias expanded", srcs)
	}
}
