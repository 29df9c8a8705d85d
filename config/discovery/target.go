package discovery

import (
	"fmt"
	"iter"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"

	"github.com/sondeprobe/sonde/probe/endpoint"
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

// Found is what a pool's sources and host names give at one time: the
// targets of Targets, then those the sources gave as addresses, kept as
// the sources' relabeling made them (see [Found.All]).
type Found struct {
	Targets    []Target
	parts      []part
	Unresolved []Unresolved
}

// part is the targets one source gave as addresses, shared with the
// runner, never changed.
type part struct {
	targets []addrTarget
	sets    []labels.Labels // the label sets of targets, each once
}

// addrTarget is a target given as an address, in 24 bytes where a Target
// takes 64: its label set is an index into its part's sets.
type addrTarget struct {
	addr [16]byte
	port uint16
	is4  bool
	set  uint32
}

func newAddrTarget(a netip.Addr, port uint16, set uint32) addrTarget {
	return addrTarget{addr: a.As16(), port: port, is4: a.Is4(), set: set}
}

func (a *addrTarget) ip() netip.Addr {
	if a.is4 {
		return netip.AddrFrom4([4]byte(a.addr[12:]))
	}
	return netip.AddrFrom16(a.addr)
}

// Len returns the number of targets.
func (f Found) Len() int {
	n := len(f.Targets)
	for _, p := range f.parts {
		n += len(p.targets)
	}
	return n
}

// All returns the targets, in order. A target it yields is valid until
// the next: copy it to keep it.
func (f Found) All() iter.Seq[*Target] {
	return func(yield func(*Target) bool) {
		for i := range f.Targets {
			if !yield(&f.Targets[i]) {
				return
			}
		}
		var t Target
		for _, p := range f.parts {
			for i := range p.targets {
				a := &p.targets[i]
				t = Target{Addr: a.ip(), Port: a.port, Labels: p.sets[a.set]}
				if !yield(&t) {
					return
				}
			}
		}
	}
}

// Limits on what one discovered target may carry. A target beyond them is
// dropped and counted, with the reason, in its source's status.
const (
	MaxLabels          = 64
	MaxLabelNameBytes  = 256
	MaxLabelValueBytes = 4096
)

// parseAddress reads an "__address__" value with the grammar of every
// target sonde reads ([endpoint.ParseEntry]): an address or a host name,
// with an optional port; a CIDR block is refused. The error wraps the
// *endpoint.EntryError that says what is wrong.
func parseAddress(s string) (endpoint.Entry, error) {
	if s == "" {
		return endpoint.Entry{}, fmt.Errorf("no __address__")
	}
	e, err := endpoint.ParseEntry(s)
	switch {
	case err != nil:
		return endpoint.Entry{}, fmt.Errorf("__address__ %w", err)
	case e.Block.IsValid():
		return endpoint.Entry{}, fmt.Errorf("__address__ %q is a CIDR block; want host or host:port", s)
	}
	return e, nil
}

// relabeler turns discovered label sets into targets with one pool's labels
// and relabel rules. The runner's worker is the only one to use it.
type relabeler struct {
	base  labels.Labels // the pool's labels
	rules []*relabel.Config
	b     *labels.Builder
}

func newRelabeler(base labels.Labels, rules []*relabel.Config) *relabeler {
	return &relabeler{base: base, rules: rules, b: labels.NewBuilder(labels.EmptyLabels())}
}

// Why a discovered target is invalid: the reasons its source's status
// counts it under. They are few and fixed, so that a source cannot grow the
// status with a reason per target; what exactly was wrong is the detail.
const (
	reasonAddress    = "bad __address__"
	reasonNameSize   = "label name too long"
	reasonValueSize  = "label value too long"
	reasonLabelCount = "too many labels"
	reasonRelabel    = "relabel" // dropped by the rules: not invalid
)

// process returns the target that a chunk's group labels gl, the labels
// set over them and the target labels tl give. When it is dropped, kept is
// false, with reason "" for a drop by the rules, else one of the reasons
// above and detail saying what exactly. Target labels win over group
// labels, which win over the pool's.
func (r *relabeler) process(gl []label, over labels.Labels, tl []label) (ep endpoint.Entry, ls labels.Labels, kept bool, reason, detail string) {
	b := r.b
	b.Reset(r.base)
	for _, l := range gl {
		b.Set(l.name, l.value)
	}
	over.Range(func(l labels.Label) { b.Set(l.Name, l.Value) })
	for _, l := range tl {
		b.Set(l.name, l.value)
	}
	if !relabel.ProcessBuilder(b, r.rules...) {
		return endpoint.Entry{}, labels.EmptyLabels(), false, "", ""
	}
	ep, err := parseAddress(b.Get(model.AddressLabel))
	if err != nil {
		return endpoint.Entry{}, labels.EmptyLabels(), false, reasonAddress, err.Error()
	}
	n := 0
	b.Range(func(l labels.Label) {
		if strings.HasPrefix(l.Name, model.ReservedLabelPrefix) {
			b.Del(l.Name)
			return
		}
		n++
		switch {
		case reason != "":
		case len(l.Name) > MaxLabelNameBytes:
			reason, detail = reasonNameSize, fmt.Sprintf("a label name of %d bytes, more than %d", len(l.Name), MaxLabelNameBytes)
		case len(l.Value) > MaxLabelValueBytes:
			reason, detail = reasonValueSize, fmt.Sprintf("label %s has a value of %d bytes, more than %d", l.Name, len(l.Value), MaxLabelValueBytes)
		}
	})
	if reason == "" && n > MaxLabels {
		reason, detail = reasonLabelCount, fmt.Sprintf("%d labels, more than %d", n, MaxLabels)
	}
	if reason != "" {
		return endpoint.Entry{}, labels.EmptyLabels(), false, reason, detail
	}
	return ep, b.Labels(), true, "", ""
}
