package deploytest

// The monitoring objects an operator installs beside the relay: a
// ServiceMonitor, a PrometheusRule and a Grafana dashboard ConfigMap, in the
// chart (metrics.*) and in deploy/kubernetes/monitoring. The alerts and the
// dashboard have one source each, in the chart's files/; the manifests hold
// copies this file keeps equal (-update rewrites them), and docs/operations.md
// lists the alerts this file checks against the rules.

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const (
	// The sources: a Prometheus rule file and a Grafana dashboard.
	rulesFile     = chartDir + "/files/xds-relay.rules.yaml"
	dashboardFile = chartDir + "/files/xds-relay-dashboard.json"
	// promtool's unit tests of the rules.
	rulesTestFile = "testdata/xds-relay.rules.test.yaml"
	// The manifests' copies.
	monitoringDir      = manifestsDir + "/monitoring"
	manifestsRulesFile = monitoringDir + "/prometheusrule.yaml"
	manifestsDashboard = monitoringDir + "/xds-relay-dashboard.json"

	// dashboardKey is the dashboard's key in its ConfigMap.
	dashboardKey = "xds-relay.json"
	// The Grafana sidecar's label convention.
	dashboardLabel, dashboardLabelValue = "grafana_dashboard", "1"

	operationsDoc = repoRoot + "/docs/operations.md"
	// runbookBase is where every runbook_url points: a section of the
	// runbook in docs/operations.md.
	runbookBase = "https://github.com/xds-relay/xds-relay/blob/main/docs/operations.md#"
)

var update = flag.Bool("update", false, "rewrite deploy/kubernetes/monitoring's copies of the chart's rules and dashboard")

// isDashboard: a ConfigMap holding the dashboard, not the relay's config.
func isDashboard(o object) bool {
	cm, ok := o.obj.(*corev1.ConfigMap)
	return ok && cm.Data[dashboardKey] != ""
}

// loadRules decodes the rule file strictly into the PrometheusRule spec.
func loadRules(t *testing.T) monitoringv1.PrometheusRuleSpec {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var spec monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(data, &spec); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return spec
}

// alertRules lists the alerting rules of spec, in order.
func alertRules(spec monitoringv1.PrometheusRuleSpec) []monitoringv1.Rule {
	var out []monitoringv1.Rule
	for _, g := range spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// dashboard is the part of Grafana's dashboard JSON model the tests read.
type dashboard struct {
	Title      string           `json:"title"`
	UID        string           `json:"uid"`
	Panels     []dashboardPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type dashboardPanel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource map[string]any `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource map[string]any `json:"datasource"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) (dashboard, string) {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d, string(data)
}

// variableQuery is a template variable's query: a string, or an object
// with a "query" string (Grafana 9 and later).
func variableQuery(q any) string {
	switch v := q.(type) {
	case string:
		return v
	case map[string]any:
		s, _ := v["query"].(string)
		return s
	}
	return ""
}

// dashboardExprs lists every query of the dashboard: the panels' targets
// (by panel title) and the template variables' label_values queries.
func dashboardExprs(d dashboard) (targets map[string][]string, variables map[string]string) {
	targets, variables = map[string][]string{}, map[string]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			targets[p.Title] = append(targets[p.Title], tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			variables[v.Name] = variableQuery(v.Query)
		}
	}
	return targets, variables
}

// metricNameRE finds the metric names in a PromQL expression: the relay's
// own, and the Go runtime's and the process's. No label name, label value
// or function of the rules and dashboard starts so (TestMonitoringNames
// checks every name it finds against what the relay exports).
var metricNameRE = regexp.MustCompile(`\b(xds_relay|go|process)_[a-z0-9_]+\b`)

func metricNames(expr string) []string { return metricNameRE.FindAllString(expr, -1) }

// comparisonRE is the comparison an alert term ends in.
var comparisonRE = regexp.MustCompile(`^(.*\S)\s*(==|!=|>=|<=|>|<)\s*[0-9.]+$`)

