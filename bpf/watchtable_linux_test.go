//go:build linux

package bpf

import (
	"testing"

	"github.com/cilium/ebpf/btf"
)

// TestWatchTableLayout checks the Go side's cell layouts against passive.c's
// struct cell4 and struct cell6, as compiled.
func TestWatchTableLayout(t *testing.T) {
	spec, err := loadPassive()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		size    int
		members map[string][2]uint32 // byte offset, size
	}{
		{"cell4", layout4.size, map[string][2]uint32{"key": {0, 8}, "slot": {8, 4}, "threshold": {12, 2}, "flags": {14, 2}}},
		{"cell6", layout6.size, map[string][2]uint32{"hi": {0, 8}, "lo": {8, 8}, "port": {16, 2}, "threshold": {18, 2}, "slot": {20, 4}}},
	} {
		var s *btf.Struct
		if err := spec.Types.TypeByName(c.name, &s); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if int(s.Size) != c.size {
			t.Errorf("%s: %d bytes, Go layout %d", c.name, s.Size, c.size)
		}
		if len(s.Members) != len(c.members) {
			t.Errorf("%s: %d members, Go layout %d", c.name, len(s.Members), len(c.members))
		}
		for _, m := range s.Members {
			size, err := btf.Sizeof(m.Type)
			if err != nil {
				t.Fatal(err)
			}
			want, ok := c.members[m.Name]
			if got := [2]uint32{m.Offset.Bytes(), uint32(size)}; !ok || got != want {
				t.Errorf("%s.%s: offset and size %v, Go layout %v", c.name, m.Name, got, want)
			}
		}
	}
	for _, name := range []string{passiveMapWatch4, passiveMapWatch6} {
		inner := spec.Maps[name].InnerMap
		want := map[string]int{passiveMapWatch4: layout4.size, passiveMapWatch6: layout6.size}[name]
		if inner == nil || int(inner.ValueSize) != want {
			t.Errorf("%s: inner map %+v, want value size %d", name, inner, want)
		}
	}
}
