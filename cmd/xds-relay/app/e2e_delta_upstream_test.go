package app_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/upstream"
)

// TestE2EDeltaUpstreamFanOut serves a SotW and a delta client of one class
// from a relay speaking delta to go-control-plane: each gets the clusters in
// its own protocol, a change of one cluster reaches the delta client as that
// one cluster, a deletion as a removal, and the control plane served one
// delta stream and no SotW stream.
func TestE2EDeltaUpstreamFanOut(t *testing.T) {
	ctx := testContext(t)
	const class = "class-delta-fanout"
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, class, "v1", map[resource.Type][]types.Resource{resource.ClusterType: cds(timedCluster("a", 1), timedCluster("b", 1), timedCluster("c", 1))})
	r := startRelay(t, m.Addr, relayAs("relay-delta"), upstreamProtocol("delta"))

	sc := dialADS(t, ctx, r.Addr(), "sotw-1", class)
	sc.Subscribe(resource.ClusterType)
	dc := dialDelta(t, ctx, r.Addr(), "delta-1", class)
	dc.Subscribe(resource.ClusterType, "*")
	if got := clusterNames(t, sc.Next(10*time.Second)); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("SotW client: clusters %v, want [a b c]", got)
	}
	wantDeltaResp(t, dc.Next(10*time.Second), resource.ClusterType, []string{"a", "b", "c"}, nil)

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
// cluster that does not exist. go-control-plane never says so over delta; the
// relay must report it absent once shard.PendingGrace has passed, whether or
// not the class already had CDS interest.
func TestE2EDeltaUpstreamUnknownCluster(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first bool // "never" is the class's first CDS interest
	}{{"after-other-names", false}, {"first-cds-request", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			class := "class-unknown-" + tc.name
			m := startMgmt(t, "127.0.0.1:0")
			m.Set(t, class, "v1", map[resource.Type][]types.Resource{resource.ClusterType: cds(edsCluster("a"))})
			r := startRelay(t, m.Addr, relayAs("relay-delta"), upstreamProtocol("delta"))
			dc := dialDelta(t, ctx, r.Addr(), "delta-1", class)
			if !tc.first {
				dc.Subscribe(resource.ClusterType, "a")
				wantDeltaResp(t, dc.Next(10*time.Second), resource.ClusterType, []string{"a"}, nil)
			}
			start := time.Now()
			dc.Subscribe(resource.ClusterType, "never")
			wantDeltaResp(t, dc.Next(shard.PendingGrace+5*time.Second), resource.ClusterType, nil, []string{"never"})
			if waited := time.Since(start); waited < shard.PendingGrace/2 {
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
	ctx := testContext(t)
	const class = "class-delta-restart"
	m1 := startMgmt(t, "127.0.0.1:0")
	m1.Set(t, class, "v1", map[resource.Type][]types.Resource{resource.ClusterType: cds(timedCluster("one", 1), timedCluster("two", 1), timedCluster("three", 1))})
	r := startRelay(t, m1.Addr, relayAs("relay-delta"), upstreamProtocol("delta"))
	sc := dialADS(t, ctx, r.Addr(), "sotw-1", class)
	sc.Subscribe(resource.ClusterType)
	dc := dialDelta(t, ctx, r.Addr(), "delta-1", class)
	dc.Subscribe(resource.ClusterType, "*")
	if got := clusterNames(t, sc.Next(10*time.Second)); !slices.Equal(got, []string{"one", "three", "two"}) {
		t.Fatalf("SotW client: clusters %v", got)
	}
	wantDeltaResp(t, dc.Next(10*time.Second), resource.ClusterType, []string{"one", "three", "two"}, nil)
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
