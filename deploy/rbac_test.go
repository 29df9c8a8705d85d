package deploy

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/discovery/kubernetes"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/config/discovery/kinds"
)

// noLookups is a resolver that answers no name, so loading a configuration
// in the test process sends no DNS query.
type noLookups struct{}

// LookupNetIP refuses every lookup.
func (noLookups) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return nil, fmt.Errorf("%s: no lookups in this test", host)
}

// loadConfig parses the ConfigMap's configuration with sonde's own
// loader, as sonde run does, without looking any name up.
func loadConfig(t *testing.T, k *kit, c corev1.Container) *config.Config {
	t.Helper()
	_, data := configData(t, k, c)
	cfg, err := config.Parse([]byte(data), t.TempDir(), config.LoadOptions{Resolver: noLookups{}})
	if err != nil {
		t.Fatalf("the ConfigMap's configuration: %v", err)
	}
	return cfg
}

// apiResource is a Kubernetes API resource: its group ("" for the core
// group) and plural name.
type apiResource struct{ group, resource string }

func (r apiResource) String() string {
	if r.group == "" {
		return r.resource
	}
	return r.resource + "." + r.group
}

// discoveryReads are the namespaced resources Prometheus's Kubernetes
// discovery, which sonde runs, lists and watches for each role, in every
// namespace it is given (discovery/kubernetes, Discovery.Run). The node
// role reads nodes, which are cluster-scoped.
var discoveryReads = map[kubernetes.Role][]apiResource{
	kubernetes.RoleEndpointSlice: {{"discovery.k8s.io", "endpointslices"}, {"", "services"}, {"", "pods"}},
	kubernetes.RoleEndpoint:      {{"", "endpoints"}, {"", "services"}, {"", "pods"}},
	kubernetes.RolePod:           {{"", "pods"}},
	kubernetes.RoleService:       {{"", "services"}},
	kubernetes.RoleIngress:       {{"networking.k8s.io", "ingresses"}},
	kubernetes.RoleNode:          nil,
}

// grant is a resource read in one namespace, or in all ("" namespace, as
// a ClusterRoleBinding grants it; cluster-scoped resources only so).
type grant struct {
	namespace string
	apiResource
}

func (g grant) String() string {
	if g.namespace == "" {
		return g.apiResource.String() + " in the cluster"
	}
	return g.apiResource.String() + " in namespace " + g.namespace
}

// discoveryNeeds returns what the Kubernetes discovery of cfg reads, with
// own the namespace sonde runs in, and whether a source uses the pod's
// service account (no api_server, no kubeconfig_file).
func discoveryNeeds(t *testing.T, cfg *config.Config, own string) (needs map[grant]string, inCluster bool) {
	t.Helper()
	needs = map[grant]string{}
	for _, p := range cfg.Pools {
		for _, src := range p.Discovery.Sources {
			sd, ok := kinds.Prometheus(src.Config).(*kubernetes.SDConfig)
			if !ok {
				continue
			}
			why := fmt.Sprintf("pool %s %s (role %s)", p.Name, src.Name(), sd.Role)
			if sd.APIServer.URL == nil && sd.KubeConfig == "" {
				inCluster = true
			}
			namespaces := slices.Clone(sd.NamespaceDiscovery.Names)
			if sd.NamespaceDiscovery.IncludeOwnNamespace {
				namespaces = append(namespaces, own)
			}
			if len(namespaces) == 0 {
				namespaces = []string{""} // every namespace
			}
			reads, known := discoveryReads[sd.Role]
			if !known {
				t.Fatalf("%s: a role the test does not know", why)
			}
			am := sd.AttachMetadata
			podBacked := sd.Role == kubernetes.RolePod || sd.Role == kubernetes.RoleEndpoint || sd.Role == kubernetes.RoleEndpointSlice
			if podBacked && am.Deployment {
				reads = append(slices.Clone(reads), apiResource{"apps", "replicasets"})
			}
			if podBacked && (am.Job || am.CronJob) {
				reads = append(slices.Clone(reads), apiResource{"batch", "jobs"})
			}
			for _, ns := range namespaces {
				for _, r := range reads {
					needs[grant{ns, r}] = why
				}
			}
			if sd.Role == kubernetes.RoleNode || (podBacked && am.Node) {
				needs[grant{"", apiResource{"", "nodes"}}] = why
			}
			if sd.Role != kubernetes.RoleNode && am.Namespace {
				needs[grant{"", apiResource{"", "namespaces"}}] = why
			}
		}
	}
	return needs, inCluster
}

// readVerbs are the verbs a discovery role may hold. Discovery lists and
// watches; get is read-only too, though it never uses it.
var readVerbs = []string{"get", "list", "watch"}

