package deploytest

// The monitoring objects against real relays: two relays on loopback under
// a small load (a class updated 50 times a second with ordinary, NACKing and
// stalled clients; a class whose every upstream response is rejected; a
// class whose upstream answers every ACK with the same response; a class on
// a relay whose upstream is down; a client sending invalid requests), first
// read directly (every metric the rules, the dashboard and the rules' unit
// tests name is one the relays export), then scraped by a real Prometheus
// (Debian's prometheus package) evaluating the rules: every alert term and
// every dashboard query returns series, the alerts this load must raise
// fire, and those it must not stay quiet.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// The node classes of the load; each one's upstream behaviour is
// scriptedADS's.
const (
	classGood     = "good"     // updated every 20 ms, Cluster and Listener in turn
	classRejected = "rejected" // every response has a duplicate name (NACKed); the stream ends every 5 s
	classStorm    = "storm"    // every ACK answered with the same response
	classDown     = "down"     // on the relay whose upstream is down
)

// scriptedADS is a SotW ADS control plane that behaves, on each stream, as
// the class of the stream's node (node.cluster) says.
type scriptedADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
}

type adsStream = grpc.BidiStreamingServer[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]

func (scriptedADS) StreamAggregatedResources(s adsStream) error {
	ctx := s.Context()
	reqs := make(chan *discoveryv3.DiscoveryRequest, 64)
	go func() {
		defer close(reqs)
		for {
			r, err := s.Recv()
			if err != nil {
				return
			}
			select {
			case reqs <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	var first *discoveryv3.DiscoveryRequest
	select {
	case first = <-reqs:
	case <-ctx.Done():
		return nil
	}
	if first == nil {
		return nil
	}
	nonce := 0
	send := func(typeURL, version string, res []*anypb.Any) error {
		nonce++
		return s.Send(&discoveryv3.DiscoveryResponse{TypeUrl: typeURL, VersionInfo: version, Resources: res, Nonce: fmt.Sprint(nonce)})
	}
	var types []string // subscribed, in order
	subscribe := func(r *discoveryv3.DiscoveryRequest) bool {
		t := r.GetTypeUrl()
		if (t != xdstest.ClusterType && t != xdstest.ListenerType) || slices.Contains(types, t) {
			return false
		}
		types = append(types, t)
		return true
	}
	subscribe(first)
	switch first.GetNode().GetCluster() {
	case classGood:
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		gen := 0
		for {
			select {
			case r, ok := <-reqs:
				if !ok {
					return nil
				}
				subscribe(r)
			case <-tick.C:
				if len(types) == 0 {
					continue
				}
				gen++
				t := types[gen%len(types)]
				n := map[string]int{xdstest.ClusterType: 40, xdstest.ListenerType: 10}[t]
				if err := send(t, fmt.Sprint(gen), resources(t, n, gen)); err != nil {
					return err
				}
			case <-ctx.Done():
				return nil
			}
		}
	case classRejected:
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		// An upstream that fails the stream: a reconnect (a control plane
		// that cannot be reached at all leaves the class connecting, and
		// counts none).
		end := time.After(5 * time.Second)
		for gen := 1; ; gen++ {
			select {
			case <-end:
				return status.Error(codes.Unavailable, "scripted: the stream ends")
			case r, ok := <-reqs:
				if !ok {
					return nil
				}
				subscribe(r)
			case <-tick.C:
				dup := resources(xdstest.ClusterType, 1, gen)
				if err := send(xdstest.ClusterType, fmt.Sprintf("bad-%d", gen), append(dup, dup...)); err != nil {
					return err
				}
			case <-ctx.Done():
				return nil
			}
		}
	case classStorm:
		// One response, then the same again in answer to each of its ACKs.
		res := resources(xdstest.ClusterType, 3, 1)
		if err := send(xdstest.ClusterType, "storm", res); err != nil {
			return err
		}
		for {
			select {
			case r, ok := <-reqs:
				if !ok {
					return nil
				}
				if r.GetTypeUrl() == xdstest.ClusterType && r.GetResponseNonce() == fmt.Sprint(nonce) && r.GetErrorDetail() == nil {
					if err := send(xdstest.ClusterType, "storm", res); err != nil {
						return err
					}
				}
			case <-ctx.Done():
				return nil
			}
		}
	}
	<-ctx.Done()
	return nil
}

// resources are n resources of typeURL whose content depends on gen.
func resources(typeURL string, n, gen int) []*anypb.Any {
	out := make([]*anypb.Any, 0, n)
	for i := range n {
		a, err := anypb.New(xdstest.Resource(typeURL, fmt.Sprintf("r%d", i), gen))
		if err != nil {
			panic(err)
		}
		out = append(out, a)
	}
	return out
}

// monitoredRelay starts a relay in front of upstream with what the load
// needs: a fast backoff, a resync every ~10 s (upstream restarts), slow
// clients never disconnected (they keep collapsing), and a memory budget
// far above what it uses (the memory ceiling's series, in state normal).
func monitoredRelay(t *testing.T, upstream string) *app.Relay {
	t.Helper()
	cfg := app.DefaultConfig()
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstream.Address = upstream
	cfg.Upstream.Backoff.Initial = 50 * time.Millisecond
	cfg.Upstream.Backoff.Max = 500 * time.Millisecond
	cfg.Upstream.ResyncInterval = 10 * time.Second
	cfg.Limits.MaxCollapses = -1
	cfg.Overload.MemoryBudgetBytes = 8 << 30
	r, err := app.Start(cfg, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	if err != nil {
		t.Fatalf("app.Start: %v", err)
	}
	t.Cleanup(r.Close)
	return r
}

// monitoringLoad is the two relays and their clients.
type monitoringLoad struct {
	relay, down *app.Relay // in front of scriptedADS; in front of nothing
}

func startMonitoringLoad(t *testing.T, ctx context.Context) monitoringLoad {
	t.Helper()
	srv := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(srv, scriptedADS{})
	upstream := xdstest.ServeGRPC(t, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	lis.Close()
	l := monitoringLoad{relay: monitoredRelay(t, upstream), down: monitoredRelay(t, closed)}

	client := func(r *app.Relay, id, class string, delta bool, nack bool, types ...string) {
		t.Helper()
		c, err := xdstest.Dial(r.Addr(), xdstest.Options{Node: &corev3.Node{Id: id, Cluster: class}, ADS: true, Delta: delta})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		for _, typ := range types {
			if nack {
				c.NACK(typ, 1<<30)
			}
			if err := c.Subscribe(typ, xdstest.Sub{Wildcard: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	client(l.relay, "good-sotw", classGood, false, false, xdstest.ClusterType)
	client(l.relay, "good-delta", classGood, true, false, xdstest.ClusterType, xdstest.ListenerType)
	client(l.relay, "good-nacker", classGood, false, true, xdstest.ClusterType, xdstest.ListenerType)
	client(l.relay, "rejected-1", classRejected, false, false, xdstest.ClusterType)
	client(l.relay, "storm-1", classStorm, false, false, xdstest.ClusterType)
	client(l.down, "down-1", classDown, false, false, xdstest.ClusterType)
	stalledClient(t, ctx, l.relay.Addr(), "good-stalled", classGood, xdstest.ClusterType, xdstest.ListenerType)
	go invalidRequests(ctx, l.relay.Addr(), 3*time.Second)
	return l
}

// stalledClient subscribes and then never reads: with the smallest HTTP/2
// windows the relay soon cannot write to it, and its queue collapses over
// and over.
func stalledClient(t *testing.T, ctx context.Context, addr, id, class string, types ...string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, typ := range types {
		req := &discoveryv3.DiscoveryRequest{TypeUrl: typ, ResourceNames: []string{"*"}}
		if i == 0 {
			req.Node = &corev3.Node{Id: id, Cluster: class}
		}
		if err := s.Send(req); err != nil {
			t.Fatal(err)
		}
	}
}

// invalidRequests opens a stream every interval whose request the relay
// refuses (a type URL over limits.max_type_url_bytes): a disconnect for
// invalid_request, well under the disconnect churn alert's 1/s.
func invalidRequests(ctx context.Context, addr string, every time.Duration) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return
	}
	defer conn.Close()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, every)
		s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
		if err == nil {
			_ = s.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "invalid", Cluster: classGood},
				TypeUrl: "type.googleapis.com/" + strings.Repeat("x", 300)})
			_, _ = s.Recv()
		}
		cancel()
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// exportedNames are the metric names of the samples at a relay's /metrics.
func exportedNames(ctx context.Context, admin string) (map[string]bool, error) {
	body, err := httpGet(ctx, "http://"+admin+"/metrics")
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexAny(line+" ", "{ ")]
		out[name] = true
	}
	return out, nil
}

func httpGet(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", u, resp.Status, body)
	}
	return body, err
}

// monitoringNames are the metric names the monitoring objects read, each
// with where: the alerts' expressions, the dashboard's queries and
// variables, the rules' unit tests' input series.
func monitoringNames(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	add := func(where, expr string) {
		for _, n := range metricNames(expr) {
			if !slices.Contains(out[n], where) {
				out[n] = append(out[n], where)
			}
		}
	}
	for _, r := range alertRules(loadRules(t)) {
		add("alert "+r.Alert, r.Expr.String())
	}
	d, _ := loadDashboard(t)
	targets, variables := dashboardExprs(d)
	for title, exprs := range targets {
		for _, e := range exprs {
			add("panel "+title, e)
		}
	}
	for name, q := range variables {
		add("variable "+name, q)
	}
	for _, s := range rulesTestSeriesNames(t) {
		add("unit test input", s)
	}
	return out
}

// TestMonitoringAgainstPrometheus: see the top of this file.
func TestMonitoringAgainstPrometheus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	l := startMonitoringLoad(t, ctx)
	admins := []string{l.relay.AdminAddr(), l.down.AdminAddr()}

	// Every metric name the rules, the dashboard and the rules' unit tests
	// read is one the relays export: a metric renamed in the relay fails
	// here even where promtool's tests, on series of their own, would pass.
	t.Run("names", func(t *testing.T) {
		want := monitoringNames(t)
		var missing []string
		deadline := time.Now().Add(60 * time.Second)
		for {
			got := map[string]bool{}
			for _, a := range admins {
				names, err := exportedNames(ctx, a)
				if err != nil {
					t.Fatal(err)
				}
				maps.Copy(got, names)
			}
			missing = missing[:0]
			for _, n := range slices.Sorted(maps.Keys(want)) {
				if !got[n] {
					missing = append(missing, fmt.Sprintf("%s (%s)", n, strings.Join(want[n], ", ")))
				}
			}
			if len(missing) == 0 {
				t.Logf("the relays export all %d metric names the monitoring objects read", len(want))
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 60 s under load, the relays' /metrics have no series named:\n  %s", strings.Join(missing, "\n  "))
			}
			time.Sleep(time.Second)
		}
	})

	t.Run("prometheus", func(t *testing.T) {
		prom := startPrometheus(t, ctx, admins)
		checkAgainstPrometheus(t, ctx, prom, l)
	})
}

