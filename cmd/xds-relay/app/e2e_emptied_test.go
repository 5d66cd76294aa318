package app_test

import (
	"slices"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/bench/xdstest"
)

// istiodState is clusters cs and, for each name of eps, its assignment:
// with an endpoint, or emptied (no endpoints) when empty[name].
func istiodState(cs, eps []string, empty map[string]bool) map[resource.Type][]types.Resource {
	res := clusters(cs...)
	for _, n := range eps {
		a := xdstest.Resource(xdstest.EndpointType, n, 1)
		if empty[n] {
			a = &endpointv3.ClusterLoadAssignment{ClusterName: n}
		}
		res[resource.EndpointType] = append(res[resource.EndpointType], a)
	}
	return res
}

// TestE2EDeltaEmptiedAssignmentReleasesClusterRemoval: go-control-plane as
// a delta upstream, with istiod's habit: a service's Cluster is removed,
// then its ClusterLoadAssignment is emptied, never removed. A delta client
// holding both learns of the Cluster's removal right after the emptied
// assignment, not after delta.parent_removal_wait (an hour: a held
// removal never arrives within the test's wait).
func TestE2EDeltaEmptiedAssignmentReleasesClusterRemoval(t *testing.T) {
	m := startMgmt(t, "127.0.0.1:0")
	ab := []string{"a", "b"}
	m.Set(t, "class-a", "v1", istiodState(ab, ab, nil))
	r := startRelayWait(t, m.Addr, "delta", time.Hour)
	c := dialDelta(t, testContext(t), r.Addr(), "client-1", "class-a")
	c.Subscribe(resource.ClusterType, "*")
	wantDeltaResp(t, c.Next(10*time.Second), resource.ClusterType, ab, nil)
	c.Subscribe(resource.EndpointType, "a", "b")
	wantDeltaResp(t, c.Next(10*time.Second), resource.EndpointType, ab, nil)

	// b's Cluster goes (c comes in the same response: once the client has
	// c, the relay holds b's removal), then b's assignment is emptied.
	m.Set(t, "class-a", "v2", istiodState([]string{"a", "c"}, ab, nil))
	if got, want := nextN(c, 1), []string{"CDS [c] -[]"}; !slices.Equal(got, want) {
		t.Fatalf("b's cluster removed, c added: client got %q, want %q (b's removal held for its endpoints)", got, want)
	}
	set := time.Now()
	m.Set(t, "class-a", "v3", istiodState([]string{"a", "c"}, ab, map[string]bool{"b": true}))
	if got, want := nextN(c, 2), []string{"EDS [b] -[]", "CDS [] -[b]"}; !slices.Equal(got, want) {
		t.Fatalf("b's assignment emptied after its cluster went: client got %q, want %q", got, want)
	}
	t.Logf("b's removal reached the client %v after its assignment was emptied", time.Since(set))
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
}
