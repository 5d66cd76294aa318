package deploytest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// Paths, relative to this directory (go test runs in the package directory).
const (
	deployDir    = ".."
	manifestsDir = "../kubernetes"
	chartDir     = "../helm/xds-relay"
	examplesDir  = "../examples"
	dockerfile   = "../Dockerfile"
	repoRoot     = "../.."

	// containerName is the relay's container in the Deployment.
	containerName = "xds-relay"
	// configKey is the ConfigMap key holding the relay's configuration file.
	configKey = "relay.yaml"
)

// object is one decoded manifest document.
type object struct {
	source string // file (and document index) it came from
	kind   string
	obj    any // *appsv1.Deployment, *corev1.Service, ...
}

func (o object) String() string { return o.source + " (" + o.kind + ")" }

// newTyped returns the typed object for apiVersion and kind; unknown pairs are
// an error, so a typo'd or unexpected kind fails the test rather than being
// skipped.
func newTyped(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Namespace":
		return &corev1.Namespace{}, nil
	case "v1 Secret":
		return &corev1.Secret{}, nil
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	}
	return nil, fmt.Errorf("unexpected apiVersion/kind %q/%q (the test knows Deployment, Service, ConfigMap, Namespace, Secret, autoscaling/v2 HorizontalPodAutoscaler, policy/v1 PodDisruptionBudget)", apiVersion, kind)
}

// splitDocuments splits a multi-document YAML stream, dropping documents that
// are empty or only comments.
func splitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var probe any
		if err := yaml.Unmarshal(doc, &probe); err != nil {
			return nil, err
		}
		if probe != nil {
			docs = append(docs, doc)
		}
	}
}

// decodeStrict decodes every document of data into its typed object: YAML is
// converted to JSON and decoded with unknown fields and duplicate keys
// disallowed.
func decodeStrict(source string, data []byte) ([]object, error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	var out []object
	for i, doc := range docs {
		src := source
		if len(docs) > 1 {
			src = fmt.Sprintf("%s[%d]", source, i)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		obj, err := newTyped(tm.APIVersion, tm.Kind)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: strict decode as %s: %w", src, tm.Kind, err)
		}
		out = append(out, object{source: src, kind: tm.Kind, obj: obj})
	}
	return out, nil
}