// alertTerms splits an alert expression into its terms (joined by "or" at
// the top level) with their final comparison removed: each is a query
// that returns the series the alert watches, firing or not.
func alertTerms(expr string) ([]string, error) {
	var terms []string
	depth, start := 0, 0
	expr = strings.TrimSpace(expr)
	for i := 0; i < len(expr); i++ {
		switch expr[i] {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		case '"':
			j := strings.IndexByte(expr[i+1:], '"')
			if j < 0 {
				return nil, fmt.Errorf("unterminated string in %q", expr)
			}
			i += j + 1
		case ' ':
			if depth == 0 && strings.HasPrefix(expr[i:], " or ") {
				terms = append(terms, expr[start:i])
				start = i + len(" or ")
			}
		}
	}
	terms = append(terms, expr[start:])
	for i, term := range terms {
		m := comparisonRE.FindStringSubmatch(strings.TrimSpace(term))
		if m == nil {
			return nil, fmt.Errorf("term %q of %q does not end in a comparison with a number", term, expr)
		}
		terms[i] = m[1]
	}
	return terms, nil
}

// monitoringWant is what one installation's monitoring objects should be.
type monitoringWant struct {
	serviceMonitor, prometheusRule, dashboard bool
	// labels every one of them carries (the chart's metrics.*.labels).
	labels map[string]string
	// dashboardNamespace: "" for the installation's.
	dashboardNamespace string
	// interval: the ServiceMonitor's scrape interval ("" for none).
	interval string
}

// checkMonitoring checks the monitoring objects among objs against the
// installation s (checkInstallation's).
func checkMonitoring(t *testing.T, objs []object, s installation, want monitoringWant) {
	t.Helper()
	var sms []*monitoringv1.ServiceMonitor
	var prs []*monitoringv1.PrometheusRule
	var dbs []*corev1.ConfigMap
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *monitoringv1.ServiceMonitor:
			sms = append(sms, v)
		case *monitoringv1.PrometheusRule:
			prs = append(prs, v)
		case *corev1.ConfigMap:
			if isDashboard(o) {
				dbs = append(dbs, v)
			}
		}
	}
	count := func(kind string, n int, want bool) {
		if w := map[bool]int{true: 1}[want]; n != w {
			t.Errorf("%d %s, want %d", n, kind, w)
		}
	}
	count("ServiceMonitor", len(sms), want.serviceMonitor)
	count("PrometheusRule", len(prs), want.prometheusRule)
	count("dashboard ConfigMap", len(dbs), want.dashboard)
	hasLabels := func(what string, m metav1.ObjectMeta, extra map[string]string) {
		for k, v := range want.labels {
			if m.Labels[k] != v {
				t.Errorf("%s %s: label %s=%q, want %q (values' labels)", what, m.Name, k, m.Labels[k], v)
			}
		}
		for k, v := range extra {
			if m.Labels[k] != v {
				t.Errorf("%s %s: label %s=%q, want %q", what, m.Name, k, m.Labels[k], v)
			}
		}
	}

	for _, sm := range sms {
		hasLabels("ServiceMonitor", sm.ObjectMeta, nil)
		if sm.Namespace != s.namespace {
			t.Errorf("ServiceMonitor namespace %q, want %q", sm.Namespace, s.namespace)
		}
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(s.service.Labels)) {
			t.Errorf("ServiceMonitor selector %v does not select the Service %s (labels %v; %v)", sm.Spec.Selector, s.service.Name, s.service.Labels, err)
		}
		if ns := sm.Spec.NamespaceSelector; !ns.Any && !slices.Contains(ns.MatchNames, s.service.Namespace) {
			t.Errorf("ServiceMonitor namespaceSelector %+v leaves out the Service's namespace %s", ns, s.service.Namespace)
		}
		adminPort := containerPort(t, s.container, "http-admin")
		if len(sm.Spec.Endpoints) != 1 {
			t.Fatalf("ServiceMonitor endpoints %+v, want one (the admin port)", sm.Spec.Endpoints)
		}
		ep := sm.Spec.Endpoints[0]
		target := int32(0)
		for _, p := range s.service.Spec.Ports {
			if p.Name == ep.Port {
				target = resolvePort(s.container, p.TargetPort, p.Port)
			}
		}
		if target != adminPort {
			t.Errorf("ServiceMonitor endpoint port %q reaches container port %d, want the admin port %d (http-admin)", ep.Port, target, adminPort)
		}
		if ep.Path != "/metrics" || (ep.Scheme != nil && ep.Scheme.String() != "http") {
			t.Errorf("ServiceMonitor endpoint path %q scheme %s, want /metrics over http", ep.Path, ep.Scheme.String())
		}
		if string(ep.Interval) != want.interval {
			t.Errorf("ServiceMonitor interval %q, want %q", ep.Interval, want.interval)
		}
	}

	for _, pr := range prs {
		hasLabels("PrometheusRule", pr.ObjectMeta, nil)
		if pr.Namespace != s.namespace {
			t.Errorf("PrometheusRule namespace %q, want %q", pr.Namespace, s.namespace)
		}
		if src := loadRules(t); !reflect.DeepEqual(pr.Spec, src) {
			got, _ := yaml.Marshal(pr.Spec)
			t.Errorf("PrometheusRule spec is not %s:\n%s", rulesFile, got)
		}
	}

	_, src := loadDashboard(t)
	for _, cm := range dbs {
		hasLabels("dashboard ConfigMap", cm.ObjectMeta, map[string]string{dashboardLabel: dashboardLabelValue})
		ns := want.dashboardNamespace
		if ns == "" {
			ns = s.namespace
		}
		if cm.Namespace != ns {
			t.Errorf("dashboard ConfigMap namespace %q, want %q", cm.Namespace, ns)
		}
		got := cm.Data[dashboardKey]
		if strings.TrimSpace(got) != strings.TrimSpace(src) {
			t.Errorf("dashboard ConfigMap %s key %s is not %s", cm.Name, dashboardKey, dashboardFile)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("dashboard ConfigMap %s: invalid JSON", cm.Name)
		}
		// kubectl apply keeps the object in an annotation, and all of an
		// object's annotations together hold at most 256 KiB.
		if len(got) > 200<<10 {
			t.Errorf("dashboard ConfigMap %s holds %d bytes: kubectl apply would fail past 256 KiB", cm.Name, len(got))
		}
		if len(cm.Data) != 1 {
			t.Errorf("dashboard ConfigMap %s has keys %v, want only %s", cm.Name, slices.Sorted(maps.Keys(cm.Data)), dashboardKey)
		}
	}
}

