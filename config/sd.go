package config

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	yamlv2 "go.yaml.in/yaml/v2"
	"go.yaml.in/yaml/v3"

	"github.com/sondeprobe/sonde/config/discovery"
)

// sdKeys are the discovery lists a pool may have, in the order of
// [PoolSpec]'s fields. Each is decoded by the [discovery.Kind] registered
// for it, Prometheus's own type with its field names, defaults and checks;
// a program that has no kind for a list refuses it.
var sdKeys = [...]string{"static_configs", "file_sd_configs", "http_sd_configs", "dns_sd_configs", "kubernetes_sd_configs", "consul_sd_configs"}

// sdKeyList lists the discovery keys for messages.
func sdKeyList() string { return andList(sdKeys[:]) }

// andList joins words as "a, b and c".
func andList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}

// sdNodes returns a pool spec's discovery lists, in sdKeys order.
func (s *PoolSpec) sdNodes() [len(sdKeys)]*yaml.Node {
	return [...]*yaml.Node{s.StaticConfigs, s.FileSDConfigs, s.HTTPSDConfigs, s.DNSSDConfigs, s.KubernetesSDConfigs, s.ConsulSDConfigs}
}

// kindLookup finds the kind of discovery source of a list key:
// [discovery.LookupKind], or a stand-in in tests.
type kindLookup func(key string) (discovery.Kind, bool)

// decodeSources decodes the discovery lists of a pool spec at field, with
// the kinds lookup finds, paths relative to dir.
func decodeSources(s *PoolSpec, field, dir string, lookup kindLookup) ([]discovery.Source, error) {
	var out []discovery.Source
	for ki, n := range s.sdNodes() {
		if n == nil || isNull(n) {
			continue
		}
		key := sdKeys[ki]
		f := field + "." + key
		kind, ok := lookup(key)
		if !ok {
			return nil, fieldErr(f, "%s discovery is not built into this program, which has %s", sdName(key), builtIn(lookup))
		}
		if n.Kind != yaml.SequenceNode {
			return nil, fieldErr(f, "expected a list, got %s", kindName(n))
		}
		for i, item := range n.Content {
			fi := fmt.Sprintf("%s[%d]", f, i)
			b, err := flatten(item, fi)
			if err != nil {
				return nil, err
			}
			cfg, err := kind.Decode(b, dir)
			if err != nil {
				var fe *discovery.FieldError
				if errors.As(err, &fe) {
					return nil, fieldErr(fi+"."+fe.Field, "%s", fe.Msg)
				}
				return nil, fieldErr(fi, "%s", foreignError(err.Error(), item.Line))
			}
			out = append(out, discovery.Source{Key: key, Index: i, Config: cfg})
		}
	}
	return out, nil
}

// sdName is the mechanism a list key names: "kubernetes" for
// "kubernetes_sd_configs".
func sdName(key string) string {
	return strings.TrimSuffix(strings.TrimSuffix(key, "_configs"), "_sd")
}

// builtIn lists the discovery kinds lookup finds, for messages.
func builtIn(lookup kindLookup) string {
	var names []string
	for _, k := range sdKeys {
		if _, ok := lookup(k); ok {
			names = append(names, sdName(k))
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return andList(names)
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
		b, err := flatten(item, fi)
		if err != nil {
			return nil, err
		}
		rc := new(relabel.Config)
		if err := yamlv2.UnmarshalStrict(b, rc); err != nil {
			return nil, fieldErr(fi, "%s", foreignError(err.Error(), item.Line))
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

// flatten writes node n, at field, out again as YAML for a type of
// Prometheus's that reads itself from YAML, aliases expanded within the
// decoder's budget. Its lines are those of the node: foreignError counts
// them in the original file again.
func flatten(n *yaml.Node, field string) ([]byte, error) {
	d := &decoder{}
	flat, err := d.expand(n, field, 0)
	if err != nil {
		return nil, err
	}
	b, err := yaml.Marshal(flat)
	if err != nil {
		return nil, fieldErr(field, "%s", err.Error())
	}
	return b, nil
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
