package config

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	promsd "github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/consul"
	"github.com/prometheus/prometheus/discovery/dns"
	"github.com/prometheus/prometheus/discovery/file"
	"github.com/prometheus/prometheus/discovery/http"
	"github.com/prometheus/prometheus/discovery/kubernetes"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	yamlv2 "go.yaml.in/yaml/v2"
	"go.yaml.in/yaml/v3"

	"github.com/sondeprobe/sonde/config/discovery"
)

// sdKinds are the discovery lists a pool may have, each with a constructor
// of one entry's configuration. They are Prometheus's own, decoded by
// Prometheus's types with its field names, defaults and checks.
var sdKinds = []struct {
	key string
	new func() any
}{
	{"static_configs", func() any { return new(targetgroup.Group) }},
	{"file_sd_configs", func() any { return new(file.SDConfig) }},
	{"http_sd_configs", func() any { return new(http.SDConfig) }},
	{"dns_sd_configs", func() any { return new(dns.SDConfig) }},
	{"kubernetes_sd_configs", func() any { return new(kubernetes.SDConfig) }},
	{"consul_sd_configs", func() any { return new(consul.SDConfig) }},
}

// sdKeys lists the discovery keys for messages.
func sdKeys() string {
	keys := make([]string, len(sdKinds))
	for i, k := range sdKinds {
		keys[i] = k.key
	}
	return strings.Join(keys[:len(keys)-1], ", ") + " and " + keys[len(keys)-1]
}

// sdNodes returns a pool spec's discovery lists by key, in sdKinds order.
func (s *PoolSpec) sdNodes() []*yaml.Node {
	return []*yaml.Node{s.StaticConfigs, s.FileSDConfigs, s.HTTPSDConfigs, s.DNSSDConfigs, s.KubernetesSDConfigs, s.ConsulSDConfigs}
}

// decodeSources decodes the discovery lists of a pool spec at field, paths
// relative to dir.
func decodeSources(s *PoolSpec, field, dir string) ([]discovery.Source, error) {
	var out []discovery.Source
	for ki, n := range s.sdNodes() {
		if n == nil || isNull(n) {
			continue
		}
		kind := sdKinds[ki]
		f := field + "." + kind.key
		if n.Kind != yaml.SequenceNode {
			return nil, fieldErr(f, "expected a list, got %s", kindName(n))
		}
		for i, item := range n.Content {
			fi := fmt.Sprintf("%s[%d]", f, i)
			v := kind.new()
			if err := decodeForeign(item, fi, v); err != nil {
				return nil, err
			}
			var cfg promsd.Config
			switch v := v.(type) {
			case *targetgroup.Group:
				v.Source = strconv.Itoa(i)
				if err := checkStaticGroup(fi, v); err != nil {
					return nil, err
				}
				cfg = promsd.StaticConfig{v}
			case promsd.Config:
				cfg = v
			}
			if ds, ok := cfg.(commoncfg.DirectorySetter); ok && dir != "" {
				ds.SetDirectory(dir)
			}
			out = append(out, discovery.Source{Key: kind.key, Index: i, Config: cfg})
		}
	}
	return out, nil
}

// checkStaticGroup checks a static group's labels, which Prometheus's type
// takes as they are, against the limits of discovered labels.
func checkStaticGroup(field string, g *targetgroup.Group) error {
	for n, v := range g.Labels {
		switch {
		case !model.UTF8Validation.IsValidLabelName(string(n)):
			return fieldErr(field+".labels", "%q is not a valid label name", n)
		case len(n) > discovery.MaxLabelNameBytes:
			return fieldErr(field+".labels", "a label name of %d bytes, more than %d", len(n), discovery.MaxLabelNameBytes)
		case len(v) > discovery.MaxLabelValueBytes:
			return fieldErr(field+".labels."+string(n), "value of %d bytes, more than %d", len(v), discovery.MaxLabelValueBytes)
		}
	}
	if len(g.Labels) > discovery.MaxLabels {
		return fieldErr(field+".labels", "%d labels, more than %d", len(g.Labels), discovery.MaxLabels)
	}
	if len(g.Targets) == 0 {
		return fieldErr(field+".targets", "missing; a static group needs targets")
	}
	return nil
}

// decodeRelabel decodes a pool's relabel_configs with Prometheus's types
// and checks.
func decodeRelabel(n *yaml.Node, field string) ([]*relabel.Config, error) {
	if n == nil || isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, fieldErr(field, "expected a list, got %s", kindName(n))
	}
	out := make([]*relabel.Config, 0, len(n.Content))
	for i, item := range n.Content {
		fi := fmt.Sprintf("%s[%d]", field, i)
		rc := new(relabel.Config)
		if err := decodeForeign(item, fi, rc); err != nil {
			return nil, err
		}
		if err := rc.Validate(model.UTF8Validation); err != nil {
			return nil, fieldErr(fi, "%s", err.Error())
		}
		if err := discovery.CheckRule(rc); err != nil {
			var re *discovery.RuleError
			if errors.As(err, &re) {
				return nil, fieldErr(fi+"."+re.Field, "%s", re.Msg)
			}
			return nil, fieldErr(fi, "%s", err.Error())
		}
		out = append(out, rc)
	}
	return out, nil
}