// TestStrictDecodingRejects proves that the decoder used below is strict: an
// unknown field, a duplicate key, a wrongly typed value and an unknown kind
// all fail.
func TestStrictDecodingRejects(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field":     "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {selctor: {a: b}}\n",
		"unknown nested":    "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      containers:\n      - name: c\n        readinessProbe: {httpGet: {path: /readyz, port: 1, hots: x}}\n",
		"duplicate key":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n",
		"wrong type":        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\nspec: {maxUnavailable: [1]}\n",
		"unknown kind":      "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x}\n",
		"wrong api version": "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: x}\n",
	} {
		if _, err := decodeStrict(name, []byte(doc)); err == nil {
			t.Errorf("%s: decoded without error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
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
		byKind[o.kind] = append(byKind[o.kind], o)
		checkMeta(t, o)
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
		if _, isNS := o.obj.(*corev1.Namespace); isNS {
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

// checkMeta checks names and labels with the API server's own syntax rules.
func checkMeta(t *testing.T, o object) {
	t.Helper()
	m := o.obj.(metav1.Object)
	if m.GetName() == "" {
		t.Errorf("%s: no metadata.name", o)
	}
	for _, msg := range validation.IsDNS1123Label(m.GetName()) {
		t.Errorf("%s: name %q: %s", o, m.GetName(), msg)
	}
	check := func(where string, set map[string]string) {
		for k, v := range set {
			for _, msg := range validation.IsQualifiedName(k) {
				t.Errorf("%s: %s key %q: %s", o, where, k, msg)
			}
			for _, msg := range validation.IsValidLabelValue(v) {
				t.Errorf("%s: %s %s=%q: %s", o, where, k, v, msg)
			}
		}
	}
	check("label", m.GetLabels())
	if d, ok := o.obj.(*appsv1.Deployment); ok {
		check("pod label", d.Spec.Template.Labels)
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, p := range c.Ports {
				for _, msg := range validation.IsValidPortName(p.Name) {
					t.Errorf("%s: container port name %q: %s", o, p.Name, msg)
				}
			}
		}
	}
	if s, ok := o.obj.(*corev1.Service); ok {
		for _, p := range s.Spec.Ports {
			for _, msg := range validation.IsDNS1123Label(p.Name) {
				t.Errorf("%s: port name %q: %s", o, p.Name, msg)
			}
		}
	}
}

// parseArgs reads --name value and --name=value flags.
func parseArgs(t *testing.T, args []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := strings.TrimLeft(args[i], "-")
		if a == args[i] {
			t.Errorf("args %v: unexpected positional %q", args, args[i])
			continue
		}
		if k, v, ok := strings.Cut(a, "="); ok {
			out[k] = v
			continue
		}
		if i+1 >= len(args) {
			t.Errorf("args %v: %s has no value", args, args[i])
			continue
		}
		out[a] = args[i+1]
		i++
	}
	return out
}

// configMapKeyAt returns the key of ConfigMap cmName that the container sees
// at path, or "" (with an error) when path is not such a file.
func configMapKeyAt(t *testing.T, pod *corev1.PodSpec, c *corev1.Container, path, cmName string) string {
	t.Helper()
	for _, m := range c.VolumeMounts {
		var key string
		switch {
		case m.SubPath != "" && m.MountPath == path:
			key = m.SubPath
		case m.SubPath == "" && filepath.Dir(path) == filepath.Clean(m.MountPath):
			key = filepath.Base(path)
		default:
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			if v.ConfigMap == nil || v.ConfigMap.Name != cmName {
				t.Errorf("volume %s mounted at %s is not ConfigMap %s", v.Name, m.MountPath, cmName)
				return ""
			}
			for _, it := range v.ConfigMap.Items {
				if it.Path == key {
					key = it.Key
				}
			}
			if !m.ReadOnly {
				t.Errorf("config volume mount %s is not readOnly", m.MountPath)
			}
			return key
		}
		t.Errorf("volume mount %s names no volume", m.Name)
		return ""
	}
	t.Errorf("--config %s: no volume mount provides it", path)
	return ""
}

func containerPort(t *testing.T, c *corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Errorf("container %s has no port %q", c.Name, name)
	return -1
}

// resolvePort is the container port a Service port or probe port reaches
// (named or numbered); 0 when the container has no such port.
func resolvePort(c *corev1.Container, p intstr.IntOrString, servicePort int32) int32 {
	if p.Type == intstr.String {
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				return cp.ContainerPort
			}
		}
		return 0
	}
	n := p.IntVal
	if n == 0 {
		n = servicePort // an unset targetPort is the port
	}
	for _, cp := range c.Ports {
		if cp.ContainerPort == n {
			return n
		}
	}
	return 0
}

func splitHostPort(t *testing.T, key, addr string) (string, int32) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%s %q: %v", key, addr, err)
		return "", -1
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Errorf("%s %q: %v", key, addr, err)
	}
	return host, int32(n)
}

func anyHost(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }

func checkProbe(t *testing.T, c *corev1.Container, name string, p *corev1.Probe, path string, adminPort int32, required bool) {
	t.Helper()
	if p == nil {
		if required {
			t.Errorf("container has no %s", name)
		}
		return
	}
	g := p.HTTPGet
	if g == nil {
		t.Errorf("%s is not an httpGet probe", name)
		return
	}
	if path != "" && g.Path != path {
		t.Errorf("%s path %q, want %q", name, g.Path, path)
	}
	if path == "" && g.Path != "/healthz" && g.Path != "/readyz" {
		t.Errorf("%s path %q, want /healthz or /readyz", name, g.Path)
	}
	if got := resolvePort(c, g.Port, 0); got != adminPort {
		t.Errorf("%s port %s is %d, want the admin port %d", name, g.Port.String(), got, adminPort)
	}
	if g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP {
		t.Errorf("%s scheme %s: the admin server is plain HTTP", name, g.Scheme)
	}
}