// TestChartMonitoring renders the chart with the monitoring values: by
// default only the dashboard ConfigMap (no CRD needed); each object on
// and off by its value; labels, the scrape interval and the dashboard's
// namespace follow the values.
func TestChartMonitoring(t *testing.T) {
	promLabels := map[string]any{"release": "kube-prometheus-stack"}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   monitoringWant
	}{
		{"defaults", nil, monitoringWant{dashboard: true}},
		{"all", map[string]any{
			"serviceMonitor": map[string]any{"enabled": true, "labels": promLabels},
			"prometheusRule": map[string]any{"enabled": true, "labels": promLabels},
			"dashboard":      map[string]any{"labels": map[string]any{dashboardLabel: "1", "release": "kube-prometheus-stack"}, "annotations": map[string]any{"grafana_folder": "xds-relay"}},
		}, monitoringWant{serviceMonitor: true, prometheusRule: true, dashboard: true, interval: "30s",
			labels: map[string]string{"release": "kube-prometheus-stack"}}},
		{"none", map[string]any{"dashboard": map[string]any{"enabled": false}}, monitoringWant{}},
		{"service monitor, the Prometheus's interval", map[string]any{
			"serviceMonitor": map[string]any{"enabled": true, "interval": ""},
			"dashboard":      map[string]any{"enabled": false},
		}, monitoringWant{serviceMonitor: true}},
		{"dashboard in Grafana's namespace", map[string]any{
			"dashboard": map[string]any{"namespace": "monitoring"},
		}, monitoringWant{dashboard: true, dashboardNamespace: "monitoring"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var vals map[string]any
			if tc.values != nil {
				vals = map[string]any{"metrics": tc.values}
			}
			objs, _ := renderChart(t, "xds-relay", "xds-relay", vals)
			s := checkInstallation(t, objs, installWant{hpa: true, pdb: true, namespace: "xds-relay"})
			checkMonitoring(t, objs, s, tc.want)
			for _, o := range objs {
				if cm, ok := o.obj.(*corev1.ConfigMap); ok && isDashboard(o) && tc.name == "all" && cm.Annotations["grafana_folder"] != "xds-relay" {
					t.Errorf("dashboard annotations %v, want the values' grafana_folder", cm.Annotations)
				}
			}
		})
	}

	// helm lint with everything on.
	l := lint.All(chartDir, map[string]any{"metrics": map[string]any{
		"serviceMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true},
	}}, "xds-relay", false)
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint (monitoring on): %v", m)
		}
	}
}

