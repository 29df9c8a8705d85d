package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// kit is the output of kustomize for one kustomization, decoded strictly.
type kit struct {
	configMap      *corev1.ConfigMap
	service        *corev1.Service
	sts            *appsv1.StatefulSet
	pdb            *policyv1.PodDisruptionBudget
	monitor        *monitoringv1.PodMonitor
	serviceAccount *corev1.ServiceAccount
	// RBAC: any number of each, checked against what the configuration's
	// Kubernetes discovery reads (checkRBAC).
	clusterRoles        []*rbacv1.ClusterRole
	roles               []*rbacv1.Role
	roleBindings        []*rbacv1.RoleBinding
	clusterRoleBindings []*rbacv1.ClusterRoleBinding
}

// build runs `kubectl kustomize dir` and decodes every object with the
// Kubernetes API types, rejecting unknown and duplicate fields.
func build(t *testing.T, dir string) *kit {
	t.Helper()
	kubectl := testenv.Tool(t, "kubectl", "kubectl")
	var stderr bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.Bytes())
	}
	if s := strings.TrimSpace(stderr.String()); s != "" {
		t.Errorf("kubectl kustomize %s warns:\n%s", dir, s)
	}
	k := &kit{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatal(err)
		}
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 ConfigMap":
			decodeInto(t, doc, &k.configMap)
		case "v1 Service":
			decodeInto(t, doc, &k.service)
		case "apps/v1 StatefulSet":
			decodeInto(t, doc, &k.sts)
		case "policy/v1 PodDisruptionBudget":
			decodeInto(t, doc, &k.pdb)
		case "monitoring.coreos.com/v1 PodMonitor":
			decodeInto(t, doc, &k.monitor)
		case "v1 ServiceAccount":
			decodeInto(t, doc, &k.serviceAccount)
		case "rbac.authorization.k8s.io/v1 ClusterRole":
			k.clusterRoles = append(k.clusterRoles, decodeOne[rbacv1.ClusterRole](t, doc))
		case "rbac.authorization.k8s.io/v1 Role":
			k.roles = append(k.roles, decodeOne[rbacv1.Role](t, doc))
		case "rbac.authorization.k8s.io/v1 RoleBinding":
			k.roleBindings = append(k.roleBindings, decodeOne[rbacv1.RoleBinding](t, doc))
		case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
			k.clusterRoleBindings = append(k.clusterRoleBindings, decodeOne[rbacv1.ClusterRoleBinding](t, doc))
		default:
			t.Fatalf("%s: unexpected object %s %s", dir, tm.APIVersion, tm.Kind)
		}
	}
	if k.configMap == nil || k.service == nil || k.sts == nil || k.pdb == nil || k.monitor == nil || k.serviceAccount == nil {
		t.Fatalf("%s: want a ConfigMap, Service, StatefulSet, PodDisruptionBudget, PodMonitor and ServiceAccount, got %+v", dir, k)
	}
	return k
}

// decodeOne decodes doc strictly into a new T, failing on unknown or
// duplicate fields.
func decodeOne[T any](t *testing.T, doc []byte) *T {
	t.Helper()
	v := new(T)
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		t.Fatalf("%T: %v", v, err)
	}
	return v
}

// decodeInto decodes doc strictly into a new *dst, failing on unknown or
// duplicate fields and on a second object of the same kind.
func decodeInto[T any](t *testing.T, doc []byte, dst **T) {
	t.Helper()
	if *dst != nil {
		t.Fatalf("two objects of type %T", *dst)
	}
	*dst = decodeOne[T](t, doc)
}

func TestKubernetesBase(t *testing.T) {
	k := build(t, "kubernetes/base")
	checkKit(t, k, "sonde", "a")
	if got := *k.sts.Spec.Replicas; got != 3 {
		t.Errorf("base replicas (shards) = %d, want 3", got)
	}
	if k.sts.Spec.Template.Spec.NodeSelector != nil {
		t.Errorf("base selects nodes %v; only vantage overlays should", k.sts.Spec.Template.Spec.NodeSelector)
	}
}

