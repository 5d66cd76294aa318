package app_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// startRelayWait starts a relay speaking protocol to upstreamAddr with
// delta.parent_removal_wait set to wait.
func startRelayWait(t *testing.T, upstreamAddr, protocol string, wait time.Duration) *app.Relay {
	t.Helper()
	return startRelay(t, upstreamAddr, withConfig(func(cfg *app.Config) {
		cfg.Upstream.Protocol = protocol
		cfg.Delta.ParentRemovalWait = wait
	}))
}

func clustersAndEndpoints(clusterNames, endpointNames []string) map[resource.Type][]types.Resource {
	res := clusters(clusterNames...)
	res[resource.EndpointType] = loadAssignments(endpointNames...)
	return res
}

// nextN takes n responses of a delta client.
func nextN(c *deltaADS, n int) []string {
	c.t.Helper()
	var out []string
	for range n {
		r := c.Next(10 * time.Second)
		out = append(out, fmt.Sprintf("%s %v -%v", shortType(r.GetTypeUrl()), deltaResNames(r), r.GetRemovedResources()))
	}
	return out
}

func shortType(typeURL string) string {
	switch typeURL {
	case resource.ClusterType:
		return "CDS"
	case resource.EndpointType:
		return "EDS"
	}
	return typeURL
}

// TestE2EDeltaEndpointsRemovedBeforeCluster: a relay with a delta upstream
// (go-control-plane's snapshot cache) serves a delta ADS client holding
// clusters and their endpoints. However the control plane orders the two
// removals — the cluster first and its endpoints later, or both in one
// snapshot (go-control-plane then sends them in either order) — the client
// is told of the endpoints' removal before the cluster's (Istio's delta
// client fails otherwise).
func TestE2EDeltaEndpointsRemovedBeforeCluster(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	ab := []string{"a", "b"}
	m.Set(t, "class-a", "v1", clustersAndEndpoints(ab, ab))
	r := startRelayWait(t, m.Addr, "delta", time.Minute)

	c := dialDelta(t, ctx, r.Addr(), "client-1", "class-a")
	c.Subscribe(resource.ClusterType, "*")
	wantDeltaResp(t, c.Next(10*time.Second), resource.ClusterType, ab, nil)
	c.Subscribe(resource.EndpointType, "a", "b")
	wantDeltaResp(t, c.Next(10*time.Second), resource.EndpointType, ab, nil)

	// The cluster first, its endpoints in a later snapshot.
	m.Set(t, "class-a", "v2", clustersAndEndpoints([]string{"a"}, ab))
	m.Set(t, "class-a", "v3", clustersAndEndpoints([]string{"a"}, []string{"a"}))
	want := []string{"EDS [] -[b]", "CDS [] -[b]"}
	if got := nextN(c, 2); !slices.Equal(got, want) {
		t.Fatalf("cluster removed before its endpoints upstream: client got %q, want %q", got, want)
	}

	// Both in one snapshot, several times.
	for i := range 4 {
		m.Set(t, "class-a", fmt.Sprintf("v%d-add", i), clustersAndEndpoints(ab, ab))
		got := nextN(c, 2)
		slices.Sort(got)
		if want := []string{"CDS [b] -[]", "EDS [b] -[]"}; !slices.Equal(got, want) {
			t.Fatalf("round %d: b re-added: client got %q, want %q", i, got, want)
		}
		m.Set(t, "class-a", fmt.Sprintf("v%d-del", i), clustersAndEndpoints([]string{"a"}, []string{"a"}))
		if got := nextN(c, 2); !slices.Equal(got, want) {
			t.Fatalf("round %d: cluster and endpoints removed together: client got %q, want %q", i, got, want)
		}
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestE2EDeltaClusterRemovalNotHeldWithSotWUpstream: from a SotW upstream
// the endpoints' removal is never known (SotW cannot say it), so the
// cluster's removal is not held for it: it reaches the delta client at
// once, not after delta.parent_removal_wait.
func TestE2EDeltaClusterRemovalNotHeldWithSotWUpstream(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	ab := []string{"a", "b"}
	m.Set(t, "class-a", "v1", clustersAndEndpoints(ab, ab))
	r := startRelayWait(t, m.Addr, "sotw", time.Hour)

	c := dialDelta(t, ctx, r.Addr(), "client-1", "class-a")
	c.Subscribe(resource.ClusterType, "*")
	wantDeltaResp(t, c.Next(10*time.Second), resource.ClusterType, ab, nil)
	c.Subscribe(resource.EndpointType, "a", "b")
	wantDeltaResp(t, c.Next(10*time.Second), resource.EndpointType, ab, nil)

	m.Set(t, "class-a", "v2", clustersAndEndpoints([]string{"a"}, []string{"a"}))
	wantDeltaResp(t, c.Next(10*time.Second), resource.ClusterType, nil, []string{"b"})
}