// kustomizeBuild builds dir in-process, as `kubectl apply -k` does, and
// decodes the result strictly.
func kustomizeBuild(t *testing.T, dir string) []object {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeStrict("kustomize build "+dir, out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return objs
}

// manifestsRules is deploy/kubernetes/monitoring/prometheusrule.yaml as
// generated from the rule file.
func manifestsRules(t *testing.T) []byte {
	t.Helper()
	src, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString(`# Generated from deploy/helm/xds-relay/files/xds-relay.rules.yaml: edit that
# file, then run "go test -run TestKubernetesMonitoring -update" in deploy/test.
# Needs the Prometheus Operator's CRDs (monitoring.coreos.com).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: xds-relay
  namespace: xds-relay
  labels:
    app.kubernetes.io/name: xds-relay
    app.kubernetes.io/instance: xds-relay
    app.kubernetes.io/component: relay
spec:
`)
	for _, line := range strings.SplitAfter(string(src), "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	return b.Bytes()
}

// TestKubernetesMonitoring builds deploy/kubernetes/monitoring (applied
// after the base: `kubectl apply -k deploy/kubernetes/monitoring`) and
// checks it against the base's installation; its PrometheusRule and
// dashboard are the chart's files (-update rewrites them).
func TestKubernetesMonitoring(t *testing.T) {
	copies := map[string][]byte{manifestsRulesFile: manifestsRules(t)}
	dash, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	copies[manifestsDashboard] = dash
	for path, want := range copies {
		got, err := os.ReadFile(path)
		if *update && !bytes.Equal(got, want) {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("rewrote %s", path)
			continue
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not what the chart's files give (%v): run `go test -run TestKubernetesMonitoring -update` in deploy/test", path, err)
		}
	}

	base := kustomizeBuild(t, manifestsDir)
	s := checkInstallation(t, base, installWant{hpa: true, pdb: true, namespace: "xds-relay"})
	objs := kustomizeBuild(t, monitoringDir)
	for _, o := range objs {
		checkMeta(t, o)
	}
	checkMonitoring(t, objs, s, monitoringWant{serviceMonitor: true, prometheusRule: true, dashboard: true, interval: "30s"})
	if len(objs) != 3 {
		t.Errorf("kustomize build %s: %d objects, want 3", monitoringDir, len(objs))
	}
}

// TestRules: the rule file's conventions, which the runbook links, the docs
// and the end-to-end test rely on.
func TestRules(t *testing.T) {
	rules := alertRules(loadRules(t))
	if len(rules) == 0 {
		t.Fatal("no alert")
	}
	anchors := runbookAnchors(t)
	seen := map[string]bool{}
	for _, r := range rules {
		if !regexp.MustCompile(`^XdsRelay[A-Z][A-Za-z]+$`).MatchString(r.Alert) || seen[r.Alert] {
			t.Errorf("alert %q: want a unique XdsRelay... name", r.Alert)
		}
		seen[r.Alert] = true
		if sev := r.Labels["severity"]; sev != "warning" && sev != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", r.Alert, sev)
		}
		if keys := slices.Sorted(maps.Keys(r.Annotations)); !slices.Equal(keys, []string{"description", "runbook_url", "summary"}) {
			t.Errorf("%s: annotations %v, want summary, description and runbook_url", r.Alert, keys)
		}
		anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookBase)
		if !ok || !anchors[anchor] {
			t.Errorf("%s: runbook_url %q is not %s followed by a section of the runbook (%v)", r.Alert, r.Annotations["runbook_url"], runbookBase, slices.Sorted(maps.Keys(anchors)))
		}
		if _, err := alertTerms(r.Expr.String()); err != nil {
			t.Errorf("%s: %v", r.Alert, err)
		}
		if len(metricNames(r.Expr.String())) == 0 {
			t.Errorf("%s: expression %q reads no metric", r.Alert, r.Expr.String())
		}
	}
}