func TestKubernetesVantageOverlay(t *testing.T) {
	base := build(t, "kubernetes/base")
	k := build(t, "kubernetes/overlays/vantage-b")
	checkKit(t, k, "sonde-vantage-b", "b")
	if got := *k.sts.Spec.Replicas; got != 2 {
		t.Errorf("vantage-b replicas (shards) = %d, want 2: the overlay sets its own N", got)
	}
	spec := k.sts.Spec.Template.Spec
	if spec.NodeSelector["sonde-vantage"] != "b" {
		t.Errorf("vantage-b nodeSelector = %v, want sonde-vantage: b", spec.NodeSelector)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Key == "sonde-vantage" && tl.Value == "b"
	}) {
		t.Errorf("vantage-b tolerations %v do not tolerate its node pool's taint", spec.Tolerations)
	}
	// Two vantage points in one namespace must not select each other's pods,
	// or the PDB, the Service and the PodMonitor would mix them.
	for _, pair := range []struct {
		name     string
		sel      *metav1.LabelSelector
		podsOf   *kit
		podsName string
	}{
		{"base StatefulSet", base.sts.Spec.Selector, k, "vantage-b"},
		{"base PodDisruptionBudget", base.pdb.Spec.Selector, k, "vantage-b"},
		{"base PodMonitor", &base.monitor.Spec.Selector, k, "vantage-b"},
		{"vantage-b StatefulSet", k.sts.Spec.Selector, base, "base"},
		{"vantage-b PodDisruptionBudget", k.pdb.Spec.Selector, base, "base"},
		{"vantage-b PodMonitor", &k.monitor.Spec.Selector, base, "base"},
	} {
		if selects(t, pair.sel, pair.podsOf.sts.Spec.Template.Labels) {
			t.Errorf("%s selects the pods of %s", pair.name, pair.podsName)
		}
	}
	if labels.SelectorFromSet(base.service.Spec.Selector).Matches(labels.Set(k.sts.Spec.Template.Labels)) {
		t.Error("base Service selects the pods of vantage-b")
	}
	// ClusterRoles are cluster-wide and the RoleBindings live in the
	// namespaces discovered: two vantage points must not overwrite each
	// other's.
	var baseRBAC []string
	for _, r := range base.clusterRoles {
		baseRBAC = append(baseRBAC, "ClusterRole "+r.Name)
	}
	for _, b := range base.roleBindings {
		baseRBAC = append(baseRBAC, "RoleBinding "+b.Namespace+"/"+b.Name)
	}
	for _, b := range base.clusterRoleBindings {
		baseRBAC = append(baseRBAC, "ClusterRoleBinding "+b.Name)
	}
	for _, r := range k.clusterRoles {
		if slices.Contains(baseRBAC, "ClusterRole "+r.Name) {
			t.Errorf("vantage-b's ClusterRole %s has the base's name", r.Name)
		}
	}
	for _, b := range k.roleBindings {
		if slices.Contains(baseRBAC, "RoleBinding "+b.Namespace+"/"+b.Name) {
			t.Errorf("vantage-b's RoleBinding %s/%s has the base's name", b.Namespace, b.Name)
		}
	}
	for _, b := range k.clusterRoleBindings {
		if slices.Contains(baseRBAC, "ClusterRoleBinding "+b.Name) {
			t.Errorf("vantage-b's ClusterRoleBinding %s has the base's name", b.Name)
		}
	}
}

// checkKit asserts what every vantage point's kit must hold.
func checkKit(t *testing.T, k *kit, name, vantage string) {
	t.Helper()
	for _, m := range []metav1.ObjectMeta{k.service.ObjectMeta, k.sts.ObjectMeta, k.pdb.ObjectMeta, k.monitor.ObjectMeta, k.serviceAccount.ObjectMeta} {
		if m.Name != name {
			t.Errorf("%s is named %q, want %q", m.Name, m.Name, name)
		}
		if m.Labels["vantage"] != vantage {
			t.Errorf("%s: label vantage=%q, want %q", m.Name, m.Labels["vantage"], vantage)
		}
	}
	pod := k.sts.Spec.Template
	if pod.Labels["vantage"] != vantage || pod.Labels["app.kubernetes.io/name"] != "sonde" {
		t.Errorf("pod labels %v, want app.kubernetes.io/name=sonde and vantage=%s", pod.Labels, vantage)
	}
	for what, sel := range map[string]*metav1.LabelSelector{
		"StatefulSet": k.sts.Spec.Selector, "PodDisruptionBudget": k.pdb.Spec.Selector, "PodMonitor": &k.monitor.Spec.Selector,
	} {
		if !selects(t, sel, pod.Labels) {
			t.Errorf("%s selector %v does not match the pods' labels %v", what, sel, pod.Labels)
		}
	}
	if !labels.SelectorFromSet(k.service.Spec.Selector).Matches(labels.Set(pod.Labels)) || len(k.service.Spec.Selector) == 0 {
		t.Errorf("Service selector %v does not match the pods' labels %v", k.service.Spec.Selector, pod.Labels)
	}
	if k.service.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service clusterIP = %q, want None (headless)", k.service.Spec.ClusterIP)
	}
	if k.sts.Spec.ServiceName != k.service.Name {
		t.Errorf("StatefulSet serviceName %q, want its headless Service %q", k.sts.Spec.ServiceName, k.service.Name)
	}
	if mu := k.pdb.Spec.MaxUnavailable; mu == nil || mu.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable = %v, want 1", mu)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	checkArgs(t, k, c)
	cfg := loadConfig(t, k, c)
	inCluster := checkRBAC(t, k, cfg)
	checkSecurity(t, pod.Spec, c, inCluster)
	checkProbes(t, c)
	checkMonitor(t, k, c)
	checkConfig(t, k, c)
	checkDiscoveryExample(t, cfg)
}

