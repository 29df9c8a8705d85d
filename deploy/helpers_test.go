package deploy

import (
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sondeprobe/sonde/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var flagLine = regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9.-]*)`)

// checkRunFlags fails the test when args (after "run") use a flag that
// `sonde run` does not have.
func checkRunFlags(t *testing.T, where string, args []string) {
	t.Helper()
	out, _ := exec.Command(testenv.Sonde(t), "run", "-h").CombinedOutput()
	var known []string
	for _, m := range flagLine.FindAllStringSubmatch(string(out), -1) {
		known = append(known, m[1])
	}
	if !slices.Contains(known, "config") || !slices.Contains(known, "listen") {
		t.Fatalf("sonde run -h lists no -config or -listen flag:\n%s", out)
	}
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !slices.Contains(known, name) {
			t.Errorf("%s: sonde run has no flag -%s (it has %v)", where, name, known)
		}
	}
}

// setOf returns the elements of s as a sorted, deduplicated slice.
func setOf(s ...string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}
