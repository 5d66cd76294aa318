package app_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/upstream"
)

// startDeltaUpstreamClients starts a relay speaking delta to a control plane
// that serves class the clusters named (connect timeout 1s), and a SotW and
// a delta client of the class subscribed to every cluster, each of which
// must get them all.
func startDeltaUpstreamClients(t *testing.T, class string, clusters ...string) (*fixture, *adsClient, *deltaADS) {
	t.Helper()
	var cs []*clusterv3.Cluster
	for _, name := range clusters {
		cs = append(cs, timedCluster(name, 1))
	}
	f := startFixture(t, class, map[resource.Type][]types.Resource{resource.ClusterType: cds(cs...)}, relayAs("relay-delta"), upstreamProtocol("delta"))
	sc := dialADS(t, f.ctx, f.relay.Addr(), "sotw-1", class)
	sc.Subscribe(resource.ClusterType)
	dc := dialDelta(t, f.ctx, f.relay.Addr(), "delta-1", class)
	dc.Subscribe(resource.ClusterType, "*")
	want := slices.Sorted(slices.Values(clusters))
	if got := clusterNames(t, sc.Next(10*time.Second)); !slices.Equal(got, want) {
		t.Fatalf("SotW client: clusters %v, want %v", got, want)
	}
	wantDeltaResp(t, dc.Next(10*time.Second), resource.ClusterType, want, nil)
	return f, sc, dc
}

// TestE2EDeltaUpstreamFanOut serves a SotW and a delta client of one class
// from a relay speaking delta to go-control-plane: each gets the clusters in
// its own protocol, a change of one cluster reaches the delta client as that
// one cluster, a deletion as a removal, and the control plane served one
// delta stream and no SotW stream.
func TestE2EDeltaUpstreamFanOut(t *testing.T) {
	const class = "class-delta-fanout"
	f, sc, dc := startDeltaUpstreamClients(t, class, "a", "b", "c")
	ctx, m, r := f.ctx, f.cp, f.relay

	m.Set(t, class, "v2", map[resource.Type][]types.Resource{resource.ClusterType: cds(timedCluster("a", 1), timedCluster("b", 2), timedCluster("c", 1))})
	wantDeltaResp(t, dc.Next(10*time.Second), resource.ClusterType, []string{"b"}, nil)
	if got := connectTimeouts(t, sc.Next(10*time.Second)); !maps.Equal(got, map[string]int64{"a": 1, "b": 2, "c": 1}) {
		t.Fatalf("SotW client after the change: %v", got)
	}

	m.Set(t, class, "v3", map[resource.Type][]types.Resource{resource.ClusterType: cds(timedCluster("a", 1), timedCluster("b", 2))})
	wantDeltaResp(t, dc.Next(10*time.Second), resource.ClusterType, nil, []string{"c"})
	if got := clusterNames(t, sc.Next(10*time.Second)); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("SotW client after the deletion: clusters %v, want [a b]", got)
	}
	dc.Quiet(200 * time.Millisecond)

	if st := m.Stats(); st.Streams != 0 || st.DeltaStreams != 1 {
		t.Errorf("control plane served %d SotW and %d delta streams, want 0 and 1", st.Streams, st.DeltaStreams)
	}
	first := m.FirstDelta(resource.ClusterType)
	if len(first) != 1 || !slices.Equal(first[0].GetResourceNamesSubscribe(), []string{"*"}) || first[0].GetNode().GetId() != "relay-delta" {
		t.Errorf("control plane's first CDS requests %v, want one wildcard subscription from relay-delta", first)
	}
	oneUpstreamStream(t, ctx, r, class)
}

