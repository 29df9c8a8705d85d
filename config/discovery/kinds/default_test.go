//go:build !nokubernetes && !noconsul

package kinds

import (
	"slices"
	"testing"

	"github.com/prometheus/prometheus/discovery/consul"
	"github.com/prometheus/prometheus/discovery/dns"
	"github.com/prometheus/prometheus/discovery/kubernetes"

	"github.com/sondeprobe/sonde/config"
)

// TestNames: a default build has every kind a pool may list.
func TestNames(t *testing.T) {
	t.Parallel()
	want := []string{"consul", "dns", "file", "http", "kubernetes", "static"}
	if got := Names(); !slices.Equal(got, want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
}

// TestDecodeKinds checks that the kinds run by Prometheus's discoverers
// are read by Prometheus's own types, with its defaults, through a config
// file.
func TestDecodeKinds(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`checks: {web: {protocol: http}}
pools:
  - name: p
    check: web
    dns_sd_configs:
      - names: [_http._tcp.api.internal]
    kubernetes_sd_configs:
      - role: endpointslice
        api_server: http://127.0.0.1:6443
        namespaces: {names: [default]}
    consul_sd_configs:
      - server: 127.0.0.1:8500
        services: [api]
`), t.TempDir(), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srcs := cfg.Pools[0].Discovery.Sources
	if len(srcs) != 3 {
		t.Fatalf("sources %+v, want 3", srcs)
	}
	if n := srcs[0].Config.(promConfig).Config.(*dns.SDConfig); n.Type != "SRV" || n.RefreshInterval.String() != "30s" {
		t.Errorf("dns_sd = %+v, want SRV every 30s (Prometheus's defaults)", n)
	}
	if k := srcs[1].Config.(kubernetesConfig).Config.(*kubernetes.SDConfig); k.Role != kubernetes.RoleEndpointSlice || k.NamespaceDiscovery.Names[0] != "default" {
		t.Errorf("kubernetes_sd = %+v", k)
	}
	if c := srcs[2].Config.(promConfig).Config.(*consul.SDConfig); c.Server != "127.0.0.1:8500" || c.Services[0] != "api" || c.RefreshInterval.String() != "30s" {
		t.Errorf("consul_sd = %+v", c)
	}
}