// selects reports whether sel matches a pod with labels set. An empty
// selector fails the test: it would match every pod.
func selects(t *testing.T, sel *metav1.LabelSelector, set map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	if s.Empty() {
		t.Fatalf("empty selector %v", sel)
	}
	return s.Matches(labels.Set(set))
}

// checkArgs asserts the command line: the shard from the pod index and the
// replica count, a listen address reachable from outside the pod, /probe
// off, and only flags sonde run has.
func checkArgs(t *testing.T, k *kit, c corev1.Container) {
	t.Helper()
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Fatalf("args %q, want sonde run ...", c.Args)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	idx := env["POD_INDEX"].ValueFrom
	if idx == nil || idx.FieldRef == nil || idx.FieldRef.FieldPath != "metadata.labels['apps.kubernetes.io/pod-index']" {
		t.Errorf("POD_INDEX = %+v, want the downward API's metadata.labels['apps.kubernetes.io/pod-index']", env["POD_INDEX"])
	}
	if got, want := env["SONDE_SHARDS"].Value, strconv.Itoa(int(*k.sts.Spec.Replicas)); got != want {
		t.Errorf("SONDE_SHARDS = %q, want the replica count %s: N must be the number of pods", got, want)
	}
	if got := flagValue(c.Args, "shard"); got != "$(POD_INDEX)/$(SONDE_SHARDS)" {
		t.Errorf("-shard %q, want $(POD_INDEX)/$(SONDE_SHARDS)", got)
	}
	// What the kubelet runs for each pod: $(VAR) expanded from the env.
	for i := range int(*k.sts.Spec.Replicas) {
		got := expand(flagValue(c.Args, "shard"), map[string]string{"POD_INDEX": strconv.Itoa(i), "SONDE_SHARDS": env["SONDE_SHARDS"].Value})
		if want := strconv.Itoa(i) + "/" + env["SONDE_SHARDS"].Value; got != want {
			t.Errorf("pod %d runs -shard %s, want %s", i, got, want)
		}
	}
	listen := flagValue(c.Args, "listen")
	if listen != ":9123" && listen != "0.0.0.0:9123" && listen != "[::]:9123" {
		t.Errorf("-listen %q, want every address of the pod on port 9123 (the default is loopback only)", listen)
	}
	if !slices.Contains(c.Args, "-web.enable-probe=false") {
		t.Errorf("args %q lack -web.enable-probe=false: the pod listens on every address and the kit does not use /probe", c.Args)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 9123 || c.Ports[0].Name != "metrics" {
		t.Errorf("ports %+v, want metrics on 9123", c.Ports)
	}
	checkRunFlags(t, k.sts.Name, c.Args[1:])
}

// flagValue returns the argument after -name.
func flagValue(args []string, name string) string {
	i := slices.Index(args, "-"+name)
	if i < 0 || i+1 >= len(args) {
		return ""
	}
	return args[i+1]
}

// expand replaces $(VAR) as the kubelet does in args.
func expand(s string, env map[string]string) string {
	for k, v := range env {
		s = strings.ReplaceAll(s, "$("+k+")", v)
	}
	return s
}

// checkSecurity asserts the capabilities and sandbox of the pod; token
// says whether it needs its service account's token (for Kubernetes
// discovery in the cluster).
func checkSecurity(t *testing.T, spec corev1.PodSpec, c corev1.Container, token bool) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("container has no securityContext.capabilities")
	}
	var add, drop []string
	for _, c := range sc.Capabilities.Add {
		add = append(add, string(c))
	}
	for _, c := range sc.Capabilities.Drop {
		drop = append(drop, string(c))
	}
	if want := setOf("NET_RAW", "NET_ADMIN", "BPF", "PERFMON"); !slices.Equal(setOf(add...), want) || len(add) != len(want) {
		t.Errorf("capabilities add %v, want exactly %v", add, want)
	}
	if !slices.Equal(drop, []string{"ALL"}) {
		t.Errorf("capabilities drop %v, want [ALL]", drop)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("root filesystem is writable")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("container is privileged")
	}
	// Deliberately true: a non-root process keeps added capabilities only
	// through file capabilities, which no_new_privs would void
	// (deploy/README.md, Capabilities); the bounding set still limits them.
	if sc.AllowPrivilegeEscalation == nil || !*sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation must be true for the binary's file capabilities to apply to a non-root user")
	}
	psc := spec.SecurityContext
	if psc == nil {
		t.Fatal("pod has no securityContext")
	}
	nonRoot := (psc.RunAsNonRoot != nil && *psc.RunAsNonRoot) || (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot)
	uid := psc.RunAsUser
	if sc.RunAsUser != nil {
		uid = sc.RunAsUser
	}
	if !nonRoot || uid == nil || *uid == 0 {
		t.Errorf("runAsNonRoot %v with runAsUser %v, want non-root with a fixed non-zero UID", nonRoot, uid)
	}
	seccomp := psc.SeccompProfile
	if sc.SeccompProfile != nil {
		seccomp = sc.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccomp profile %v, want RuntimeDefault", seccomp)
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Error("pod shares a host namespace")
	}
	mounted := spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken
	switch {
	case mounted && !token:
		t.Error("pod mounts a service account token it never uses")
	case !mounted && token:
		t.Error("pod mounts no service account token, which kubernetes_sd_configs needs in the cluster")
	case token && (spec.AutomountServiceAccountToken == nil || spec.ServiceAccountName == ""):
		t.Errorf("pod relies on defaults for its token (automountServiceAccountToken set: %v, serviceAccountName %q): set both",
			spec.AutomountServiceAccountToken != nil, spec.ServiceAccountName)
	}
}