// checkRBAC asserts the kit's service account can read exactly what the
// configuration's Kubernetes discovery reads: every namespaced resource
// of a role with list and watch in each namespace it is given (by a
// RoleBinding there, or a ClusterRoleBinding where it discovers in every
// namespace), only read verbs, and nothing beyond. It returns whether the
// pod needs its service account's token.
func checkRBAC(t *testing.T, k *kit, cfg *config.Config) bool {
	t.Helper()
	sa := k.serviceAccount
	if sa.Namespace == "" || sa.Namespace != k.sts.Namespace {
		t.Errorf("ServiceAccount %s is in namespace %q, the StatefulSet in %q: a pod can only use an account of its own namespace, and the bindings must name it",
			sa.Name, sa.Namespace, k.sts.Namespace)
	}
	for _, m := range []string{k.configMap.Namespace, k.service.Namespace, k.pdb.Namespace, k.monitor.Namespace} {
		if m != sa.Namespace {
			t.Errorf("an object is in namespace %q, the ServiceAccount in %q: the kit has one namespace", m, sa.Namespace)
		}
	}
	if got := k.sts.Spec.Template.Spec.ServiceAccountName; got != sa.Name {
		t.Errorf("pods run as service account %q, want the kit's %q", got, sa.Name)
	}
	needs, inCluster := discoveryNeeds(t, cfg, sa.Namespace)

	clusterRoles := map[string]*rbacv1.ClusterRole{}
	for _, r := range k.clusterRoles {
		clusterRoles[r.Name] = r
		checkRules(t, "ClusterRole "+r.Name, r.Rules, needs)
	}
	roles := map[string]*rbacv1.Role{}
	for _, r := range k.roles {
		roles[r.Namespace+"/"+r.Name] = r
		checkRules(t, "Role "+r.Namespace+"/"+r.Name, r.Rules, needs)
	}
	used := map[string]bool{}
	granted := map[grant][]string{}
	bind := func(where, namespace string, ref rbacv1.RoleRef, subjects []rbacv1.Subject) {
		if want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}}; !slices.Equal(subjects, want) {
			t.Errorf("%s binds %+v, want only the kit's service account %s/%s", where, subjects, sa.Namespace, sa.Name)
		}
		var rules []rbacv1.PolicyRule
		switch {
		case ref.APIGroup != rbacv1.GroupName:
			t.Errorf("%s: roleRef apiGroup %q", where, ref.APIGroup)
		case ref.Kind == "ClusterRole" && clusterRoles[ref.Name] != nil:
			rules = clusterRoles[ref.Name].Rules
			used["ClusterRole "+ref.Name] = true
		case ref.Kind == "Role" && namespace != "" && roles[namespace+"/"+ref.Name] != nil:
			rules = roles[namespace+"/"+ref.Name].Rules
			used["Role "+namespace+"/"+ref.Name] = true
		default:
			t.Errorf("%s refers to %s %s, which the kit does not hold", where, ref.Kind, ref.Name)
		}
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					gr := grant{namespace, apiResource{g, res}}
					granted[gr] = append(granted[gr], r.Verbs...)
				}
			}
		}
	}
	for _, b := range k.roleBindings {
		if b.Namespace == "" {
			t.Errorf("RoleBinding %s has no namespace", b.Name)
		}
		bind("RoleBinding "+b.Namespace+"/"+b.Name, b.Namespace, b.RoleRef, b.Subjects)
	}
	for _, b := range k.clusterRoleBindings {
		bind("ClusterRoleBinding "+b.Name, "", b.RoleRef, b.Subjects)
	}
	for _, r := range k.clusterRoles {
		if !used["ClusterRole "+r.Name] {
			t.Errorf("ClusterRole %s is bound by nothing", r.Name)
		}
	}
	for name := range roles {
		if !used["Role "+name] {
			t.Errorf("Role %s is bound by nothing", name)
		}
	}

	for need, why := range needs {
		verbs := append(slices.Clone(granted[need]), granted[grant{"", need.apiResource}]...)
		if !slices.Contains(verbs, "list") || !slices.Contains(verbs, "watch") {
			t.Errorf("%s reads %s: the service account needs list and watch on it, has %v", why, need, verbs)
		}
	}
	for g := range granted {
		if _, ok := needs[g]; !ok {
			t.Errorf("the service account may read %s, which no discovery of the configuration reads", g)
		}
	}
	if len(needs) == 0 && (len(k.roleBindings) > 0 || len(k.clusterRoleBindings) > 0) {
		t.Error("the kit binds roles, but no pool discovers through the Kubernetes API")
	}
	return inCluster
}

