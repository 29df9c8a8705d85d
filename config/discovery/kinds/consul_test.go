//go:build !noconsul

package kinds

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/discovery/consul"

	"github.com/sondeprobe/sonde/config/discovery"
)

// fakeConsul is a minimal Consul HTTP API on loopback: the catalog's
// services and the health of one service's instances, with blocking
// queries, which a test changes.
type fakeConsul struct {
	srv     *httptest.Server
	mu      sync.Mutex
	index   int
	nodes   []string // "node address port"
	changed chan struct{}
}

func newFakeConsul(t *testing.T) *fakeConsul {
	c := &fakeConsul{index: 1, changed: make(chan struct{})}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.srv.Close)
	return c
}

// set replaces the instances of service "web".
func (c *fakeConsul) set(nodes ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes = nodes
	c.index++
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *fakeConsul) serve(w http.ResponseWriter, r *http.Request) {
	// A blocking query waits for a change past its index, or a while.
	want, _ := strconv.Atoi(r.URL.Query().Get("index"))
	c.mu.Lock()
	if want >= c.index {
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		case <-time.After(2 * time.Second):
		}
		c.mu.Lock()
	}
	index, nodes := c.index, slices.Clone(c.nodes)
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Consul-Index", strconv.Itoa(index))
	switch r.URL.Path {
	case "/v1/catalog/services":
		json.NewEncoder(w).Encode(map[string][]string{"web": {"http"}, "db": {}})
	case "/v1/health/service/web":
		var out []any
		for _, n := range nodes {
			f := strings.Fields(n)
			port, _ := strconv.Atoi(f[2])
			out = append(out, map[string]any{
				"Node":    map[string]any{"Node": f[0], "Address": f[1], "Datacenter": "dc1"},
				"Service": map[string]any{"ID": "web-" + f[0], "Service": "web", "Port": port, "Tags": []string{"http"}},
				"Checks":  []any{},
			})
		}
		json.NewEncoder(w).Encode(out)
	default:
		http.NotFound(w, r)
	}
}

// TestConsulServices follows a fake Consul's instances of a service
// through Prometheus's consul discovery.
func TestConsulServices(t *testing.T) {
	t.Parallel()
	c := newFakeConsul(t)
	c.set("n1 10.3.0.1 8080", "n2 10.3.0.2 8080")
	cfg := &consul.SDConfig{}
	*cfg = consul.DefaultSDConfig
	cfg.Server = strings.TrimPrefix(c.srv.URL, "http://")
	cfg.Datacenter = "dc1"
	cfg.Services = []string{"web"}
	cfg.RefreshInterval = model.Duration(100 * time.Millisecond)
	run := newTestRunner(t)
	run.Update([]discovery.Pool{{Name: "web", Sources: []discovery.Source{{Key: "consul_sd_configs", Config: promConfig{cfg}}},
		Relabel: rules(t, `[{source_labels: [__meta_consul_node], target_label: node}]`)}})
	f := waitFound(t, run, "web", func(f discovery.Found) bool { return f.Len() == 2 })
	want := []string{`10.3.0.1:8080 {node="n1"}`, `10.3.0.2:8080 {node="n2"}`}
	if got := endpointsOf(f); !slices.Equal(got, want) {
		t.Errorf("targets %v, want %v", got, want)
	}
	c.set("n2 10.3.0.2 8080", "n3 10.3.0.3 9090")
	waitFound(t, run, "web", func(f discovery.Found) bool {
		return slices.Equal(endpointsOf(f), []string{`10.3.0.2:8080 {node="n2"}`, `10.3.0.3:9090 {node="n3"}`})
	})
	if st := run.Status()[0].Sources[0]; st.Mechanism != "consul" || st.State != "ok" {
		t.Errorf("status %+v", st)
	}
}