// checkProbes asserts the kubelet asks sonde's own endpoints on its port.
func checkProbes(t *testing.T, c corev1.Container) {
	t.Helper()
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{
		{"startupProbe", c.StartupProbe, "/-/ready"},
		{"readinessProbe", c.ReadinessProbe, "/-/ready"},
		{"livenessProbe", c.LivenessProbe, "/-/healthy"},
	} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: want an HTTP GET of %s", p.name, p.path)
			continue
		}
		if g := p.probe.HTTPGet; g.Path != p.path || g.Port.String() != "metrics" {
			t.Errorf("%s: GET %s on port %s, want %s on port metrics", p.name, g.Path, g.Port.String(), p.path)
		}
	}
}

// checkMonitor asserts the PodMonitor scrapes the metrics port as job
// "sonde" and copies the vantage label onto the series.
func checkMonitor(t *testing.T, k *kit, c corev1.Container) {
	t.Helper()
	m := k.monitor.Spec
	if len(m.PodMetricsEndpoints) != 1 || m.PodMetricsEndpoints[0].Port == nil || *m.PodMetricsEndpoints[0].Port != c.Ports[0].Name {
		t.Errorf("PodMonitor endpoints %+v, want the port %q", m.PodMetricsEndpoints, c.Ports[0].Name)
	}
	if !slices.Contains(m.PodTargetLabels, "vantage") {
		t.Errorf("PodMonitor podTargetLabels %v, want vantage on every series", m.PodTargetLabels)
	}
	if got := k.sts.Spec.Template.Labels[m.JobLabel]; got != "sonde" {
		t.Errorf("PodMonitor jobLabel %q gives job=%q, want job=\"sonde\" (the alert rules match it)", m.JobLabel, got)
	}
}