// rulesTests is the part of promtool's unit test file the tests read.
type rulesTests struct {
	RuleFiles []string         `json:"rule_files"`
	Tests     []rulesTestGroup `json:"tests"`
}

type rulesTestGroup struct {
	Name        string `json:"name"`
	InputSeries []struct {
		Series string `json:"series"`
	} `json:"input_series"`
	AlertRuleTests []struct {
		Alertname string           `json:"alertname"`
		ExpAlerts []map[string]any `json:"exp_alerts"`
	} `json:"alert_rule_test"`
}

func loadRulesTests(t *testing.T) rulesTests {
	t.Helper()
	data, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var rt rulesTests
	if err := yaml.Unmarshal(data, &rt); err != nil {
		t.Fatalf("%s: %v", rulesTestFile, err)
	}
	return rt
}

// TestRulesTestsCoverEveryAlert: every alert has promtool unit tests of its
// own, a group named after it with a time it must fire and series that
// must not fire it; none tests an alert that does not exist.
func TestRulesTestsCoverEveryAlert(t *testing.T) {
	rt := loadRulesTests(t)
	if want := "../../helm/xds-relay/files/xds-relay.rules.yaml"; !slices.Equal(rt.RuleFiles, []string{want}) ||
		filepath.Clean(filepath.Join(filepath.Dir(rulesTestFile), want)) != filepath.Clean(rulesFile) {
		t.Errorf("rule_files %v, want [%s]", rt.RuleFiles, want)
	}
	alerts := map[string]bool{}
	for _, r := range alertRules(loadRules(t)) {
		alerts[r.Alert] = true
	}
	groups := map[string]bool{}
	for _, g := range rt.Tests {
		if !alerts[g.Name] || groups[g.Name] {
			t.Errorf("test group %q: want one group per alert, named after it", g.Name)
		}
		groups[g.Name] = true
		fires, most := false, 0
		for _, at := range g.AlertRuleTests {
			if at.Alertname != g.Name {
				t.Errorf("test group %s tests alert %s: one group per alert", g.Name, at.Alertname)
			}
			fires = fires || len(at.ExpAlerts) > 0
			most = max(most, len(at.ExpAlerts))
		}
		if !fires {
			t.Errorf("test group %s: no time the alert must fire", g.Name)
		}
		// The series that must not fire it: more input series than alerts
		// expected at any one time.
		if len(g.InputSeries) <= most {
			t.Errorf("test group %s: %d input series, %d alerts at once: no series that must not fire it", g.Name, len(g.InputSeries), most)
		}
	}
	for a := range alerts {
		if !groups[a] {
			t.Errorf("alert %s: no unit test group", a)
		}
	}
}

// rulesTestSeriesNames are the metric names of the unit tests' input series.
func rulesTestSeriesNames(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, g := range loadRulesTests(t).Tests {
		for _, s := range g.InputSeries {
			name, _, _ := strings.Cut(s.Series, "{")
			out = append(out, name)
		}
	}
	return out
}

// toolPath finds a tool of Debian's prometheus package. Without it the test
// is skipped, except in CI (CI=true), which installs it
// (.ci/install-prometheus.sh).
func toolPath(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not on PATH, and CI=true: .ci/install-prometheus.sh should have installed it", name)
	}
	t.Skipf("%s is not on PATH: install Debian's prometheus package (.ci/install-prometheus.sh) to test the alerts with it", name)
	return ""
}

