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
// through another package (docs/architecture.md, "Layers": cmd → server/config →
// scheduler → probe → bpf). Keys and values are package paths below the
// module; a key matches the package and every package under it.
var forbidden = map[string][]string{
	"bpf":       {"probe", "scheduler", "config", "server", "bench", "cmd"},
	"probe":     {"scheduler", "config", "server", "bench", "cmd"},
	"scheduler": {"config", "server", "bench", "cmd"},
	"config":    {"server", "bench", "cmd"},
	"server":    {"cmd"},
	"bench":     {"cmd"},
	// The parts of server/ each hold one concern below the engine's
	// lifecycle (server itself), which imports them, never the reverse;
	// they use each other only as allowed lists.
	"server/statefile": {"server", "bench", "cmd"},
	"server/events":    {"server", "bench", "cmd"},
	"server/history":   {"server", "bench", "cmd"},
	// Passive evidence reads the running configuration through its Fleet
	// interface.
	"server/passivewatch": {"server", "bench", "cmd"},
	// The status page reads the daemon through its Snapshot interface
	// alone, so it is tested without one; its templates and assets know
	// nothing of sonde.
	"server/status": {"server", "bench", "cmd"},
	// So do the API's list endpoints.
	"server/apiv1": {"server", "bench", "cmd"},
	"server/ui":    {"bpf", "probe", "scheduler", "config", "server", "bench", "cmd", "internal"},
	// HTTP plumbing knows nothing of the daemon.
	"server/web": {"bpf", "probe", "scheduler", "config", "server", "bench", "cmd"},
	// The API's wire types: clients import them without the daemon.
	"server/web/api": {"bpf", "probe", "scheduler", "config", "server", "bench", "cmd", "internal"},
	// The test fleets and the ceiling sender are below the scenarios and
	// beside each other: probe and server tests build fleets.
	"bench/fleet":   {"scheduler", "config", "server", "bench/ceiling", "cmd"},
	"bench/ceiling": {"scheduler", "config", "server", "bench/fleet", "cmd"},
	// The scenarios' measuring tools (the client load, the machine's and
	// processes' CPU, an interface's counters, the BPF objects' statistics,
	// a /metrics page) measure from the outside: they use none of sonde's
	// layers, fleets or senders.
	"bench/connload": {"bpf", "probe", "scheduler", "config", "server", "bench/fleet", "bench/ceiling", "cmd"},
	"bench/host":     {"bpf", "probe", "scheduler", "config", "server", "bench/fleet", "bench/ceiling", "cmd"},
	"bench/linkstat": {"bpf", "probe", "scheduler", "config", "server", "bench/fleet", "bench/ceiling", "cmd"},
	"bench/bpfobjs":  {"bpf", "probe", "scheduler", "config", "server", "bench/fleet", "bench/ceiling", "cmd"},
	"bench/promtext": {"bpf", "probe", "scheduler", "config", "server", "bench/fleet", "bench/ceiling", "cmd"},
	// Prober choice and one-shot probing, shared by the daemon, sonde
	// probe and /probe: none of the daemon.
	"server/prober": {"server", "bench", "cmd"},
	// Every layer reads its operator's files through it.
	"internal/safefile": {"bpf", "probe", "scheduler", "config", "server", "bench", "cmd"},
	// What is not an API, below everything that uses it: entering a
	// namespace, dropping capabilities, catching signals before init.
	"internal/netns":       {"bpf", "probe", "scheduler", "config", "server", "bench", "cmd"},
	"internal/privilege":   {"bpf", "probe", "scheduler", "config", "server", "bench", "cmd"},
	"internal/earlysignal": {"bpf", "probe", "scheduler", "config", "server", "bench", "cmd"},
}