// startPrometheus runs Prometheus scraping targets every second and
// evaluating the rule file every second with every `for` dropped (the
// expressions are what this test checks; promtool's unit tests check the
// durations). It returns the server's base URL.
func startPrometheus(t *testing.T, ctx context.Context, targets []string) string {
	t.Helper()
	bin := toolPath(t, "prometheus")
	dir := t.TempDir()
	spec := loadRules(t)
	for gi := range spec.Groups {
		for ri := range spec.Groups[gi].Rules {
			spec.Groups[gi].Rules[ri].For = nil
		}
	}
	rules, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	rulesPath := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, rules, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := yaml.Marshal(map[string]any{
		"global":     map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
		"rule_files": []string{rulesPath},
		"scrape_configs": []any{map[string]any{
			"job_name":       "xds-relay",
			"static_configs": []any{map[string]any{"targets": targets}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	var out xdstest.SyncBuffer
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out.String())
		}
	})
	base := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := httpGet(ctx, base+"/-/ready"); err == nil {
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("prometheus exited: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 30 s:\n%s", out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("prometheus at %s scraping %v", base, targets)
	return base
}

// promSeries runs an instant query and returns the label sets of the result.
func promSeries(ctx context.Context, base, query string) ([]map[string]string, error) {
	body, err := httpGet(ctx, base+"/api/v1/query?query="+url.QueryEscape(query))
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", query, r.Error)
	}
	var out []map[string]string
	for _, s := range r.Data.Result {
		out = append(out, s.Metric)
	}
	return out, nil
}

type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
}

func promAlerts(ctx context.Context, base string) ([]promAlert, error) {
	body, err := httpGet(ctx, base+"/api/v1/alerts")
	if err != nil {
		return nil, err
	}
	var r struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	return r.Data.Alerts, json.Unmarshal(body, &r)
}

// promRuleErrors lists the rules Prometheus failed to evaluate.
func promRuleErrors(ctx context.Context, base string) ([]string, int, error) {
	body, err := httpGet(ctx, base+"/api/v1/rules")
	if err != nil {
		return nil, 0, err
	}
	var r struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, 0, err
	}
	var bad []string
	n := 0
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			n++
			if rule.Health == "err" {
				bad = append(bad, rule.Name+": "+rule.LastError)
			}
		}
	}
	return bad, n, nil
}