func checkSecurity(t *testing.T, pod *corev1.PodSpec, c *corev1.Container) {
	t.Helper()
	ps := pod.SecurityContext
	if ps == nil {
		ps = &corev1.PodSecurityContext{}
	}
	cs := c.SecurityContext
	if cs == nil {
		t.Errorf("container %s has no securityContext", c.Name)
		cs = &corev1.SecurityContext{}
	}
	// The container's settings override the pod's.
	nonRoot := cs.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = ps.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		t.Errorf("runAsNonRoot is not true")
	}
	uid := cs.RunAsUser
	if uid == nil {
		uid = ps.RunAsUser
	}
	if uid != nil && *uid == 0 {
		t.Errorf("runAsUser 0")
	}
	if cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem {
		t.Errorf("readOnlyRootFilesystem is not true")
	}
	if cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation {
		t.Errorf("allowPrivilegeEscalation is not false")
	}
	if cs.Privileged != nil && *cs.Privileged {
		t.Errorf("container is privileged")
	}
	if cs.Capabilities == nil || !slices.Contains(cs.Capabilities.Drop, "ALL") {
		t.Errorf("capabilities do not drop ALL")
	} else if len(cs.Capabilities.Add) > 0 {
		t.Errorf("capabilities add %v", cs.Capabilities.Add)
	}
	seccomp := cs.SeccompProfile
	if seccomp == nil {
		seccomp = ps.SeccompProfile
	}
	if seccomp == nil || seccomp.Type == corev1.SeccompProfileTypeUnconfined {
		t.Errorf("no seccomp profile (want RuntimeDefault)")
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Errorf("pod shares a host namespace")
	}
}

func checkResources(t *testing.T, c *corev1.Container) {
	t.Helper()
	r := c.Resources
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, ok := r.Requests[name]
		if !ok || req.IsZero() {
			t.Errorf("no %s request (the scheduler and, for cpu, the HPA need it)", name)
			continue
		}
		if lim, ok := r.Limits[name]; ok && lim.Cmp(req) < 0 {
			t.Errorf("%s limit %s below request %s", name, lim.String(), req.String())
		}
	}
	if _, ok := r.Limits[corev1.ResourceMemory]; !ok {
		t.Errorf("no memory limit")
	}
}

// TestDockerfile checks deploy/Dockerfile as text.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	type instr struct {
		op, args string
		line     int
	}
	var stages [][]instr // instructions per FROM
	var cont strings.Builder
	startLine := 0
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cont.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cont.Len() == 0 {
			startLine = i + 1
		}
		if strings.HasSuffix(trimmed, "\\") {
			cont.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cont.WriteString(trimmed)
		full := cont.String()
		cont.Reset()
		op, args, _ := strings.Cut(full, " ")
		in := instr{op: strings.ToUpper(op), args: strings.TrimSpace(args), line: startLine}
		if in.op == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			if in.op != "ARG" {
				t.Errorf("Dockerfile:%d: %s before the first FROM", in.line, in.op)
			}
			continue
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a multi-stage build (≥ 2 FROM)", len(stages))
	}

	// Build stage: the Go image matches go.mod; a static binary of ./cmd/xds-relay.
	build := stages[0]
	fromFields := strings.Fields(build[0].args)
	if len(fromFields) != 3 || !strings.EqualFold(fromFields[1], "AS") {
		t.Errorf("Dockerfile:%d: build stage %q is not named (FROM IMAGE AS NAME)", build[0].line, build[0].args)
	}
	stageName := fromFields[len(fromFields)-1]
	goImage := fromFields[0]
	goVersion, ok := strings.CutPrefix(goImage, "golang:")
	if !ok {
		t.Errorf("Dockerfile:%d: build stage image %q is not golang:", build[0].line, goImage)
	}
	checkGoVersion(t, goVersion)
	binary := ""
	for _, in := range build {
		if in.op == "RUN" && strings.Contains(in.args, "go build") {
			for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/xds-relay"} {
				if !strings.Contains(in.args, want) {
					t.Errorf("Dockerfile:%d: go build lacks %s", in.line, want)
				}
			}
			f := strings.Fields(in.args)
			if i := slices.Index(f, "-o"); i >= 0 && i+1 < len(f) {
				binary = f[i+1]
			}
		}
		if in.op == "COPY" && !strings.Contains(in.args, "--from") {
			checkCopySources(t, in.line, in.args)
		}
	}
	if binary == "" {
		t.Fatalf("Dockerfile: no `go build -o FILE` in the build stage")
	}

	// Final stage: distroless static (or scratch), non-root, the binary as entrypoint.
	final := stages[len(stages)-1]
	base := strings.Fields(final[0].args)[0]
	if !strings.HasPrefix(base, "gcr.io/distroless/static") && base != "scratch" {
		t.Errorf("Dockerfile:%d: final stage %q, want distroless/static or scratch", final[0].line, base)
	}
	nonRoot := strings.HasSuffix(base, ":nonroot")
	var entrypoint []string
	installed := ""
	exposed := map[string]bool{}
	for _, in := range final {
		switch in.op {
		case "USER":
			u, _, _ := strings.Cut(in.args, ":")
			nonRoot = u == "nonroot" || u == "65532"
			if u == "root" || u == "0" {
				t.Errorf("Dockerfile:%d: USER %s", in.line, in.args)
			}
		case "ENTRYPOINT":
			if err := yaml.Unmarshal([]byte(in.args), &entrypoint); err != nil {
				t.Errorf("Dockerfile:%d: ENTRYPOINT %s is not the exec (JSON) form: %v", in.line, in.args, err)
			}
		case "COPY":
			f := strings.Fields(in.args)
			if len(f) == 3 && f[0] == "--from="+stageName && f[1] == binary {
				installed = f[2]
			}
			if !strings.Contains(in.args, "--from") {
				checkCopySources(t, in.line, in.args)
			}
		case "EXPOSE":
			for _, p := range strings.Fields(in.args) {
				exposed[strings.TrimSuffix(p, "/tcp")] = true
			}
		}
	}
	if !nonRoot {
		t.Errorf("Dockerfile: final stage does not run as nonroot/65532")
	}
	if installed == "" {
		t.Errorf("Dockerfile: final stage does not COPY --from=%s %s", stageName, binary)
	}
	if len(entrypoint) != 1 || entrypoint[0] != installed {
		t.Errorf("Dockerfile: ENTRYPOINT %v, want [%q]", entrypoint, installed)
	}
	for _, p := range []string{"18000", "19000"} {
		if !exposed[p] {
			t.Errorf("Dockerfile: does not EXPOSE %s", p)
		}
	}
	// The chart's demo mode (no upstream) serves this directory.
	if !strings.Contains(string(data), "/etc/xds-relay/sample-config") {
		t.Errorf("Dockerfile: does not install deploy/sample-config at /etc/xds-relay/sample-config")
	}
}

