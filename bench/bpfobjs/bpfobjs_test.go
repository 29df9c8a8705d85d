package bpfobjs

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAdded(t *testing.T) {
	t.Parallel()
	if diff := cmp.Diff([]int{5, 9}, Added([]int{3, 4, 7}, []int{3, 4, 5, 7, 9})); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if got := Added([]int{3}, []int{3}); len(got) != 0 {
		t.Errorf("got %v, want none", got)
	}
}
