//go:build !nokubernetes

package kinds

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/common/config"
	"github.com/prometheus/prometheus/discovery/kubernetes"

	"github.com/sondeprobe/sonde/config/discovery"
)

// fakeKube is a minimal Kubernetes API server on loopback: it lists and
// watches the EndpointSlices of one namespace, which a test changes, and
// lists the Services ("web" and "db", unchanging) and Pods (none) that
// endpointslice discovery also watches.
type fakeKube struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	version  int
	slices   map[string]map[string]any // by name
	watchers []chan []byte
	requests []string
}

func newFakeKube(t *testing.T) *fakeKube {
	k := &fakeKube{t: t, slices: map[string]map[string]any{}}
	k.srv = httptest.NewServer(http.HandlerFunc(k.serve))
	t.Cleanup(func() {
		k.mu.Lock()
		for _, w := range k.watchers {
			close(w)
		}
		k.watchers = nil
		k.mu.Unlock()
		k.srv.Close()
	})
	return k
}

// endpointSlice builds an EndpointSlice of service svc with ready
// addresses on port.
func endpointSlice(name, svc string, port int, addrs ...string) map[string]any {
	var eps []any
	for _, a := range addrs {
		eps = append(eps, map[string]any{"addresses": []string{a}, "conditions": map[string]any{"ready": true}})
	}
	return map[string]any{
		"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
		"metadata": map[string]any{"name": name, "namespace": "default",
			"labels": map[string]string{"kubernetes.io/service-name": svc}},
		"addressType": "IPv4",
		"endpoints":   eps,
		"ports":       []any{map[string]any{"name": "http", "port": port, "protocol": "TCP"}},
	}
}

// put adds or replaces a slice and tells the watchers.
func (k *fakeKube) put(s map[string]any) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.version++
	name := s["metadata"].(map[string]any)["name"].(string)
	typ := "ADDED"
	if _, ok := k.slices[name]; ok {
		typ = "MODIFIED"
	}
	s["metadata"].(map[string]any)["resourceVersion"] = fmt.Sprint(k.version)
	k.slices[name] = s
	k.tell(typ, s)
}

// remove deletes a slice and tells the watchers.
func (k *fakeKube) remove(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.version++
	s := k.slices[name]
	delete(k.slices, name)
	s["metadata"].(map[string]any)["resourceVersion"] = fmt.Sprint(k.version)
	k.tell("DELETED", s)
}

func (k *fakeKube) tell(typ string, obj any) {
	b, _ := json.Marshal(map[string]any{"type": typ, "object": obj})
	for _, w := range k.watchers {
		select {
		case w <- b:
		default:
			k.t.Errorf("fake Kubernetes API: a watcher is not reading")
		}
	}
}

