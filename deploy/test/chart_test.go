package deploytest

import (
	"path"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// renderChart renders the chart in-process as `helm template` would, with
// strict templates (a reference to a missing value fails), and decodes every
// manifest strictly.
func renderChart(t *testing.T, release, namespace string, overrides map[string]any) ([]object, *chart.Chart) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	if err := ch.Validate(); err != nil {
		t.Fatalf("chart: %v", err)
	}
	vals, err := chartutil.ToRenderValues(ch, overrides, chartutil.ReleaseOptions{
		Name: release, Namespace: namespace, Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	out, err := engine.Engine{Strict: true}.Render(ch, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	names := make([]string, 0, len(out))
	for name := range out {
		names = append(names, name)
	}
	sort.Strings(names)
	var objs []object
	for _, name := range names {
		base := path.Base(name)
		if strings.HasPrefix(base, "_") || base == "NOTES.txt" {
			if base == "NOTES.txt" && !strings.Contains(out[name], namespace) {
				t.Errorf("NOTES.txt does not mention the namespace:\n%s", out[name])
			}
			continue
		}
		o, err := decodeStrict(name, []byte(out[name]))
		if err != nil {
			t.Errorf("%v\n--- rendered:\n%s", err, out[name])
			continue
		}
		objs = append(objs, o...)
	}
	if t.Failed() {
		t.FailNow()
	}
	return objs, ch
}

func TestChartDefaults(t *testing.T) {
	objs, ch := renderChart(t, "xds-relay", "xds-relay", nil)
	s := checkInstallation(t, objs, installWant{hpa: true, pdb: true, namespace: "xds-relay"})
	if s.deployment.Spec.Replicas != nil {
		t.Errorf("Deployment sets replicas %d while the HPA owns the count", *s.deployment.Spec.Replicas)
	}
	if want := "xds-relay:" + ch.Metadata.AppVersion; s.container.Image != want {
		t.Errorf("image %q, want %q (tag defaults to appVersion)", s.container.Image, want)
	}
	if s.config.Upstream.Address != "istiod.istio-system.svc:15010" || s.config.Upstream.Protocol != "sotw" {
		t.Errorf("upstream %+v: the values' upstream did not reach relay.yaml", s.config.Upstream)
	}
	if s.config.Log.Format != "json" {
		t.Errorf("log.format %q: values config did not reach relay.yaml", s.config.Log.Format)
	}
	if s.deployment.Spec.Template.Annotations["checksum/config"] == "" {
		t.Errorf("no checksum/config pod annotation: a config change would not roll the pods")
	}
	// The chart and the raw manifests describe the same installation.
	raw := rawInstallation(t)
	if s.service.Name != raw.service.Name || s.grpcPort != raw.grpcPort {
		t.Errorf("chart Service %s:%d, raw manifests %s:%d: the examples point at the latter", s.service.Name, s.grpcPort, raw.service.Name, raw.grpcPort)
	}
}

// TestChartVariant: no upstream (demo mode from the image's sample config),
// fixed replicas, no HPA nor PDB, another release name and namespace, other
// ports.
func TestChartVariant(t *testing.T) {
	objs, _ := renderChart(t, "edge", "mesh", map[string]any{
		"upstream":                      map[string]any{"address": "", "protocol": "delta"},
		"autoscaling":                   map[string]any{"enabled": false},
		"pdb":                           map[string]any{"enabled": false},
		"replicaCount":                  4,
		"ports":                         map[string]any{"grpc": 15010, "admin": 15000},
		"image":                         map[string]any{"repository": "registry.example/xds-relay", "tag": "abc123"},
		"config":                        map[string]any{"drain": map[string]any{"period": "40s"}},
		"terminationGracePeriodSeconds": 50,
		"metrics":                       map[string]any{"podAnnotations": true},
	})
	s := checkInstallation(t, objs, installWant{replicas: 4, namespace: "mesh"})
	if s.deployment.Name != "edge-xds-relay" {
		t.Errorf("Deployment name %q, want edge-xds-relay", s.deployment.Name)
	}
	if s.config.Upstream.Address != "" || s.config.Source.Dir != "/etc/xds-relay/sample-config" {
		t.Errorf("no upstream: want source.dir /etc/xds-relay/sample-config, got upstream %q source %q", s.config.Upstream.Address, s.config.Source.Dir)
	}
	if s.config.Upstream.Protocol != "delta" || s.config.Listen != ":15010" || s.config.Admin != ":15000" {
		t.Errorf("config %+v does not follow the values", s.config)
	}
	if s.container.Image != "registry.example/xds-relay:abc123" {
		t.Errorf("image %q", s.container.Image)
	}
	// Other keys of the config section survive the override of one key.
	if s.config.Drain.Period.String() != "40s" || s.config.Drain.MaxConnectionAge.String() != "30m0s" {
		t.Errorf("drain %+v", s.config.Drain)
	}
}

// TestChartAdminToken: by default the chart creates the admin token Secret
// (random, 48 characters) and points admin_token_file at it; existingSecret
// mounts that Secret instead and creates none; create: false leaves the admin
// port open (checkInstallation checks the mount and the Secret).
func TestChartAdminToken(t *testing.T) {
	secrets := func(objs []object) []*corev1.Secret {
		var out []*corev1.Secret
		for _, o := range objs {
			if s, ok := o.obj.(*corev1.Secret); ok {
				out = append(out, s)
			}
		}
		return out
	}
	objs, _ := renderChart(t, "xds-relay", "xds-relay", nil)
	checkInstallation(t, objs, installWant{hpa: true, pdb: true, namespace: "xds-relay"})
	if s := secrets(objs); len(s) != 1 || s[0].Name != "xds-relay-admin-token" || len(s[0].Data["token"]) != 48 {
		t.Errorf("default: Secrets %v, want xds-relay-admin-token with a 48-byte token", s)
	}
	again, _ := renderChart(t, "xds-relay", "xds-relay", nil)
	if a, b := secrets(objs), secrets(again); len(b) == 1 && string(a[0].Data["token"]) == string(b[0].Data["token"]) {
		t.Errorf("two installs rendered the same token: it is not random")
	}

	objs, _ = renderChart(t, "xds-relay", "xds-relay", map[string]any{"adminToken": map[string]any{"existingSecret": "ops-admin-token"}})
	s := checkInstallation(t, objs, installWant{hpa: true, pdb: true, namespace: "xds-relay"})
	if len(secrets(objs)) != 0 {
		t.Errorf("existingSecret: the chart created Secrets %v", secrets(objs))
	}
	found := false
	for _, v := range s.deployment.Spec.Template.Spec.Volumes {
		found = found || (v.Secret != nil && v.Secret.SecretName == "ops-admin-token")
	}
	if !found {
		t.Errorf("existingSecret: no volume of Secret ops-admin-token")
	}

	objs, _ = renderChart(t, "xds-relay", "xds-relay", map[string]any{"adminToken": map[string]any{"create": false}})
	checkInstallation(t, objs, installWant{hpa: true, pdb: true, namespace: "xds-relay", openAdmin: true})
	if len(secrets(objs)) != 0 {
		t.Errorf("create: false: Secrets %v", secrets(objs))
	}
}

// TestChartGraceTooShort: the installation checks catch a grace period that
// does not cover the drain (guards the check itself).
func TestChartGraceTooShort(t *testing.T) {
	objs, _ := renderChart(t, "xds-relay", "xds-relay", map[string]any{"terminationGracePeriodSeconds": 30})
	var dep *appsv1.Deployment
	var cm *corev1.ConfigMap
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *appsv1.Deployment:
			dep = v
		case *corev1.ConfigMap:
			cm = v
		}
	}
	if dep == nil || cm == nil {
		t.Fatal("no Deployment or ConfigMap")
	}
	cfg, err := app.ParseConfig("relay.yaml", []byte(cm.Data[configKey]))
	if err != nil {
		t.Fatal(err)
	}
	if err := graceError(dep.Spec.Template.Spec.TerminationGracePeriodSeconds, cfg.Drain.Period); err == nil {
		t.Errorf("grace %ds with drain.period %v passed the check", *dep.Spec.Template.Spec.TerminationGracePeriodSeconds, cfg.Drain.Period)
	} else {
		t.Logf("caught: %v", err)
	}
}

// TestChartLint runs helm's linter (Chart.yaml, values, templates against the
// default capabilities); warnings fail too.
func TestChartLint(t *testing.T) {
	l := lint.All(chartDir, nil, "xds-relay", false)
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %v", m)
		} else {
			t.Logf("helm lint: %v", m)
		}
	}
}

// TestChartValuesSchema: values.schema.json rejects a misspelt or mistyped
// value, as `helm install --set` would.
func TestChartValuesSchema(t *testing.T) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Schema == nil {
		t.Fatal("chart has no values.schema.json")
	}
	for name, vals := range map[string]map[string]any{
		"misspelt key":    {"autoscalling": map[string]any{"enabled": false}},
		"nested typo":     {"upstream": map[string]any{"adress": "cp:15010"}},
		"bad protocol":    {"upstream": map[string]any{"protocol": "grpc"}},
		"port as string":  {"ports": map[string]any{"grpc": "18000"}},
		"monitoring typo": {"metrics": map[string]any{"serviceMonitor": map[string]any{"enable": true}}},
		"bad interval":    {"metrics": map[string]any{"serviceMonitor": map[string]any{"interval": "30 seconds"}}},
		"labels not map":  {"metrics": map[string]any{"dashboard": map[string]any{"labels": "grafana_dashboard=1"}}},
	} {
		_, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "x", Namespace: "x", IsInstall: true}, chartutil.DefaultCapabilities)
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
}
