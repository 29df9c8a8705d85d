package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// repoRoot is the sonde repository, whose module builds the binary.
const repoRoot = ".."

// toolsDir holds the sonde binary built for this test run.
var toolsDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sonde-deploy-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		os.Exit(1)
	}
	toolsDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireTool returns the path of an external program the test needs. A
// missing one skips the test, or fails it when SONDE_REQUIRE_PRIV=1 (CI,
// where .ci/run installs it).
func requireTool(t *testing.T, name, debianPackage string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("%s not found (Debian package %s; .ci/run installs it)", name, debianPackage)
	if os.Getenv("SONDE_REQUIRE_PRIV") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// sondeBinary builds bin/sonde of this tree once per test run and returns
// its path.
func sondeBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		path := filepath.Join(toolsDir, "sonde")
		cmd := exec.Command("go", "build", "-o", path, "./cmd/sonde")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/sonde: %w\n%s", err, out)
			return
		}
		buildPath = path
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

var flagLine = regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9.-]*)`)

// checkRunFlags fails the test when args (after "run") use a flag that
// `sonde run` does not have.
func checkRunFlags(t *testing.T, where string, args []string) {
	t.Helper()
	out, _ := exec.Command(sondeBinary(t), "run", "-h").CombinedOutput()
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