// checkGoVersion: the build image's Go (golang:X.Y[.Z]) is at least go.mod's
// language version, or the build would fetch a toolchain (or fail offline).
func checkGoVersion(t *testing.T, tag string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var modGo string
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "go "); ok {
			modGo = strings.TrimSpace(v)
		}
	}
	parse := func(v string) []int {
		v, _, _ = strings.Cut(v, "-") // golang:1.26-bookworm
		var out []int
		for _, p := range strings.Split(v, ".") {
			n, err := strconv.Atoi(p)
			if err != nil {
				return nil
			}
			out = append(out, n)
		}
		return out
	}
	img, mod := parse(tag), parse(modGo)
	if len(img) < 2 || len(mod) < 2 {
		t.Errorf("cannot compare Go versions: image %q, go.mod %q", tag, modGo)
		return
	}
	// An image tag without a patch number is that minor's latest release.
	if img[0] != mod[0] || img[1] < mod[1] || (len(img) > 2 && img[1] == mod[1] && len(mod) > 2 && img[2] < mod[2]) {
		t.Errorf("Dockerfile builds with golang:%s, go.mod needs go %s", tag, modGo)
	}
}

// checkCopySources: every local COPY source exists under the build context
// (the repository root).
func checkCopySources(t *testing.T, line int, args string) {
	t.Helper()
	var f []string
	for _, a := range strings.Fields(args) {
		if !strings.HasPrefix(a, "--") {
			f = append(f, a)
		}
	}
	if len(f) < 2 {
		t.Errorf("Dockerfile:%d: COPY %s", line, args)
		return
	}
	for _, src := range f[:len(f)-1] {
		if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
			t.Errorf("Dockerfile:%d: COPY source %s is not in the build context (the repository root): %v", line, src, err)
		}
	}
}

// graceError: the kubelet's SIGKILL (terminationGracePeriodSeconds, default
// 30s) must come after the relay's drain.period.
func graceError(grace *int64, drain time.Duration) error {
	g := 30 * time.Second
	if grace != nil {
		g = time.Duration(*grace) * time.Second
	}
	if g <= drain {
		return fmt.Errorf("terminationGracePeriodSeconds %v must exceed drain.period %v, or the kubelet kills the relay mid-drain", g, drain)
	}
	return nil
}

func optInt(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}