// TestE2EDeltaUpstreamEDSByName subscribes a delta client to endpoints by
// name through a delta upstream: the relay subscribes the name upstream,
// and a deletion upstream reaches the client as a removal (absence is known
// with a delta upstream).
func TestE2EDeltaUpstreamEDSByName(t *testing.T) {
	ctx := testContext(t)
	const class = "class-delta-eds"
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, class, "v1", map[resource.Type][]types.Resource{
		resource.ClusterType:  cds(edsCluster("a"), edsCluster("b")),
		resource.EndpointType: loadAssignments("a", "b"),
	})
	r := startRelay(t, m.Addr, relayAs("relay-delta"), upstreamProtocol("delta"))
	dc := dialDelta(t, ctx, r.Addr(), "delta-1", class)
	dc.Subscribe(resource.EndpointType, "a")
	wantDeltaResp(t, dc.Next(10*time.Second), resource.EndpointType, []string{"a"}, nil)
	eventually(t, ctx, "the control plane to see the EDS subscription", func() bool {
		return len(m.FirstDelta(resource.EndpointType)) == 1
	})
	if first := m.FirstDelta(resource.EndpointType)[0]; !slices.Equal(first.GetResourceNamesSubscribe(), []string{"a"}) {
		t.Fatalf("relay subscribed upstream with %v, want [a]", first.GetResourceNamesSubscribe())
	}

	m.Set(t, class, "v2", map[resource.Type][]types.Resource{
		resource.ClusterType:  cds(edsCluster("b")),
		resource.EndpointType: loadAssignments("b"),
	})
	wantDeltaResp(t, dc.Next(10*time.Second), resource.EndpointType, nil, []string{"a"})

	dc.Quiet(200 * time.Millisecond)
	if st := m.Stats(); st.Streams != 0 || st.DeltaStreams != 1 {
		t.Errorf("control plane served %d SotW and %d delta streams, want 0 and 1", st.Streams, st.DeltaStreams)
	}
}

// TestE2EDeltaUpstreamUnknownCluster subscribes delta clients by name to a
// cluster that does not exist. go-control-plane never says so of a name
// subscribed by "+[name]" on a live stream: the relay reports it absent once
// shard.PendingGrace has passed. The class's first CDS request claims the
// names it lacks at no version (initial_resource_versions), which
// go-control-plane answers with their removal, so absence is then reported
// as soon as it answers.
func TestE2EDeltaUpstreamUnknownCluster(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first bool // "never" is the class's first CDS interest
	}{{"after-other-names", false}, {"first-cds-request", true}} {
		t.Run(tc.name, func(t *testing.T) {
			class := "class-unknown-" + tc.name
			f := startFixture(t, class, map[resource.Type][]types.Resource{resource.ClusterType: cds(edsCluster("a"))}, relayAs("relay-delta"), upstreamProtocol("delta"))
			ctx, r := f.ctx, f.relay
			dc := dialDelta(t, ctx, r.Addr(), "delta-1", class)
			if !tc.first {
				dc.Subscribe(resource.ClusterType, "a")
				wantDeltaResp(t, dc.Next(10*time.Second), resource.ClusterType, []string{"a"}, nil)
			}
			start := time.Now()
			dc.Subscribe(resource.ClusterType, "never")
			wantDeltaResp(t, dc.Next(shard.PendingGrace+5*time.Second), resource.ClusterType, nil, []string{"never"})
			if tc.first {
				first := f.cp.FirstDelta(resource.ClusterType)
				var claims map[string]string
				if len(first) > 0 {
					claims = first[0].GetInitialResourceVersions()
				}
				if v, ok := claims["never"]; !ok || v != "" || len(claims) != 1 {
					t.Fatalf("the class's first CDS request %v, want \"never\" claimed at no version", first)
				}
			} else if waited := time.Since(start); waited < shard.PendingGrace/2 {
				t.Errorf("absence reported after %v, before the upstream could answer", waited)
			}
		})
	}
}