// checkRules asserts a role's rules hold only read verbs, no wildcard, no
// non-resource URL, and only resources some discovery of the
// configuration reads.
func checkRules(t *testing.T, where string, rules []rbacv1.PolicyRule, needs map[grant]string) {
	t.Helper()
	needed := map[apiResource]bool{}
	var names []string
	for g := range needs {
		if !needed[g.apiResource] {
			names = append(names, g.apiResource.String())
		}
		needed[g.apiResource] = true
	}
	slices.Sort(names)
	if len(rules) == 0 {
		t.Errorf("%s has no rules", where)
	}
	for _, r := range rules {
		for _, v := range r.Verbs {
			if !slices.Contains(readVerbs, v) {
				t.Errorf("%s grants %q, want only the read verbs %v", where, v, readVerbs)
			}
		}
		if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
			t.Errorf("%s: rule %+v names URLs or objects; discovery reads whole resources", where, r)
		}
		if len(r.APIGroups) == 0 || len(r.Resources) == 0 {
			t.Errorf("%s: rule %+v grants nothing", where, r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				if ar := (apiResource{g, res}); !needed[ar] {
					t.Errorf("%s grants %v on %s, which no discovery of the configuration reads (it reads %v)",
						where, r.Verbs, ar, names)
				}
			}
		}
	}
}

// checkDiscoveryExample runs the relabeling of the example's pool fed by
// Kubernetes discovery on the labels endpointslice discovery gives, the
// way sonde does (the pool's labels, then the target's, then the rules):
// it keeps the Service's endpoints on their named port only, and gives
// them the labels its metric_labels export.
func checkDiscoveryExample(t *testing.T, cfg *config.Config) {
	t.Helper()
	var pool *config.Pool
	for _, p := range cfg.Pools {
		for _, s := range p.Discovery.Sources {
			if sd, ok := kinds.Prometheus(s.Config).(*kubernetes.SDConfig); ok && sd.Role == kubernetes.RoleEndpointSlice {
				pool = p
			}
		}
	}
	if pool == nil || pool.Name != "checkout" {
		t.Fatal("the example configuration has no pool checkout fed by kubernetes_sd_configs (role endpointslice)")
	}
	endpoint := func(kv ...string) map[string]string {
		m := map[string]string{
			"__address__":                                               "10.8.1.7:8080",
			"__meta_kubernetes_namespace":                               "prod",
			"__meta_kubernetes_service_name":                            "checkout",
			"__meta_kubernetes_endpointslice_name":                      "checkout-x7k2p",
			"__meta_kubernetes_endpointslice_address_type":              "IPv4",
			"__meta_kubernetes_endpointslice_port_name":                 "http",
			"__meta_kubernetes_endpointslice_port":                      "8080",
			"__meta_kubernetes_endpointslice_port_protocol":             "TCP",
			"__meta_kubernetes_endpointslice_endpoint_conditions_ready": "true",
			"__meta_kubernetes_endpointslice_endpoint_zone":             "eu-west-1b",
			"__meta_kubernetes_endpointslice_endpoint_node_name":        "node-3",
			"__meta_kubernetes_pod_name":                                "checkout-5d8f9-q2x4m",
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	for _, tc := range []struct {
		name string
		in   map[string]string
		want map[string]string // nil: dropped
	}{
		{"ready endpoint", endpoint(), map[string]string{"zone": "eu-west-1b", "node": "node-3", "k8s_ready": "true"}},
		{"endpoint not ready", endpoint("__meta_kubernetes_endpointslice_endpoint_conditions_ready", "false"),
			map[string]string{"zone": "eu-west-1b", "node": "node-3", "k8s_ready": "false"}},
		{"another port of the Service", endpoint("__meta_kubernetes_endpointslice_port_name", "metrics", "__address__", "10.8.1.7:9090"), nil},
		{"another Service", endpoint("__meta_kubernetes_service_name", "cart"), nil},
		// Pod ports that no EndpointSlice port names come without the
		// endpointslice labels.
		{"a pod's other container port", endpoint("__meta_kubernetes_endpointslice_port_name", "", "__address__", "10.8.1.7:9901"), nil},
	} {
		b := labels.NewBuilder(pool.Discovery.Labels)
		for n, v := range tc.in {
			b.Set(n, v)
		}
		keep := relabel.ProcessBuilder(b, pool.Discovery.Relabel...)
		if keep != (tc.want != nil) {
			t.Errorf("pool %s, %s: kept %v, want %v", pool.Name, tc.name, keep, tc.want != nil)
			continue
		}
		if !keep {
			continue
		}
		if got := b.Get("__address__"); got != tc.in["__address__"] {
			t.Errorf("pool %s, %s: target %q, want the endpoint %q", pool.Name, tc.name, got, tc.in["__address__"])
		}
		for n, v := range tc.want {
			if got := b.Get(n); got != v {
				t.Errorf("pool %s, %s: label %s = %q, want %q", pool.Name, tc.name, n, got, v)
			}
		}
		for _, n := range pool.MetricLabels {
			if b.Get(n) == "" || strings.HasPrefix(n, "__") {
				t.Errorf("pool %s, %s: metric label %s is not among the target's labels", pool.Name, tc.name, n)
			}
		}
	}
	if len(pool.MetricLabels) == 0 {
		t.Errorf("pool %s exports no label on its per-target series (metric_labels)", pool.Name)
	}
}
