package kinds

import (
	"log/slog"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/relabel"
	"go.yaml.in/yaml/v2"

	"github.com/sondeprobe/sonde/config/discovery"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe/endpoint"
)

var testLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// newTestRunner returns a runner, which resolves no names.
func newTestRunner(t *testing.T) *discovery.Runner {
	t.Helper()
	run := discovery.NewRunner(discovery.Options{Logger: testLogger, Debounce: time.Millisecond,
		Resolver: &endpoint.DNSResolver{Hosts: "-", Servers: []string{"127.0.0.1:1"}}})
	t.Cleanup(func() {
		if err := run.Close(); err != nil {
			t.Error(err)
		}
	})
	return run
}

// waitFound waits until pool's targets satisfy ok.
func waitFound(t *testing.T, run *discovery.Runner, pool string, ok func(discovery.Found) bool) discovery.Found {
	t.Helper()
	return testenv.Eventually(t, "pool "+pool+"'s targets", func() (discovery.Found, bool) {
		found, _ := run.Found()
		return found[pool], ok(found[pool])
	})
}

// endpointsOf lists a pool's targets as "ADDR:PORT LABELS", sorted.
func endpointsOf(f discovery.Found) []string {
	var out []string
	for t := range f.All() {
		out = append(out, t.Addr.String()+":"+strconv.Itoa(int(t.Port))+" "+t.Labels.String())
	}
	slices.Sort(out)
	return out
}

// rules decodes and validates relabel rules.
func rules(t *testing.T, text string) []*relabel.Config {
	t.Helper()
	var rs []*relabel.Config
	if err := yaml.UnmarshalStrict([]byte(text), &rs); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if err := r.Validate(model.UTF8Validation); err != nil {
			t.Fatal(err)
		}
	}
	return rs
}
