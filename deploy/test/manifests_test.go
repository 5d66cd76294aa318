package deploytest

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// knownKinds makes the typed object of each "apiVersion kind" the
// deployment files may hold. Any other pair is an error (newTyped), so a
// typo'd or unexpected kind fails the test rather than being skipped.
var knownKinds = map[string]func() any{
	"apps/v1 Deployment":                     func() any { return new(appsv1.Deployment) },
	"v1 Service":                             func() any { return new(corev1.Service) },
	"v1 ConfigMap":                           func() any { return new(corev1.ConfigMap) },
	"v1 Namespace":                           func() any { return new(corev1.Namespace) },
	"v1 Secret":                              func() any { return new(corev1.Secret) },
	"autoscaling/v2 HorizontalPodAutoscaler": func() any { return new(autoscalingv2.HorizontalPodAutoscaler) },
	"policy/v1 PodDisruptionBudget":          func() any { return new(policyv1.PodDisruptionBudget) },
	// The monitoring objects (monitoring_test.go), of the Prometheus
	// Operator's own API types.
	"monitoring.coreos.com/v1 ServiceMonitor": func() any { return new(monitoringv1.ServiceMonitor) },
	"monitoring.coreos.com/v1 PrometheusRule": func() any { return new(monitoringv1.PrometheusRule) },
}

// newTyped returns the typed object for apiVersion and kind (knownKinds).
func newTyped(apiVersion, kind string) (any, error) {
	if mk, ok := knownKinds[apiVersion+" "+kind]; ok {
		return mk(), nil
	}
	return nil, fmt.Errorf("unexpected apiVersion/kind %q/%q (the test knows %s)", apiVersion, kind, strings.Join(slices.Sorted(maps.Keys(knownKinds)), ", "))
}

// TestKubernetesManifests decodes deploy/kubernetes/*.yaml strictly and checks
// them as one installation.
func TestKubernetesManifests(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(manifestsDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", manifestsDir, err)
	}
	var objs []object
	var resources []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		resources = append(resources, filepath.Base(f))
		o, err := decodeStrict(filepath.Base(f), data)
		if err != nil {
			t.Error(err)
			continue
		}
		objs = append(objs, o...)
	}
	if t.Failed() {
		t.FailNow()
	}
	s := checkInstallation(t, objs, installWant{hpa: true, pdb: true, namespace: "xds-relay"})

	// Namespace object, when present, is the namespace everything lives in.
	for _, o := range objs {
		if ns, ok := o.obj.(*corev1.Namespace); ok && ns.Name != s.namespace {
			t.Errorf("%s: namespace %q, but the objects live in %q", o, ns.Name, s.namespace)
		}
	}
	checkKustomization(t, filepath.Join(manifestsDir, "kustomization.yaml"), resources, s)
}

// kustomization is the subset of kustomize's Kustomization the file uses;
// decoded strictly, so a key outside it fails and needs adding here.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images"`
}

func checkKustomization(t *testing.T, path string, files []string, s installation) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml: apiVersion/kind %q/%q", k.APIVersion, k.Kind)
	}
	got := slices.Clone(k.Resources)
	sort.Strings(got)
	sort.Strings(files)
	if !slices.Equal(got, files) {
		t.Errorf("kustomization.yaml resources %v, want every manifest of the directory %v", got, files)
	}
	if k.Namespace != s.namespace {
		t.Errorf("kustomization.yaml: namespace %q, the manifests use %q", k.Namespace, s.namespace)
	}
	image := s.container.Image
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	found := false
	for _, im := range k.Images {
		found = found || im.Name == image
	}
	if len(k.Images) > 0 && !found {
		t.Errorf("kustomization.yaml: images name no entry %q (the container's image), so `kustomize edit set image` would not apply", image)
	}
}

// installWant is what one installation should contain.
type installWant struct {
	hpa, pdb  bool
	replicas  int32 // Deployment replicas when there is no HPA (0: any ≥ 2)
	namespace string
	// openAdmin: the admin port has no token (the chart's adminToken
	// disabled); otherwise it must have one, from a mounted Secret.
	openAdmin bool
}

// installation is what checkInstallation found, for further checks.
type installation struct {
	namespace  string
	deployment *appsv1.Deployment
	container  *corev1.Container
	service    *corev1.Service
	configMap  *corev1.ConfigMap
	config     app.Config
	grpcPort   int32 // Service port of the xDS gRPC listener
}

