package main

import (
	"go/parser"
	"go/token"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/sondeprobe/sonde"

// forbidden lists, per layer, the layers it must never depend on, directly or
// through another package (README.md, "Layout": cmd → server/config →
// scheduler → probe → bpf). Keys and values are package paths below the
// module; a key matches the package and every package under it.
var forbidden = map[string][]string{
	"bpf":       {"probe", "scheduler", "config", "server", "bench", "cmd"},
	"probe":     {"scheduler", "config", "server", "bench", "cmd"},
	"scheduler": {"config", "server", "bench", "cmd"},
	"config":    {"server", "bench", "cmd"},
	"server":    {"cmd"},
	// Prober choice and one-shot probing, shared by the daemon, sonde
	// probe and /probe: none of the daemon.
	"server/prober": {"server", "bench", "cmd"},
	"bench":         {"cmd"},
	// Every layer reads its operator's files through it.
	"internal/safefile": {"bpf", "probe", "scheduler", "config", "server", "bench", "cmd"},
}

// testOnly are packages that only tests may import.
var testOnly = []string{"bench/testenv", "probe/probetest", "probe/endpoint/endpointtest"}

// under reports whether package path pkg is layer or below it.
func under(pkg, layer string) bool {
	p := module + "/" + layer
	return pkg == p || strings.HasPrefix(pkg, p+"/")
}

// TestLayers reads every package's dependencies with go list and fails on an
// import arrow the architecture forbids, and on production code that links
// package testing or a test-only package.
func TestLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}:{{join .Deps " "}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for line := range strings.Lines(string(out)) {
		pkg, deps, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			t.Fatalf("go list line %q", line)
		}
		checked++
		isTestOnly := false
		for _, p := range testOnly {
			isTestOnly = isTestOnly || under(pkg, p)
		}
		for _, dep := range strings.Fields(deps) {
			for layer, bad := range forbidden {
				if !under(pkg, layer) {
					continue
				}
				for _, b := range bad {
					if under(dep, b) && !under(dep, layer) {
						t.Errorf("%s depends on %s: %s must not depend on %s", pkg, dep, layer, b)
					}
				}
			}
			if isTestOnly {
				continue
			}
			if dep == "testing" {
				t.Errorf("%s links package testing: test support belongs in %v", pkg, testOnly)
			}
			for _, p := range testOnly {
				if under(dep, p) {
					t.Errorf("%s imports test-only package %s", pkg, dep)
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("go list named only %d packages", checked)
	}
}

// TestProbeCommandWithoutDaemon checks that the files of sonde probe reach
// probers through server/prober, not through the daemon's package.
func TestProbeCommandWithoutDaemon(t *testing.T) {
	fset := token.NewFileSet()
	for _, name := range []string{"probe.go", "probejob.go", "proberun.go"} {
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == module+"/server" {
				t.Errorf("%s imports the daemon (%s); sonde probe uses server/prober", name, path)
			}
		}
	}
}

// TestUnder pins the matching rule the layer test relies on.
func TestUnder(t *testing.T) {
	for _, c := range []struct {
		pkg, layer string
		want       bool
	}{
		{module + "/probe", "probe", true},
		{module + "/probe/syn", "probe", true},
		{module + "/probetest", "probe", false},
		{module + "/bench/testenv", "bench", true},
		{"github.com/other/probe", "probe", false},
	} {
		if got := under(c.pkg, c.layer); got != c.want {
			t.Errorf("under(%q, %q) = %v, want %v", c.pkg, c.layer, got, c.want)
		}
	}
}