// decodeForeign decodes node n, at field, into v, a type of Prometheus's
// that reads itself from YAML: the node is written out again, aliases
// expanded within the decoder's budget, and decoded strictly. Errors name
// the field and lines of the original file.
func decodeForeign(n *yaml.Node, field string, v any) error {
	d := &decoder{}
	flat, err := d.expand(n, field, 0)
	if err != nil {
		return err
	}
	b, err := yaml.Marshal(flat)
	if err != nil {
		return fieldErr(field, "%s", err.Error())
	}
	if err := yamlv2.UnmarshalStrict(b, v); err != nil {
		return fieldErr(field, "%s", foreignError(err.Error(), n.Line))
	}
	return nil
}

// expand returns a copy of n with its aliases replaced by what they stand
// for, counting the nodes an alias brings against maxAliasNodes.
func (d *decoder) expand(n *yaml.Node, field string, depth int) (*yaml.Node, error) {
	if depth > maxDepth {
		return nil, fieldErr(field, "nested too deeply")
	}
	if n.Kind == yaml.AliasNode {
		d.inAlias++
		defer func() { d.inAlias-- }()
		return d.expand(n.Alias, field, depth+1)
	}
	if d.inAlias > 0 {
		if d.aliasNodes++; d.aliasNodes > maxAliasNodes {
			return nil, fieldErr(field, "YAML aliases expand to more than %d nodes", maxAliasNodes)
		}
	}
	cp := *n
	cp.Anchor = ""
	cp.Content = make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		e, err := d.expand(c, field, depth+1)
		if err != nil {
			return nil, err
		}
		cp.Content[i] = e
	}
	return &cp, nil
}

var (
	foreignLine    = regexp.MustCompile(`line (\d+):`)
	foreignUnknown = regexp.MustCompile(`field (\S+) not found in type \S+`)
)

// foreignError turns a decoding error of the YAML library Prometheus uses
// into sonde's wording, lines counted in the original file (the node began
// at line first).
func foreignError(msg string, first int) string {
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n")
	msg = foreignLine.ReplaceAllStringFunc(msg, func(m string) string {
		n, _ := strconv.Atoi(foreignLine.FindStringSubmatch(m)[1])
		return fmt.Sprintf("line %d:", n+first-1)
	})
	msg = foreignUnknown.ReplaceAllString(msg, "unknown field $1")
	lines := strings.Split(msg, "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, "; ")
}

// poolLabels checks and returns a pool's labels.
func poolLabels(m map[string]string, field string) (labels.Labels, error) {
	b := labels.NewBuilder(labels.EmptyLabels())
	for name, v := range m {
		switch {
		case !model.LegacyValidation.IsValidLabelName(name):
			return labels.EmptyLabels(), fieldErr(field+"."+name, "%q is not a valid label name; want letters, digits and _, not first a digit", name)
		case strings.HasPrefix(name, model.ReservedLabelPrefix):
			return labels.EmptyLabels(), fieldErr(field+"."+name, "labels starting with __ are reserved for discovery")
		case len(v) > discovery.MaxLabelValueBytes:
			return labels.EmptyLabels(), fieldErr(field+"."+name, "value of %d bytes, more than %d", len(v), discovery.MaxLabelValueBytes)
		}
		b.Set(name, v)
	}
	if len(m) > discovery.MaxLabels {
		return labels.EmptyLabels(), fieldErr(field, "%d labels, more than %d", len(m), discovery.MaxLabels)
	}
	return b.Labels(), nil
}

// reservedMetricLabels are the labels every per-target series has already.
var reservedMetricLabels = []string{"pool", "target"}

// metricLabels checks a pool's metric_labels.
func metricLabels(names []string, field string) ([]string, error) {
	seen := map[string]bool{}
	for i, n := range names {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case !model.LegacyValidation.IsValidLabelName(n) || strings.HasPrefix(n, model.ReservedLabelPrefix):
			return nil, fieldErr(f, "%q is not a label name that can be exported; want letters, digits and _, not first a digit, not starting with __", n)
		case n == reservedMetricLabels[0] || n == reservedMetricLabels[1]:
			return nil, fieldErr(f, "%q is a label every per-target series has already", n)
		case seen[n]:
			return nil, fieldErr(f, "%q is listed twice", n)
		}
		seen[n] = true
	}
	if len(names) > discovery.MaxLabels {
		return nil, fieldErr(field, "%d labels, more than %d", len(names), discovery.MaxLabels)
	}
	return names, nil
}