// allowed are, per layer, the packages it may use although forbidden
// names them: the parts of server/ that a part builds on.
var allowed = map[string][]string{
	"server/events":       {"server/web", "server/webhook"},
	"server/history":      {"server/web/api"},
	"server/passivewatch": {"server/web/api"},
	// The status page shares the API lists' label filters and target
	// names (server/apiv1/targetsel), so a filter means the same on both.
	"server/status": {"server/apiv1/targetsel", "server/ui", "server/web", "server/web/api"},
	// The API lists remediations in server/remediate's own types (and
	// with it links server/webhook, which posts them).
	"server/apiv1": {"server/remediate", "server/web", "server/web/api", "server/webhook"},
}

// testOnly are packages that only tests may import.
var testOnly = []string{"internal/testenv", "internal/probetest", "internal/endpointtest"}

// under reports whether package path pkg is layer or below it.
func under(pkg, layer string) bool {
	p := module + "/" + layer
	return pkg == p || strings.HasPrefix(pkg, p+"/")
}

// mayUse reports whether allowed lets layer use package dep.
func mayUse(layer, dep string) bool {
	for _, a := range allowed[layer] {
		if under(dep, a) {
			return true
		}
	}
	return false
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
					if under(dep, b) && !under(dep, layer) && !mayUse(layer, dep) {
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
		{module + "/bench/fleet", "bench", true},
		{module + "/internal/testenv", "bench", false},
		{"github.com/other/probe", "probe", false},
	} {
		if got := under(c.pkg, c.layer); got != c.want {
			t.Errorf("under(%q, %q) = %v, want %v", c.pkg, c.layer, got, c.want)
		}
	}
}

// light are packages that a program reading a configuration imports: they
// must not compile the Kubernetes client, Consul's API or Prometheus's
// discovery, which only package config/discovery/kinds links (behind
// build tags for Kubernetes and Consul).
var light = []string{"config", "config/discovery", "config/watch", "config/settings"}

// heavy are what the light packages must not depend on: a path ending in
// "/" is a prefix, the others are packages.
var heavy = []string{"k8s.io/", "github.com/hashicorp/consul/", "github.com/prometheus/prometheus/discovery"}

// TestConfigLinksNoDiscoveryClients reads the dependencies of the packages
// that load a configuration and fails on any of the heavy ones.
func TestConfigLinksNoDiscoveryClients(t *testing.T) {
	args := []string{"list", "-deps"}
	for _, p := range light {
		args = append(args, module+"/"+p)
	}
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	n := 0
	for dep := range strings.Lines(string(out)) {
		dep = strings.TrimSpace(dep)
		n++
		for _, h := range heavy {
			if dep == h || strings.HasSuffix(h, "/") && strings.HasPrefix(dep, h) {
				t.Errorf("%v depend on %s: reading a config must not compile %s", light, dep, h)
			}
		}
	}
	if n < 50 {
		t.Fatalf("go list -deps named only %d packages", n)
	}
}

// TestBuildTagsLeaveDiscoveryOut: the tags nokubernetes and noconsul leave
// the Kubernetes client and Consul's API out of sonde, which a default
// build has.
func TestBuildTagsLeaveDiscoveryOut(t *testing.T) {
	deps := func(tags string) string {
		out, err := exec.Command("go", "list", "-deps", "-tags", tags, module+"/cmd/sonde").Output()
		if err != nil {
			t.Fatalf("go list -tags %q: %v", tags, err)
		}
		return string(out)
	}
	for _, c := range []struct {
		tags, pkg string
		want      bool
	}{
		{"", "k8s.io/client-go/kubernetes\n", true},
		{"", "github.com/hashicorp/consul/api\n", true},
		{"nokubernetes", "k8s.io/client-go/kubernetes\n", false},
		{"nokubernetes", "github.com/hashicorp/consul/api\n", true},
		{"noconsul", "github.com/hashicorp/consul/api\n", false},
		{"nokubernetes,noconsul", "k8s.io/client-go/kubernetes\n", false},
		{"nokubernetes,noconsul", "github.com/hashicorp/consul/api\n", false},
	} {
		if got := strings.Contains(deps(c.tags), "\n"+c.pkg); got != c.want {
			t.Errorf("tags %q: sonde links %s: %v, want %v", c.tags, strings.TrimSpace(c.pkg), got, c.want)
		}
	}
}