// TestPromtoolRules runs promtool on the chart's rendered PrometheusRule:
// `promtool check rules` on its spec as a rule file, and `promtool test
// rules` with the unit tests (testdata/xds-relay.rules.test.yaml) pointed
// at that file.
func TestPromtoolRules(t *testing.T) {
	promtool := toolPath(t, "promtool")
	objs, _ := renderChart(t, "xds-relay", "xds-relay", map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true}}})
	var pr *monitoringv1.PrometheusRule
	for _, o := range objs {
		if v, ok := o.obj.(*monitoringv1.PrometheusRule); ok {
			pr = v
		}
	}
	if pr == nil {
		t.Fatal("no PrometheusRule rendered")
	}
	dir := t.TempDir()
	rules, err := yaml.Marshal(pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	rulesPath := filepath.Join(dir, "rendered.rules.yaml")
	if err := os.WriteFile(rulesPath, rules, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		} else {
			t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		}
	}
	run("check", "rules", rulesPath)

	var tests map[string]any
	data, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &tests); err != nil {
		t.Fatal(err)
	}
	tests["rule_files"] = []string{rulesPath}
	out, err := yaml.Marshal(tests)
	if err != nil {
		t.Fatal(err)
	}
	testsPath := filepath.Join(dir, "rendered.rules.test.yaml")
	if err := os.WriteFile(testsPath, out, 0o644); err != nil {
		t.Fatal(err)
	}
	run("test", "rules", testsPath)
}

// TestDashboard: the dashboard's structure, as Grafana reads it: unique
// panel ids on a 24-column grid without overlaps, every query on the
// datasource variable and scoped by the job and instance variables.
func TestDashboard(t *testing.T) {
	d, _ := loadDashboard(t)
	if d.UID != "xds-relay" || d.Title == "" {
		t.Errorf("dashboard uid %q title %q", d.UID, d.Title)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, v := range []string{"datasource", "job", "instance"} {
		if !vars[v] {
			t.Errorf("no template variable %s", v)
		}
	}
	ids := map[int]bool{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	rows := 0
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d taken", p.Title, p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W < 1 || g.H < 1 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Errorf("panel %q overlaps %q at %d,%d", p.Title, other, x, y)
				}
				taken[cell{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			rows++
			continue
		}
		if uid, _ := p.Datasource["uid"].(string); uid != "${datasource}" {
			t.Errorf("panel %q: datasource %v, want the datasource variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			names := metricNames(tg.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q reads no metric", p.Title, tg.Expr)
			}
			for _, n := range names {
				if !strings.Contains(tg.Expr, n+`{job=~"$job",instance=~"$instance"`) {
					t.Errorf("panel %q: %s in %q is not scoped by {job=~\"$job\",instance=~\"$instance\"...}", p.Title, n, tg.Expr)
				}
			}
		}
	}
	if rows != 4 {
		t.Errorf("%d rows, want 4 (fleet, upstream, fan-out, resources)", rows)
	}
}

// TestDocsListEveryAlert: docs/operations.md's table of alerts lists the
// rule file's alerts, in its order, with their severity and runbook section.
func TestDocsListEveryAlert(t *testing.T) {
	data, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Alerts\n")
	if !ok {
		t.Fatal("docs/operations.md has no section \"## Alerts\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rowRE := regexp.MustCompile("(?m)^\\| `(XdsRelay[A-Za-z]+)` \\| ([a-z]+) \\| .* \\| \\[[^]]+\\]\\(#([a-z0-9_-]+)\\) \\|$")
	var got []string
	for _, m := range rowRE.FindAllStringSubmatch(section, -1) {
		got = append(got, m[1]+" "+m[2]+" #"+m[3])
	}
	var want []string
	for _, r := range alertRules(loadRules(t)) {
		want = append(want, r.Alert+" "+r.Labels["severity"]+" #"+strings.TrimPrefix(r.Annotations["runbook_url"], runbookBase))
	}
	if !slices.Equal(got, want) {
		t.Errorf("docs/operations.md, Alerts, lists (alert severity runbook):\n  %s\nthe rules (%s):\n  %s", strings.Join(got, "\n  "), rulesFile, strings.Join(want, "\n  "))
	}
}

// runbookAnchors are the anchors of the headings of docs/operations.md's
// runbook (GitHub's, as .ci/doclinks.sh computes them).
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, runbook, ok := strings.Cut(string(data), "\n## Runbook\n")
	if !ok {
		t.Fatal("docs/operations.md has no section \"## Runbook\"")
	}
	runbook, _, _ = strings.Cut(runbook, "\n## ")
	out := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(runbook, "\n") {
		if h, ok := strings.CutPrefix(line, "### "); ok {
			s := strings.ToLower(strings.ReplaceAll(h, "`", ""))
			out[strings.ReplaceAll(drop.ReplaceAllString(s, ""), " ", "-")] = true
		}
	}
	return out
}
