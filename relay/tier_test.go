package relay

import (
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/upstream"
)

// midRelay is a relay whose classes are fed by the real upstream client
// from top.
func midRelay(t *testing.T, top *harness) *harness {
	t.Helper()
	up, err := upstream.New(upstream.Config{Address: top.addr, RelayID: "relay-mid",
		Backoff: upstream.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	mid := newHarnessWith(t, up.Attach)
	t.Cleanup(func() { _ = up.Close() })
	return mid
}

// Two tiers: a relay ("mid") whose class is fed by the real upstream client
// from another relay ("top", fed by Apply, standing in for the control
// plane). An Envoy-like client (legacy wildcard CDS) disconnects and comes
// back with the version it holds, nothing having changed upstream. It must
// not be told that every cluster is gone, and the mid relay must still hold
// the clusters.
func TestTwoTierReconnectKeepsClusters(t *testing.T) {
	top := newHarness(t)
	abc := top.applyClusters(t, 1, "A", "B", "C")

	mid := midRelay(t, top)

	first := mid.ads(t)
	first.subscribe(ClusterType)
	r := first.ackNext(ClusterType, abc...)
	first.fence()
	first.close()
	eventually(t, "the first stream's shards released", func() bool { return len(mid.shards(ClusterType)) == 0 })

	again := mid.ads(t)
	again.send(&request{Node: mid.node, TypeUrl: ClusterType, VersionInfo: r.VersionInfo})
	select {
	case got := <-again.ch:
		if got.err != nil {
			t.Fatal(got.err)
		}
		if len(got.resp.Resources) != 3 {
			t.Errorf("reconnected client got CDS %v (version %s), want nothing or [A B C]", names(t, got.resp), got.resp.VersionInfo)
		}
	case <-time.After(time.Second):
	}
	again.expectNothing(quietWindow) // no late repair either
	for _, ts := range mid.class.Status() {
		if ts.TypeURL == ClusterType && ts.Resources != 3 {
			t.Errorf("mid relay holds %d clusters after the reconnect, want 3 (upstream unchanged); "+
				"top relay pushed CDS to it %d time(s)", ts.Resources, top.typeStatus(t, ClusterType).Pushes)
		}
	}
}

// The same with a client that names its cluster (as gRPC clients do): after
// it leaves, the mid relay tells its upstream it no longer needs A and drops
// it; when the client comes back asking for A, the relay must not answer
// with a Cluster response lacking A (full state: that deletes A, or makes a
// new client conclude A does not exist) before its upstream has answered.
func TestTwoTierReconnectNamedCluster(t *testing.T) {
	top := newHarness(t)
	a := resource(t, ClusterType, "A", 1)
	top.apply(ClusterType, true, a, resource(t, ClusterType, "B", 1))

	mid := midRelay(t, top)

	first := mid.ads(t)
	first.subscribe(ClusterType, "A")
	r := first.ackNext(ClusterType, a)
	first.fence()
	first.close()
	eventually(t, "the mid relay to drop A", func() bool {
		for _, ts := range mid.class.Status() {
			if ts.TypeURL == ClusterType {
				return ts.Resources == 0
			}
		}
		return true // the emptied table was freed
	})

	again := mid.ads(t)
	again.send(&request{Node: mid.node, TypeUrl: ClusterType, VersionInfo: r.VersionInfo, ResourceNames: []string{"A"}})
	got := again.nextOf(ClusterType)
	if len(got.Resources) != 1 {
		t.Fatalf("client asking for A got CDS %v (version %s) before the upstream answered, want [A]", names(t, got), got.VersionInfo)
	}
	wantResources(t, got, a)
}