// checkInstallation runs the checks an SRE would make on one installation
// (the raw manifests or one rendering of the chart).
func checkInstallation(t *testing.T, objs []object, want installWant) installation {
	t.Helper()
	byKind := map[string][]object{}
	for _, o := range objs {
		checkMeta(t, o)
		if isDashboard(o) {
			continue // a monitoring object, checked by checkMonitoring
		}
		byKind[o.kind] = append(byKind[o.kind], o)
	}
	one := func(kind string, required bool) any {
		switch n := len(byKind[kind]); {
		case n == 1:
			return byKind[kind][0].obj
		case n > 1:
			t.Errorf("%d %ss, want one: %v", n, kind, byKind[kind])
		case required:
			t.Errorf("no %s", kind)
		}
		return nil
	}
	dep, _ := one("Deployment", true).(*appsv1.Deployment)
	svc, _ := one("Service", true).(*corev1.Service)
	cm, _ := one("ConfigMap", true).(*corev1.ConfigMap)
	hpa, _ := one("HorizontalPodAutoscaler", want.hpa).(*autoscalingv2.HorizontalPodAutoscaler)
	pdb, _ := one("PodDisruptionBudget", want.pdb).(*policyv1.PodDisruptionBudget)
	if !want.hpa && hpa != nil {
		t.Errorf("unexpected HorizontalPodAutoscaler %s", hpa.Name)
	}
	if !want.pdb && pdb != nil {
		t.Errorf("unexpected PodDisruptionBudget %s", pdb.Name)
	}
	if dep == nil || svc == nil || cm == nil {
		t.FailNow()
	}
	s := installation{namespace: dep.Namespace, deployment: dep, service: svc, configMap: cm}
	if want.namespace != "" && dep.Namespace != want.namespace {
		t.Errorf("Deployment namespace %q, want %q", dep.Namespace, want.namespace)
	}
	for _, o := range objs {
		if _, isNS := o.obj.(*corev1.Namespace); isNS || isDashboard(o) {
			continue
		}
		if ns := o.obj.(metav1.Object).GetNamespace(); ns != dep.Namespace {
			t.Errorf("%s: namespace %q, the Deployment's is %q", o, ns, dep.Namespace)
		}
	}

	// Deployment: selector, replicas, rollout.
	podLabels := labels.Set(dep.Spec.Template.Labels)
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(podLabels) {
		t.Errorf("Deployment selector %v does not select its pod labels %v (%v)", dep.Spec.Selector, podLabels, err)
	}
	if want.hpa {
		if dep.Spec.Replicas != nil && *dep.Spec.Replicas < 2 {
			t.Errorf("Deployment replicas %d: a tier needs at least 2", *dep.Spec.Replicas)
		}
	} else {
		switch {
		case dep.Spec.Replicas == nil:
			t.Errorf("Deployment has no replicas and no HPA scales it")
		case want.replicas != 0 && *dep.Spec.Replicas != want.replicas:
			t.Errorf("Deployment replicas %d, want %d", *dep.Spec.Replicas, want.replicas)
		}
	}
	if ru := dep.Spec.Strategy.RollingUpdate; dep.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil ||
		ru.MaxUnavailable == nil || ru.MaxUnavailable.String() != "0" {
		t.Errorf("Deployment strategy %+v: want RollingUpdate with maxUnavailable 0 (surge first, then drain)", dep.Spec.Strategy)
	}

	pod := &dep.Spec.Template.Spec
	for i := range pod.Containers {
		if pod.Containers[i].Name == containerName {
			s.container = &pod.Containers[i]
		}
	}
	if s.container == nil {
		t.Fatalf("Deployment has no container %q", containerName)
	}
	c := s.container
	if c.Image == "" {
		t.Errorf("container %s has no image", c.Name)
	}
	if len(c.Command) != 0 {
		t.Errorf("container command %v overrides the image's ENTRYPOINT; use args", c.Command)
	}

	// The relay's configuration: the file the args name, mounted from the
	// ConfigMap, must be a valid relay config.
	flags := parseArgs(t, c.Args)
	cfgPath := flags["config"]
	if cfgPath == "" {
		t.Fatalf("container args %v: no --config", c.Args)
	}
	if key := configMapKeyAt(t, pod, c, cfgPath, cm.Name); key != configKey {
		t.Errorf("--config %s is ConfigMap %s key %q, want %q", cfgPath, cm.Name, key, configKey)
	}
	raw, ok := cm.Data[configKey]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s", cm.Name, configKey)
	}
	cfg, err := app.ParseConfig(cm.Name+"/"+configKey, []byte(raw))
	if err != nil {
		t.Fatalf("relay config in ConfigMap %s is invalid: %v\n%s", cm.Name, err, raw)
	}
	// Flags override the file, as in main.go.
	if v, ok := flags["admin"]; ok {
		cfg.Admin = v
	}
	if v, ok := flags["listen"]; ok {
		cfg.Listen = v
	}
	if v, ok := flags["upstream"]; ok {
		cfg.Upstream.Address = v
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("relay config with the container's flags: %v", err)
	}
	s.config = cfg

	// Ports: the container's named ports are the relay's listeners.
	grpcPort := containerPort(t, c, "grpc-xds")
	adminPort := containerPort(t, c, "http-admin")
	if host, port := splitHostPort(t, "listen", cfg.Listen); port != grpcPort || !anyHost(host) {
		t.Errorf("relay listens on %q, container port grpc-xds is %d (want :%d or 0.0.0.0:%d)", cfg.Listen, grpcPort, grpcPort, grpcPort)
	}
	if host, port := splitHostPort(t, "admin", cfg.Admin); port != adminPort || !anyHost(host) {
		t.Errorf("relay admin on %q, container port http-admin is %d: the kubelet's probes need :%d (not 127.0.0.1)", cfg.Admin, adminPort, adminPort)
	}

	checkAdminToken(t, objs, pod, c, cfg, want.openAdmin)

	// Probes on the admin port.
	checkProbe(t, c, "readinessProbe", c.ReadinessProbe, "/readyz", adminPort, true)
	checkProbe(t, c, "livenessProbe", c.LivenessProbe, "/healthz", adminPort, true)
	if c.StartupProbe != nil {
		checkProbe(t, c, "startupProbe", c.StartupProbe, "", adminPort, false)
	} else {
		t.Errorf("container has no startupProbe")
	}

	// Graceful drain: the kubelet's SIGKILL must come after drain.period.
	if err := graceError(pod.TerminationGracePeriodSeconds, cfg.Drain.Period); err != nil {
		t.Error(err)
	}

	checkSecurity(t, pod, c)
	checkResources(t, c)

	if a := dep.Spec.Template.Annotations; a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != strconv.Itoa(int(adminPort)) ||
		a["prometheus.io/path"] != "/metrics" {
		t.Errorf("pod annotations %v: want prometheus.io/scrape \"true\", port %d, path /metrics", a, adminPort)
	}
	if len(pod.TopologySpreadConstraints) == 0 && (pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil) {
		t.Errorf("pods are not spread over nodes (no topologySpreadConstraints nor podAntiAffinity)")
	}
	for _, tsc := range pod.TopologySpreadConstraints {
		if ls, err := metav1.LabelSelectorAsSelector(tsc.LabelSelector); err != nil || ls.Empty() || !ls.Matches(podLabels) {
			t.Errorf("topologySpreadConstraint %s does not select the relay's pods", tsc.TopologyKey)
		}
	}

	// Service: selects the pods, targets the container's ports.
	if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("Service selector %v does not select the pod labels %v", svc.Spec.Selector, podLabels)
	}
	if svc.Spec.Type != "" && svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("Service type %s, want ClusterIP", svc.Spec.Type)
	}
	for _, p := range svc.Spec.Ports {
		target := resolvePort(c, p.TargetPort, p.Port)
		if target == 0 {
			t.Errorf("Service port %s targets %s, which is no container port", p.Name, p.TargetPort.String())
		}
		if target == grpcPort {
			s.grpcPort = p.Port
			if p.AppProtocol == nil || *p.AppProtocol != "grpc" {
				t.Errorf("Service port %s (xDS gRPC): appProtocol %v, want grpc", p.Name, p.AppProtocol)
			}
		}
	}
	if s.grpcPort == 0 {
		t.Errorf("Service exposes no port targeting the xDS gRPC port %d", grpcPort)
	}

	if pdb != nil {
		ps, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || ps.Empty() || !ps.Matches(podLabels) {
			t.Errorf("PodDisruptionBudget selector %v does not select the pods %v", pdb.Spec.Selector, podLabels)
		}
		switch {
		case pdb.Spec.MaxUnavailable != nil && pdb.Spec.MinAvailable != nil:
			t.Errorf("PodDisruptionBudget sets both minAvailable and maxUnavailable")
		case pdb.Spec.MaxUnavailable != nil:
			if v := pdb.Spec.MaxUnavailable; v.Type == intstr.Int && v.IntVal < 1 {
				t.Errorf("PodDisruptionBudget maxUnavailable %d blocks every node drain", v.IntVal)
			}
		case pdb.Spec.MinAvailable == nil:
			t.Errorf("PodDisruptionBudget sets neither minAvailable nor maxUnavailable")
		}
	}
	if hpa != nil {
		ref := hpa.Spec.ScaleTargetRef
		if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" || ref.Name != dep.Name {
			t.Errorf("HPA targets %s %s %s, want apps/v1 Deployment %s", ref.APIVersion, ref.Kind, ref.Name, dep.Name)
		}
		if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 2 || *hpa.Spec.MinReplicas > hpa.Spec.MaxReplicas {
			t.Errorf("HPA minReplicas %s maxReplicas %d: want 2 ≤ min ≤ max", optInt(hpa.Spec.MinReplicas), hpa.Spec.MaxReplicas)
		}
		cpu := false
		for _, m := range hpa.Spec.Metrics {
			if m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU &&
				m.Resource.Target.Type == autoscalingv2.UtilizationMetricType && m.Resource.Target.AverageUtilization != nil {
				cpu = true
				if u := *m.Resource.Target.AverageUtilization; u < 1 || u > 100 {
					t.Errorf("HPA CPU target %d%%", u)
				}
			}
		}
		if !cpu {
			t.Errorf("HPA has no CPU utilization metric")
		}
		if pdb != nil && pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.Type == intstr.Int &&
			pdb.Spec.MinAvailable.IntVal >= *hpa.Spec.MinReplicas {
			t.Errorf("PDB minAvailable %d ≥ HPA minReplicas %d: no pod could ever be evicted", pdb.Spec.MinAvailable.IntVal, *hpa.Spec.MinReplicas)
		}
	}
	return s
}

