package fleet

import (
	"net/netip"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/prometheus/model/labels"
)

func lbls(kv ...string) labels.Labels { return labels.FromStrings(kv...) }

// TestRenumbered checks that a pool's members keep their labels when their
// ids change, as a daemon renumbers them to its engine's.
func TestRenumbered(t *testing.T) {
	t.Parallel()
	p := &Membership{Members: []uint32{1, 2, 3}, Disabled: []uint32{2},
		labelOf: []uint32{1, 2, 0}, labelSets: []labels.Labels{labels.EmptyLabels(), lbls("a", "1"), lbls("a", "2")}}
	q := p.Renumbered(func(id uint32) uint32 { return 10 - id })
	if diff := cmp.Diff([]uint32{7, 8, 9}, q.Members); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
	var got []string
	for pos := range q.Members {
		got = append(got, q.MemberLabels(pos).String())
	}
	if diff := cmp.Diff([]string{"{}", `{a="2"}`, `{a="1"}`}, got); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint32{8}, q.Disabled); diff != "" {
		t.Errorf("disabled (-want +got):\n%s", diff)
	}
}

// TestTargetSize keeps Target small and free of pointers: the configuration
// holds one per target, ten million in a large fleet.
func TestTargetSize(t *testing.T) {
	t.Parallel()
	if n := unsafe.Sizeof(Target{}); n > 24 {
		t.Errorf("Target is %d bytes, want at most 24", n)
	}
	tg := NewTarget(netip.MustParseAddr("198.18.0.1"), 80, 0)
	if tg.Addr() != netip.MustParseAddr("198.18.0.1") || !tg.Addr().Is4() || (Target{}).Addr().IsValid() {
		t.Errorf("Addr round trip: %v, placeholder %v", tg.Addr(), (Target{}).Addr())
	}
	if a := NewTarget(netip.MustParseAddr("2001:db8::1"), 80, 0).Addr(); a != netip.MustParseAddr("2001:db8::1") {
		t.Errorf("IPv6 round trip: %v", a)
	}
}