// configData returns the key and content of the ConfigMap's file that
// -config names, asserting the ConfigMap is mounted where -config points.
func configData(t *testing.T, k *kit, c corev1.Container) (key, data string) {
	t.Helper()
	path := flagValue(c.Args, "config")
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if strings.HasPrefix(path, m.MountPath+"/") {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("-config %s is in no volume mount", path)
	}
	if mount.SubPath != "" {
		t.Errorf("config mounted with subPath %q: the kubelet never updates those", mount.SubPath)
	}
	var vol *corev1.Volume
	for i, v := range k.sts.Spec.Template.Spec.Volumes {
		if v.Name == mount.Name {
			vol = &k.sts.Spec.Template.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.ConfigMap == nil || vol.ConfigMap.Name != k.configMap.Name {
		t.Fatalf("volume %q is not the ConfigMap %s", mount.Name, k.configMap.Name)
	}
	key = strings.TrimPrefix(path, mount.MountPath+"/")
	data, ok := k.configMap.Data[key]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", k.configMap.Name, key)
	}
	return key, data
}

// checkConfig asserts that sonde accepts the configuration in the
// ConfigMap, as a whole and as each pod's shard.
func checkConfig(t *testing.T, k *kit, c corev1.Container) {
	t.Helper()
	key, data := configData(t, k, c)
	file := filepath.Join(t.TempDir(), key)
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	// sonde checks the file in a network namespace with only loopback: a
	// host name in it is looked up there, and neither that lookup nor
	// anything else leaves the machine.
	t.Run("config check", func(t *testing.T) {
		isolated := testenv.IsolatedNetwork(t, "a network namespace, so that no DNS query leaves")
		check := func(args ...string) *exec.Cmd {
			return isolated(testenv.Sonde(t), append([]string{"config", "check"}, args...)...)
		}
		out, err := check(file).CombinedOutput()
		if err != nil {
			t.Fatalf("sonde config check on the ConfigMap's %s: %v\n%s", key, err, out)
		}
		for _, proto := range []string{"http", "tcp"} {
			if !strings.Contains(string(out), " "+proto+" ") {
				t.Errorf("the example configuration has no %s check:\n%s", proto, out)
			}
		}
		var stderr bytes.Buffer
		cmd := check("-json", file)
		cmd.Stderr = &stderr
		js, err := cmd.Output()
		if err != nil {
			t.Fatalf("sonde config check -json: %v\n%s", err, stderr.Bytes())
		}
		var rep checkReport
		if err := json.Unmarshal(js, &rep); err != nil {
			t.Fatalf("sonde config check -json: %v\n%s", err, js)
		}
		kube := 0
		for _, p := range rep.Pools {
			// Every shard looks a name up at start, from wherever it runs.
			if len(p.Unresolved) > 0 {
				t.Errorf("pool %s lists host names that do not resolve here: %+v", p.Name, p.Unresolved)
			}
			if slices.ContainsFunc(p.Sources, func(s string) bool { return strings.HasPrefix(s, "kubernetes_sd_configs[") }) {
				kube++
				if p.RelabelRules == 0 || len(p.MetricLabels) == 0 {
					t.Errorf("pool %s: %d relabel rules, metric_labels %v; the example shows both", p.Name, p.RelabelRules, p.MetricLabels)
				}
			}
		}
		if kube == 0 {
			t.Errorf("sonde config check finds no pool fed by kubernetes_sd_configs in the example:\n%s", js)
		}
		// Every pod's shard, as the kubelet expands it, is one sonde accepts.
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		for i := range int(*k.sts.Spec.Replicas) {
			env["POD_INDEX"] = strconv.Itoa(i)
			shard := expand(flagValue(c.Args, "shard"), env)
			out, err := check("-shard", shard, file).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "shard "+shard+": ") {
				t.Errorf("sonde config check -shard %s on the ConfigMap's %s: %v\n%s", shard, key, err, out)
			}
		}
	})
}

// checkReport is the part of `sonde config check -json` the tests read.
type checkReport struct {
	Pools []struct {
		Name         string            `json:"name"`
		Sources      []string          `json:"discovery_sources"`
		RelabelRules int               `json:"relabel_rules"`
		Labels       map[string]string `json:"labels"`
		MetricLabels []string          `json:"metric_labels"`
		Unresolved   []struct {
			Host  string `json:"host"`
			Port  int    `json:"port"`
			Error string `json:"error"`
		} `json:"unresolved"`
	} `json:"pools"`
}
