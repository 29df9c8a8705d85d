// Package kinds holds the kinds of discovery source a pool may list —
// Prometheus's configurations, decoded by Prometheus's types with its field
// names, defaults and checks — and registers them with package discovery
// when it is linked in. Package config decodes a pool's lists through the
// kinds registered ([discovery.LookupKind]); a program that loads
// configurations without linking this package refuses every discovery
// list, and one built without a kind refuses that kind, naming it.
//
// Static groups, file, HTTP and DNS discovery are always built in.
// Kubernetes and Consul discovery, which bring the Kubernetes client and
// the Consul API (most of sonde's binary), are built in unless the build
// tags nokubernetes and noconsul leave them out:
//
//	go build -tags nokubernetes,noconsul ./cmd/sonde
package kinds

import (
	"fmt"
	"log/slog"
	"time"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	promsd "github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/dns"
	"github.com/prometheus/prometheus/discovery/file"
	"github.com/prometheus/prometheus/discovery/http"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	yamlv2 "go.yaml.in/yaml/v2"

	"github.com/sondeprobe/sonde/config/discovery"
)

func init() {
	discovery.RegisterKind(discovery.Kind{Key: "static_configs", Name: "static", Decode: decodeStatic})
	discovery.RegisterKind(discovery.Kind{Key: "file_sd_configs", Name: "file", Decode: decodeFile})
	discovery.RegisterKind(discovery.Kind{Key: "http_sd_configs", Name: "http", Decode: decodeHTTP})
	discovery.RegisterKind(discovery.Kind{Key: "dns_sd_configs", Name: "dns", Decode: decodeProm(func() promsd.Config { return new(dns.SDConfig) })})
}

// Names returns the names of the kinds built in, sorted: those this
// package registered.
func Names() []string {
	var out []string
	for _, k := range discovery.Kinds() {
		out = append(out, k.Name)
	}
	return out
}

// decode decodes entry strictly into v, a type of Prometheus's that reads
// itself from YAML, and points its relative paths at dir.
func decode(entry []byte, dir string, v any) error {
	if err := yamlv2.UnmarshalStrict(entry, v); err != nil {
		return err
	}
	if ds, ok := v.(commoncfg.DirectorySetter); ok && dir != "" {
		ds.SetDirectory(dir)
	}
	return nil
}

func decodeFile(entry []byte, dir string) (discovery.SourceConfig, error) {
	var c file.SDConfig
	if err := decode(entry, dir, &c); err != nil {
		return nil, err
	}
	return &discovery.FileSD{Files: c.Files, RefreshInterval: time.Duration(c.RefreshInterval)}, nil
}

func decodeHTTP(entry []byte, dir string) (discovery.SourceConfig, error) {
	var c http.SDConfig
	if err := decode(entry, dir, &c); err != nil {
		return nil, err
	}
	return &discovery.HTTPSD{URL: c.URL, HTTPClientConfig: c.HTTPClientConfig, RefreshInterval: time.Duration(c.RefreshInterval)}, nil
}

func decodeStatic(entry []byte, dir string) (discovery.SourceConfig, error) {
	g := new(targetgroup.Group)
	if err := decode(entry, dir, g); err != nil {
		return nil, err
	}
	if err := checkStaticGroup(g); err != nil {
		return nil, err
	}
	g.Source = "0"
	return &discovery.StaticSD{Groups: []*targetgroup.Group{g}}, nil
}

// checkStaticGroup checks a static group's labels, which Prometheus's type
// takes as they are, against the limits of discovered labels.
func checkStaticGroup(g *targetgroup.Group) error {
	for n, v := range g.Labels {
		switch {
		case !model.UTF8Validation.IsValidLabelName(string(n)):
			return &discovery.FieldError{Field: "labels", Msg: fmt.Sprintf("%q is not a valid label name", n)}
		case len(n) > discovery.MaxLabelNameBytes:
			return &discovery.FieldError{Field: "labels", Msg: fmt.Sprintf("a label name of %d bytes, more than %d", len(n), discovery.MaxLabelNameBytes)}
		case len(v) > discovery.MaxLabelValueBytes:
			return &discovery.FieldError{Field: "labels." + string(n), Msg: fmt.Sprintf("value of %d bytes, more than %d", len(v), discovery.MaxLabelValueBytes)}
		}
	}
	if len(g.Labels) > discovery.MaxLabels {
		return &discovery.FieldError{Field: "labels", Msg: fmt.Sprintf("%d labels, more than %d", len(g.Labels), discovery.MaxLabels)}
	}
	if len(g.Targets) == 0 {
		return &discovery.FieldError{Field: "targets", Msg: "missing; a static group needs targets"}
	}
	return nil
}

// decodeProm returns the Decode of a kind whose sources run Prometheus's
// discoverer, the configuration made by newConfig.
func decodeProm(newConfig func() promsd.Config) func([]byte, string) (discovery.SourceConfig, error) {
	return func(entry []byte, dir string) (discovery.SourceConfig, error) {
		c := newConfig()
		if err := decode(entry, dir, c); err != nil {
			return nil, err
		}
		return promConfig{c}, nil
	}
}

// promConfig is a source run by Prometheus's discoverer for its
// configuration.
type promConfig struct{ promsd.Config }

// Prometheus returns the Prometheus configuration of a source that a
// Prometheus discoverer runs (dns, kubernetes, consul), such as
// *kubernetes.SDConfig; nil for the others.
func Prometheus(c discovery.SourceConfig) promsd.Config {
	if p, ok := c.(interface{ prometheus() promsd.Config }); ok {
		return p.prometheus()
	}
	return nil
}

func (c promConfig) prometheus() promsd.Config { return c.Config }

// Mechanism is the configuration's name: "dns", "kubernetes", "consul".
func (c promConfig) Mechanism() string { return c.Name() }

// NewDiscoverer makes Prometheus's discoverer with its metrics in
// o.Registerer.
func (c promConfig) NewDiscoverer(o discovery.DiscovererOptions) (discovery.Discoverer, error) {
	refresh := promsd.NewRefreshMetrics(o.Registerer)
	metrics := c.NewDiscovererMetrics(o.Registerer, refresh)
	if err := refresh.Register(); err == nil {
		_ = metrics.Register() // a failure only loses failure counts; updates still tell
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return c.Config.NewDiscoverer(promsd.DiscovererOptions{Logger: logger, Metrics: metrics, SetName: o.SetName})
}