// TestE2EDeltaUpstreamRestart replaces the control plane by a new one on
// the same address with new configuration: the relay's clients stay
// connected and converge, the delta client by exactly the difference, and
// the relay's first request to the new control plane carries the versions
// of what it holds.
func TestE2EDeltaUpstreamRestart(t *testing.T) {
	const class = "class-delta-restart"
	f, sc, dc := startDeltaUpstreamClients(t, class, "one", "two", "three")
	ctx, m1, r := f.ctx, f.cp, f.relay
	eventually(t, ctx, "the upstream stream to be connected", func() bool {
		return upstreamStatus(t, ctx, r, class).State == upstream.StateConnected
	})

	m1.Stop()
	eventually(t, ctx, "the relay to notice the upstream is gone", func() bool {
		st := upstreamStatus(t, ctx, r, class)
		return st.State != upstream.StateConnected && st.Reconnects > 0
	})
	m2 := startMgmt(t, m1.Addr)
	m2.Set(t, class, "v2", map[resource.Type][]types.Resource{resource.ClusterType: cds(timedCluster("one", 1), timedCluster("two", 2), timedCluster("four", 1))})

	if got := connectTimeouts(t, sc.Next(20*time.Second)); !maps.Equal(got, map[string]int64{"one": 1, "two": 2, "four": 1}) {
		t.Fatalf("SotW client after the restart: %v", got)
	}
	wantDeltaResp(t, dc.Next(10*time.Second), resource.ClusterType, []string{"four", "two"}, []string{"three"})
	dc.Quiet(200 * time.Millisecond)
	if err := sc.Err(); err != nil {
		t.Fatalf("SotW client stream ended: %v", err)
	}

	first := m2.FirstDelta(resource.ClusterType)
	if len(first) != 1 {
		t.Fatalf("new control plane saw %d CDS delta streams, want 1", len(first))
	}
	got := slices.Sorted(maps.Keys(first[0].GetInitialResourceVersions()))
	if !slices.Equal(got, []string{"one", "three", "two"}) || !slices.Equal(first[0].GetResourceNamesSubscribe(), []string{"*"}) {
		t.Errorf("first request to the new control plane: subscribe %v initial_resource_versions %v, want * with versions of [one three two]",
			first[0].GetResourceNamesSubscribe(), first[0].GetInitialResourceVersions())
	}
	for n, v := range first[0].GetInitialResourceVersions() {
		if v == "" {
			t.Errorf("initial_resource_versions[%q] is empty", n)
		}
	}
	// The versions were the control plane's own: it sent only the difference.
	if got, want := m2.Sent(), []string{resource.ClusterType + ": [four two] -[three]"}; !slices.Equal(got, want) {
		t.Errorf("new control plane sent %q, want %q", got, want)
	}
	if st := m2.Stats(); st.Streams != 0 || st.DeltaStreams != 1 {
		t.Errorf("new control plane served %d SotW and %d delta streams, want 0 and 1", st.Streams, st.DeltaStreams)
	}
	if s := r.Server().Streams(0); len(s) != 2 {
		t.Errorf("relay has %d downstream streams after the restart, want the same 2", len(s))
	}
}

// TestE2EDeltaRelayChains chains client → relay1 → relay2 → relay3 →
// go-control-plane with each hop's upstream protocol set per case. The client
// gets the initial state and a later change of one cluster among several
// (a delta client exactly that one), and every relay has exactly one
// upstream stream for the class, which the next hop serves as its only
// downstream stream, in the protocol chosen.
func TestE2EDeltaRelayChains(t *testing.T) {
	for _, tc := range []struct {
		name        string
		protos      [3]string // upstream protocol of relay1, relay2, relay3
		deltaClient bool
	}{
		{"all-sotw", [3]string{"sotw", "sotw", "sotw"}, false},
		{"all-delta", [3]string{"delta", "delta", "delta"}, true},
		{"mixed-delta-client", [3]string{"delta", "sotw", "delta"}, true},
		{"mixed-sotw-client", [3]string{"delta", "sotw", "delta"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) { testChain(t, tc.protos, tc.deltaClient) })
	}
}