// checkAdminToken: the admin port, reachable from the cluster, needs a
// bearer token (issue 12): admin_token_file is a key of a Secret volume
// mounted as a directory (a subPath mount would never see a rotation); a
// Secret of the installation with that name holds a non-empty token.
func checkAdminToken(t *testing.T, objs []object, pod *corev1.PodSpec, c *corev1.Container, cfg app.Config, open bool) {
	t.Helper()
	if open {
		if cfg.AdminTokenFile != "" {
			t.Errorf("admin_token_file %s set, want none", cfg.AdminTokenFile)
		}
		return
	}
	if cfg.AdminTokenFile == "" {
		t.Errorf("admin on %q without admin_token_file: pprof, /debug/ and the log level are open to the whole cluster", cfg.Admin)
		return
	}
	dir, key := filepath.Dir(cfg.AdminTokenFile), filepath.Base(cfg.AdminTokenFile)
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) != dir {
			continue
		}
		if m.SubPath != "" {
			t.Errorf("admin token mounted with subPath %s: a rotated Secret would never reach the pod", m.SubPath)
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			if v.Secret == nil {
				t.Errorf("admin_token_file %s: volume %s is not a Secret", cfg.AdminTokenFile, v.Name)
				return
			}
			if v.Secret.Optional != nil && *v.Secret.Optional {
				t.Errorf("admin token Secret %s is optional: without it the relay would not start", v.Secret.SecretName)
			}
			for _, it := range v.Secret.Items {
				if it.Path == key {
					key = it.Key
				}
			}
			for _, o := range objs {
				if sec, ok := o.obj.(*corev1.Secret); ok && sec.Name == v.Secret.SecretName {
					tok := strings.TrimSpace(string(sec.Data[key]) + sec.StringData[key])
					if len(tok) < 16 {
						t.Errorf("Secret %s key %s holds a %d-byte token, want at least 16", sec.Name, key, len(tok))
					}
				}
			}
			return
		}
	}
	t.Errorf("admin_token_file %s: no volume mount provides its directory", cfg.AdminTokenFile)
}
