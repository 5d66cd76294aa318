package app_test

import (
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// classLabelValues are the class label values of /metrics' series.
func classLabelValues(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^xds_relay_[a-z_]+\{[^}]*class="([^"]*)"`).FindAllSubmatch(body, -1) {
		if l := string(m[1]); !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

// Throwaway classes give their class label values back when they are
// dropped (after node_classes.linger), and their series leave /metrics; a
// real class coming later gets a label of its own. Before, the first
// limits.max_metric_classes names kept their series and values for good,
// and every later class was "other".
func TestE2EMetricClassLabelsFreed(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	tmp := []string{"tmp-0", "tmp-1", "tmp-2", "tmp-3"}
	for _, c := range append(slices.Clone(tmp), "real") {
		m.Set(t, c, "v1", clusters(c))
	}
	r := startRelay(t, m.Addr, relayAs("relay-labels"), withConfig(func(c *app.Config) {
		c.NodeClasses.Linger = 50 * time.Millisecond
		c.Limits.MaxMetricClasses = 3
	}))
	url := "http://" + r.AdminAddr() + "/metrics"
	labelsNow := func() []string {
		body, _ := get(t, ctx, url)
		return classLabelValues(t, body)
	}

	var clients []*adsClient
	for i, class := range tmp {
		c := dialADS(t, ctx, r.Addr(), fmt.Sprintf("tmp-node-%d", i), class)
		c.Subscribe(resource.ClusterType)
		c.Next(10 * time.Second)
		clients = append(clients, c)
	}
	want := []string{"other", "tmp-0", "tmp-1", "tmp-2"} // three values, the fourth class folded
	var got []string
	if !poll(ctx, func() bool { got = labelsNow(); return slices.Equal(got, want) }) {
		t.Fatalf("class label values %v, want %v", got, want)
	}
	for _, c := range clients {
		c.Close()
	}
	eventually(t, ctx, "the throwaway classes dropped", func() bool {
		classes, _ := r.Registry().Counts()
		return classes == 0
	})
	if !poll(ctx, func() bool { got = labelsNow(); return slices.Equal(got, []string{"other"}) }) {
		t.Fatalf("after the throwaway classes left, class label values %v, want [other]", got)
	}

	real := dialADS(t, ctx, r.Addr(), "real-node", "real")
	real.Subscribe(resource.ClusterType)
	real.Next(10 * time.Second)
	if !poll(ctx, func() bool { got = labelsNow(); return slices.Contains(got, "real") }) {
		t.Fatalf("a class after the throwaway ones: class label values %v, want real among them", got)
	}
}
