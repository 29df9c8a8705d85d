package discovery

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"

	"github.com/sondeprobe/sonde/probe"
)

// Target is one target found for a pool: an address, the port it gave (0:
// the pool's check chooses), the host name it was found as and its labels.
type Target struct {
	Addr   netip.Addr
	Port   uint16
	Host   string        // "" when the target was given as an address
	Labels labels.Labels // without the labels that start with "__"
}

// Unresolved is a target that cannot be probed yet: a host name whose
// lookups have failed since it was first seen (or a found target its
// pool's check cannot probe, see config.Config.WithFound).
type Unresolved struct {
	Host   string        `json:"host"` // the name, or the address of a target that cannot be probed
	Port   uint16        `json:"port,omitempty"`
	Labels labels.Labels `json:"labels,omitempty"`
	Err    string        `json:"error"`         // why it cannot be probed
	Since  time.Time     `json:"since"`         // when the name was first looked up
	Next   time.Time     `json:"next,omitzero"` // when it is looked up again
}

// Found is what a pool's sources and host names give at one time.
type Found struct {
	Targets    []Target
	Unresolved []Unresolved
}

// Limits on what one discovered target may carry. A target beyond them is
// dropped and counted, with the reason, in its source's status.
const (
	MaxLabels          = 64
	MaxLabelNameBytes  = 256
	MaxLabelValueBytes = 4096
)

// endpoint is a parsed "__address__": an address or a host name, and a port
// (0 when none is given).
type endpoint struct {
	addr netip.Addr
	host string
	port uint16
}

// parseAddress reads an "__address__" value: "10.0.0.7", "10.0.0.7:8080",
// "[2001:db8::1]:8080", "2001:db8::1", "api-1.internal" or
// "api-1.internal:8080". A scheme, path, zone or bad port is refused.
func parseAddress(s string) (endpoint, error) {
	if s == "" {
		return endpoint{}, fmt.Errorf("no __address__")
	}
	if strings.ContainsAny(s, "/?#@ ") {
		return endpoint{}, fmt.Errorf("__address__ %q is not host or host:port", s)
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return endpoint{}, fmt.Errorf("__address__ %q has an IPv6 zone", s)
		}
		return endpoint{addr: a.Unmap()}, nil
	}
	host, portText, err := net.SplitHostPort(s)
	if err != nil {
		host, portText = s, ""
		if strings.Contains(s, ":") {
			return endpoint{}, fmt.Errorf("__address__ %q is not host or host:port", s)
		}
	}
	var port uint16
	if portText != "" {
		n, err := strconv.ParseUint(portText, 10, 16)
		if err != nil || n == 0 {
			return endpoint{}, fmt.Errorf("__address__ %q has a bad port %q", s, portText)
		}
		port = uint16(n)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return endpoint{}, fmt.Errorf("__address__ %q has an IPv6 zone", s)
		}
		return endpoint{addr: a.Unmap(), port: port}, nil
	}
	if !probe.ValidHostName(host) {
		return endpoint{}, fmt.Errorf("__address__ %q is not an IP address or host name", s)
	}
	return endpoint{host: strings.ToLower(strings.TrimSuffix(host, ".")), port: port}, nil
}

// relabeler turns discovered label sets into targets with one pool's labels
// and relabel rules. It is used by one goroutine at a time.
type relabeler struct {
	base  labels.Labels // the pool's labels
	rules []*relabel.Config
	b     *labels.Builder
}

func newRelabeler(base labels.Labels, rules []*relabel.Config) *relabeler {
	return &relabeler{base: base, rules: rules, b: labels.NewBuilder(labels.EmptyLabels())}
}

// process returns the target that group labels gl and target labels tl
// give, or ok false when the rules drop it (reason "" for a drop by the
// rules, else what is wrong with it).
func (r *relabeler) process(gl, tl model.LabelSet) (ep endpoint, ls labels.Labels, ok bool, reason string) {
	b := r.b
	b.Reset(r.base)
	for n, v := range gl {
		b.Set(string(n), string(v))
	}
	for n, v := range tl {
		b.Set(string(n), string(v))
	}
	if !relabel.ProcessBuilder(b, r.rules...) {
		return endpoint{}, labels.EmptyLabels(), false, ""
	}
	ep, err := parseAddress(b.Get(model.AddressLabel))
	if err != nil {
		return endpoint{}, labels.EmptyLabels(), false, err.Error()
	}
	n := 0
	reason = ""
	b.Range(func(l labels.Label) {
		if strings.HasPrefix(l.Name, model.ReservedLabelPrefix) {
			b.Del(l.Name)
			return
		}
		n++
		switch {
		case len(l.Name) > MaxLabelNameBytes:
			reason = fmt.Sprintf("label name over %d bytes", MaxLabelNameBytes)
		case len(l.Value) > MaxLabelValueBytes:
			reason = fmt.Sprintf("label %s over %d bytes", l.Name, MaxLabelValueBytes)
		}
	})
	if reason == "" && n > MaxLabels {
		reason = fmt.Sprintf("more than %d labels", MaxLabels)
	}
	if reason != "" {
		return endpoint{}, labels.EmptyLabels(), false, reason
	}
	return ep, b.Labels(), true, ""
}
