package bench

import (
	"strings"
	"testing"
)

// A generation is a function of (class, generation): replaying the churn
// reproduces it; and the end-state check sees a stale or missing resource.
func TestConfigChurnDeterministicAndChecked(t *testing.T) {
	topo := Topology{Listeners: 3, Routes: 2, VirtualHosts: 2, Clusters: 6, Endpoints: 2}
	ch := Churn{Pattern: "fraction", Fraction: 0.3, AddRemove: 1}
	a, b := NewConfig("c", topo), NewConfig("c", topo)
	counts := map[int]bool{}
	for range 20 {
		ch.Step(a)
		ch.Step(b)
		counts[len(a.clusters)] = true
	}
	if len(counts) < 2 {
		t.Errorf("20 changes with AddRemove 1 never changed the number of clusters")
	}
	sa, err := ExpectedState(a)
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := ExpectedState(b)
	if d := Diff(sb, sa, 3); d != "" || sa.Digest() != sb.Digest() {
		t.Fatalf("same churn, different generations: %s", d)
	}
	if len(sa[EndpointType]) != len(sa[ClusterType]) || len(sa[RouteType]) != topo.Routes || len(sa[ListenerType]) != topo.Listeners {
		t.Errorf("inconsistent state: %d clusters, %d assignments, %d routes, %d listeners", len(sa[ClusterType]), len(sa[EndpointType]), len(sa[RouteType]), len(sa[ListenerType]))
	}
	ch.Step(b)
	sb, _ = ExpectedState(b)
	d := Diff(sa, sb, 3)
	if d == "" || sa.Digest() == sb.Digest() {
		t.Fatalf("a change went unnoticed")
	}
	delete(sa[ListenerType], listenerName(0))
	if d := Diff(sa, sb, 3); !strings.Contains(d, "Listener missing 1 [listener-0000]") {
		t.Errorf("diff %q does not name the missing listener", d)
	}
	for _, p := range []Churn{{Pattern: "some"}, {Pattern: "fraction"}, {Pattern: "one", AddRemove: 2}} {
		if p.Validate() == nil {
			t.Errorf("churn %+v accepted", p)
		}
	}
}