func testChain(t *testing.T, protos [3]string, deltaClient bool) {
	ctx := testContext(t)
	const class = "class-chain"
	m := startMgmt(t, "127.0.0.1:0")
	snap := func(b int) map[resource.Type][]types.Resource {
		return map[resource.Type][]types.Resource{resource.ClusterType: cds(
			timedCluster("a", 1), timedCluster("b", b), timedCluster("c", 1), timedCluster("d", 1), timedCluster("e", 1))}
	}
	m.Set(t, class, "v1", snap(1))
	relays := make([]*app.Relay, 3)
	up := m.Addr
	for i := 2; i >= 0; i-- {
		relays[i] = startRelay(t, up, relayAs(fmt.Sprintf("relay-%d", i+1)), upstreamProtocol(protos[i]))
		up = relays[i].Addr()
	}
	all := []string{"a", "b", "c", "d", "e"}
	if deltaClient {
		dc := dialDelta(t, ctx, relays[0].Addr(), "client-1", class)
		dc.Subscribe(resource.ClusterType, "*")
		wantDeltaResp(t, dc.Next(10*time.Second), resource.ClusterType, all, nil)
		m.Set(t, class, "v2", snap(2))
		resp := dc.Next(10 * time.Second)
		wantDeltaResp(t, resp, resource.ClusterType, []string{"b"}, nil)
		if len(resp.GetResources()) != 1 {
			t.Fatalf("change: %d resources, want exactly 1", len(resp.GetResources()))
		}
		dc.Quiet(300 * time.Millisecond)
	} else {
		sc := dialADS(t, ctx, relays[0].Addr(), "client-1", class)
		sc.Subscribe(resource.ClusterType)
		if got := clusterNames(t, sc.Next(10*time.Second)); !slices.Equal(got, all) {
			t.Fatalf("initial clusters %v, want %v", got, all)
		}
		m.Set(t, class, "v2", snap(2))
		want := map[string]int64{"a": 1, "b": 2, "c": 1, "d": 1, "e": 1}
		if got := connectTimeouts(t, sc.Next(10*time.Second)); !maps.Equal(got, want) {
			t.Fatalf("after the change %v, want %v", got, want)
		}
	}

	for i, r := range relays {
		oneUpstreamStream(t, ctx, r, class)
		// The next hop serves this relay's stream as its only one.
		var down []string
		if i < 2 {
			for _, s := range relays[i+1].Server().Streams(0) {
				down = append(down, s.Node+"/"+s.Class+"/"+s.Variant)
			}
			variant := "sotw-ads"
			if protos[i] == "delta" {
				variant = "delta-ads"
			}
			if want := []string{fmt.Sprintf("relay-%d/%s/%s", i+1, class, variant)}; !slices.Equal(down, want) {
				t.Errorf("relay-%d's downstream streams %v, want %v", i+2, down, want)
			}
		}
	}
	st := m.Stats()
	sotw, delta := st.Streams, st.DeltaStreams
	if protos[2] == "delta" && (sotw != 0 || delta != 1) || protos[2] == "sotw" && (sotw != 1 || delta != 0) {
		t.Errorf("control plane served %d SotW and %d delta streams to a %s relay-3, want 1 of that protocol", sotw, delta, protos[2])
	}
}

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
	case resource.RouteType:
		return "RDS"
	case resource.ListenerType:
		return "LDS"
	}
	return typeURL
}

// holdClustersAndEndpoints starts a control plane serving clusters a and b
// and their endpoints to class-a, a relay speaking protocol to it with
// delta.parent_removal_wait set to wait, and a delta client of class-a
// holding the clusters (the wildcard) and the endpoints (by name).
func holdClustersAndEndpoints(t *testing.T, protocol string, wait time.Duration) (*controlPlane, *deltaADS) {
	t.Helper()
	m := startMgmt(t, "127.0.0.1:0")
	ab := []string{"a", "b"}
	m.Set(t, "class-a", "v1", clustersAndEndpoints(ab, ab))
	r := startRelayWait(t, m.Addr, protocol, wait)

	c := dialDelta(t, testContext(t), r.Addr(), "client-1", "class-a")
	c.Subscribe(resource.ClusterType, "*")
	wantDeltaResp(t, c.Next(10*time.Second), resource.ClusterType, ab, nil)
	c.Subscribe(resource.EndpointType, "a", "b")
	wantDeltaResp(t, c.Next(10*time.Second), resource.EndpointType, ab, nil)
	return m, c
}

// TestE2EDeltaEndpointsRemovedBeforeCluster: a relay with a delta upstream
// (go-control-plane's snapshot cache) serves a delta ADS client holding
// clusters and their endpoints. However the control plane orders the two
// removals — the cluster first and its endpoints later, or both in one
// snapshot (go-control-plane then sends them in either order) — the client
// is told of the endpoints' removal before the cluster's (Istio's delta
// client fails otherwise).
func TestE2EDeltaEndpointsRemovedBeforeCluster(t *testing.T) {
	m, c := holdClustersAndEndpoints(t, "delta", time.Minute)
	ab := []string{"a", "b"}

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
	m, c := holdClustersAndEndpoints(t, "sotw", time.Hour)

	m.Set(t, "class-a", "v2", clustersAndEndpoints([]string{"a"}, []string{"a"}))
	wantDeltaResp(t, c.Next(10*time.Second), resource.ClusterType, nil, []string{"b"})
}