func (k *fakeKube) serve(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	k.requests = append(k.requests, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
	k.mu.Unlock()
	q := r.URL.Query()
	kind := ""
	switch r.URL.Path {
	case "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices":
		kind = "EndpointSliceList"
	case "/api/v1/namespaces/default/services":
		kind = "ServiceList"
	case "/api/v1/namespaces/default/pods":
		kind = "PodList"
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if q.Get("watch") == "true" {
		if q.Get("sendInitialEvents") == "true" {
			// A streaming list: sonde's client falls back to list + watch.
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400}`, http.StatusBadRequest)
			return
		}
		k.watch(w, r, kind)
		return
	}
	k.mu.Lock()
	items := []any{}
	switch kind {
	case "EndpointSliceList":
		for _, name := range sortedKeys(k.slices) {
			items = append(items, k.slices[name])
		}
	case "ServiceList":
		for _, svc := range []string{"web", "db"} {
			items = append(items, map[string]any{"apiVersion": "v1", "kind": "Service",
				"metadata": map[string]any{"name": svc, "namespace": "default", "resourceVersion": "1"},
				"spec":     map[string]any{"ports": []any{map[string]any{"name": "http", "port": 80}}}})
		}
	}
	list := map[string]any{"kind": kind, "apiVersion": apiVersion(kind), "metadata": map[string]any{"resourceVersion": fmt.Sprint(k.version)}, "items": items}
	k.mu.Unlock()
	json.NewEncoder(w).Encode(list)
}

func apiVersion(kind string) string {
	if kind == "EndpointSliceList" {
		return "discovery.k8s.io/v1"
	}
	return "v1"
}

func sortedKeys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// watch streams the events after the request's resourceVersion (this fake
// keeps no history: it streams what happens from now on).
func (k *fakeKube) watch(w http.ResponseWriter, r *http.Request, kind string) {
	fl := w.(http.Flusher)
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	if kind != "EndpointSliceList" {
		<-r.Context().Done()
		return
	}
	ch := make(chan []byte, 64)
	k.mu.Lock()
	k.watchers = append(k.watchers, ch)
	k.mu.Unlock()
	for {
		select {
		case <-r.Context().Done():
			k.mu.Lock()
			k.watchers = slices.DeleteFunc(k.watchers, func(c chan []byte) bool { return c == ch })
			k.mu.Unlock()
			return
		case b, ok := <-ch:
			if !ok {
				return
			}
			w.Write(append(b, '\n'))
			fl.Flush()
		}
	}
}

// TestKubernetesEndpointSlices follows a fake Kubernetes API's
// EndpointSlices through Prometheus's kubernetes discovery, with the
// relabeling a scrape job would use.
func TestKubernetesEndpointSlices(t *testing.T) {
	t.Parallel()
	k := newFakeKube(t)
	k.put(endpointSlice("web-a", "web", 8080, "10.1.0.1", "10.1.0.2"))
	u, _ := url.Parse(k.srv.URL)
	cfg := &kubernetes.SDConfig{
		Role:               kubernetes.RoleEndpointSlice,
		APIServer:          config.URL{URL: u},
		HTTPClientConfig:   config.DefaultHTTPClientConfig,
		NamespaceDiscovery: kubernetes.NamespaceDiscovery{Names: []string{"default"}},
	}
	keep := rules(t, `
- {source_labels: [__meta_kubernetes_service_name], regex: web, action: keep}
- {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
- {source_labels: [__meta_kubernetes_service_name], target_label: service}
`)
	run := newTestRunner(t)
	run.Update([]discovery.Pool{{Name: "web", Sources: []discovery.Source{{Key: "kubernetes_sd_configs", Config: kubernetesConfig{promConfig{cfg}}}}, Relabel: keep}})
	f := waitFound(t, run, "web", func(f discovery.Found) bool { return f.Len() == 2 })
	want := []string{`10.1.0.1:8080 {namespace="default", service="web"}`, `10.1.0.2:8080 {namespace="default", service="web"}`}
	if got := endpointsOf(f); !slices.Equal(got, want) {
		t.Errorf("targets %v, want %v", got, want)
	}

	// The watch: a pod goes, another comes, a slice of another service is
	// dropped by the rules.
	k.put(endpointSlice("web-a", "web", 8080, "10.1.0.2", "10.1.0.3"))
	k.put(endpointSlice("db-a", "db", 5432, "10.2.0.1"))
	waitFound(t, run, "web", func(f discovery.Found) bool {
		got := endpointsOf(f)
		return len(got) == 2 && strings.HasPrefix(got[1], "10.1.0.3:8080")
	})
	k.remove("web-a")
	waitFound(t, run, "web", func(f discovery.Found) bool { return f.Len() == 0 })
	st := run.Status()[0].Sources[0]
	if st.State != "ok" || st.Mechanism != "kubernetes" || st.Dropped["relabel"] != 1 {
		t.Errorf("status %+v, want ok with the db slice dropped by relabeling", st)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	watched := slices.ContainsFunc(k.requests, func(r string) bool {
		return strings.Contains(r, "/endpointslices?") && strings.Contains(r, "watch=true") && !strings.Contains(r, "sendInitialEvents")
	})
	if !watched {
		t.Errorf("the endpoint slices were never watched: %v", k.requests)
	}
}