// dashboardVars fills in a dashboard query's variables as Grafana would
// with every job and relay selected.
var dashboardVars = strings.NewReplacer("$__rate_interval", "1m", "$job", ".+", "$instance", ".+")

var labelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_]+)\)$`)

func checkAgainstPrometheus(t *testing.T, ctx context.Context, base string, l monitoringLoad) {
	relay, down := l.relay.AdminAddr(), l.down.AdminAddr()
	// The alerts this load must raise, with labels each must carry.
	mustFire := map[string]map[string]string{
		"XdsRelayUpstreamDown":        {"class": classDown, "instance": down},
		"XdsRelayUpstreamUnreachable": {"class": classDown, "instance": down},
		"XdsRelayUpstreamRejected":    {"class": classRejected, "type": "Cluster", "result": "nack", "instance": relay},
		"XdsRelayUpstreamDrops":       {"reason": "upstream_rejected", "instance": relay},
		"XdsRelayUpstreamStorm":       {"class": classStorm, "type": "Cluster", "instance": relay},
		"XdsRelayClientNACKs":         {"class": classGood, "job": "xds-relay"},
		"XdsRelaySlowClients":         {"instance": relay},
	}
	// Those it must not: a resync every 10 s is 6 restarts a class a
	// minute, far under 30 in 10; no memory pressure; one invalid request
	// every 3 s; no client refused.
	mustNot := []string{"XdsRelayUpstreamRestarts", "XdsRelayMemoryRefusing", "XdsRelayMemoryShedding", "XdsRelayDisconnectChurn", "XdsRelayPeersRefused"}
	// XdsRelayFanoutSlow may fire or not: the stalled client holds the
	// fan-out of every update until its queue collapses (every ~1.3 s at
	// 50 updates a second), more on a loaded machine.
	mayFire := []string{"XdsRelayFanoutSlow"}

	queries := map[string]string{} // what -> query that must return series
	for _, r := range alertRules(loadRules(t)) {
		if _, ok := mustFire[r.Alert]; !ok && !slices.Contains(mustNot, r.Alert) && !slices.Contains(mayFire, r.Alert) {
			t.Errorf("alert %s: this test does not say whether its load must fire it", r.Alert)
		}
		terms, err := alertTerms(r.Expr.String())
		if err != nil {
			t.Fatal(err)
		}
		for i, term := range terms {
			queries[fmt.Sprintf("alert %s term %d", r.Alert, i+1)] = term
		}
	}
	d, _ := loadDashboard(t)
	targets, variables := dashboardExprs(d)
	for title, exprs := range targets {
		for i, e := range exprs {
			queries[fmt.Sprintf("panel %q query %d", title, i+1)] = dashboardVars.Replace(e)
		}
	}
	varLabels := map[string]string{} // query -> the label it must carry
	for name, q := range variables {
		m := labelValuesRE.FindStringSubmatch(q)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(SELECTOR, LABEL)", name, q)
		}
		sel := dashboardVars.Replace(m[1])
		queries["variable "+name] = sel
		varLabels[sel] = m[2]
	}
	for what, q := range queries {
		if strings.Contains(q, "$") {
			t.Fatalf("%s: %q has a variable this test does not fill in", what, q)
		}
	}

	deadline := time.Now().Add(2 * time.Minute)
	var pending []string
	for {
		pending = pending[:0]
		bad, n, err := promRuleErrors(ctx, base)
		if err != nil {
			t.Fatal(err)
		}
		if len(bad) > 0 {
			t.Fatalf("prometheus fails to evaluate rules:\n  %s", strings.Join(bad, "\n  "))
		}
		if n != len(alertRules(loadRules(t))) {
			pending = append(pending, fmt.Sprintf("prometheus has loaded %d rules", n))
		}
		for _, what := range slices.Sorted(maps.Keys(queries)) {
			q := queries[what]
			series, err := promSeries(ctx, base, q)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if len(series) == 0 {
				pending = append(pending, fmt.Sprintf("%s returns no series: %s", what, q))
			}
			if label := varLabels[q]; label != "" && len(series) > 0 && series[0][label] == "" {
				t.Errorf("%s: series %v have no label %s", what, series[0], label)
			}
		}
		alerts, err := promAlerts(ctx, base)
		if err != nil {
			t.Fatal(err)
		}
		firing := map[string][]promAlert{}
		for _, a := range alerts {
			if a.State == "firing" {
				firing[a.Labels["alertname"]] = append(firing[a.Labels["alertname"]], a)
			}
			for k, v := range a.Annotations {
				if strings.Contains(v, "<no value>") || strings.Contains(v, "%!") {
					t.Errorf("%s: annotation %s reads a label or value it lacks: %q", a.Labels["alertname"], k, v)
				}
			}
		}
		for _, name := range mustNot {
			for _, a := range firing[name] {
				t.Errorf("%s fires, and this load must not raise it: %v\n  %s", name, a.Labels, a.Annotations["description"])
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		for _, name := range slices.Sorted(maps.Keys(mustFire)) {
			want := mustFire[name]
			if !slices.ContainsFunc(firing[name], func(a promAlert) bool {
				for k, v := range want {
					if a.Labels[k] != v {
						return false
					}
				}
				return true
			}) {
				pending = append(pending, fmt.Sprintf("%s is not firing with %v (firing: %v)", name, want, firing[name]))
			}
		}
		if len(pending) == 0 {
			for _, name := range slices.Sorted(maps.Keys(firing)) {
				for _, a := range firing[name] {
					t.Logf("firing: %s %v: %s", name, a.Labels, a.Annotations["summary"])
				}
			}
			t.Logf("all %d alert terms, dashboard queries and variables return series", len(queries))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2 minutes:\n  %s", strings.Join(pending, "\n  "))
		}
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
}
