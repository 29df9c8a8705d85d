//go:build !nokubernetes

package kinds

import (
	"sync"

	"github.com/prometheus/prometheus/discovery/kubernetes"
	"k8s.io/klog/v2"

	"github.com/sondeprobe/sonde/config/discovery"
)

func init() {
	discovery.RegisterKind(discovery.Kind{Key: "kubernetes_sd_configs", Name: "kubernetes", Decode: decodeKubernetes})
}

func decodeKubernetes(entry []byte, dir string) (discovery.SourceConfig, error) {
	c := new(kubernetes.SDConfig)
	if err := decode(entry, dir, c); err != nil {
		return nil, err
	}
	return kubernetesConfig{promConfig{c}}, nil
}

// kubernetesConfig runs Prometheus's Kubernetes discoverer, and routes the
// Kubernetes client's log, which is the process's, to the logger of the
// first runner that starts one.
type kubernetesConfig struct{ promConfig }

// klogOnce sets the Kubernetes client's logger once.
var klogOnce sync.Once

func (c kubernetesConfig) NewDiscoverer(o discovery.DiscovererOptions) (discovery.Discoverer, error) {
	if o.ClientLogger != nil {
		klogOnce.Do(func() { klog.SetSlogLogger(o.ClientLogger.With("component", "kubernetes-client")) })
	}
	return c.promConfig.NewDiscoverer(o)
}
