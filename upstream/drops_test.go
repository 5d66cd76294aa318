package upstream

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/relay/drop"
	"github.com/xds-relay/xds-relay/shard"
)

// The upstream's drop sites, one test per reason. Every deferred reply waits
// an hour, so none is sent while a test runs: what the relay sends next is
// the fence that says it has handled what came before.

// dropsClass starts a client counting drops into the returned Counters,
// with a wildcard CDS shard in class "class-a".
func dropsClass(t *testing.T, addr string, delta bool) *drop.Counters {
	t.Helper()
	drops := &drop.Counters{}
	c, err := New(Config{Address: addr, RelayID: "relay-under-test", Backoff: Backoff{Initial: time.Hour, Max: time.Hour},
		Delta: delta, Drops: drops}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	subscribe(t, attachClass(t, c, &corev3.Node{Id: "downstream-1", Cluster: "class-a"}), shard.ClusterType, shard.Subscription{Wildcard: true}, nopWatcher{})
	return drops
}

// wantDrops checks every reason's count: those in want, and zero for the
// others.
func wantDrops(t *testing.T, drops *drop.Counters, want map[drop.Reason]uint64) {
	t.Helper()
	for _, c := range drops.Snapshot() {
		if c.N != want[c.Reason] {
			t.Errorf("drops %s = %d, want %d", c.Reason, c.N, want[c.Reason])
		}
	}
}

// wantSotWReply checks the relay's next SotW request answers nonce, as a
// NACK or an ACK.
func wantSotWReply(t *testing.T, ss *scriptedStream, nonce string, nack bool) {
	t.Helper()
	r := ss.request(t)
	if r.GetResponseNonce() != nonce || (r.GetErrorDetail() != nil) != nack {
		t.Fatalf("want a reply to %s (NACK %v), got %v", nonce, nack, r)
	}
}

func TestDropsUpstreamRejected(t *testing.T) {
	t.Run("sotw", func(t *testing.T) {
		srv, addr := startScripted(t)
		drops := dropsClass(t, addr, false)
		ss := srv.next(t)
		ss.request(t)
		respondClusters(t, ss, "v1", "n1", "a", "a") // duplicate names
		wantSotWReply(t, ss, "n1", true)
		wantDrops(t, drops, map[drop.Reason]uint64{drop.UpstreamRejected: 1})
	})
	t.Run("delta", func(t *testing.T) {
		srv, addr := startScriptedDelta(t)
		drops := dropsClass(t, addr, true)
		ds := srv.next(t)
		ds.request(t)
		ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: shard.ClusterType, Nonce: "n1",
			Resources: []*discoverygrpc.Resource{cluster(t, "a", "1"), cluster(t, "a", "2")}})
		if r := ds.request(t); r.GetResponseNonce() != "n1" || r.GetErrorDetail() == nil {
			t.Fatalf("want the NACK of n1, got %v", r)
		}
		wantDrops(t, drops, map[drop.Reason]uint64{drop.UpstreamRejected: 1})
	})
}

// A response for a type the stream never subscribed to is dropped
// unanswered: the ACK of the next good response is the fence.
func TestDropsUpstreamUnsubscribed(t *testing.T) {
	t.Run("sotw", func(t *testing.T) {
		srv, addr := startScripted(t)
		drops := dropsClass(t, addr, false)
		ss := srv.next(t)
		ss.request(t)
		ss.send(t, &discoverygrpc.DiscoveryResponse{VersionInfo: "e1", Nonce: "e1", TypeUrl: edsType})
		respondClusters(t, ss, "v1", "n1", "a")
		wantSotWReply(t, ss, "n1", false)
		wantDrops(t, drops, map[drop.Reason]uint64{drop.UpstreamUnsubscribed: 1})
	})
	t.Run("delta", func(t *testing.T) {
		srv, addr := startScriptedDelta(t)
		drops := dropsClass(t, addr, true)
		ds := srv.next(t)
		ds.request(t)
		ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: edsType, Nonce: "e1",
			Resources: []*discoverygrpc.Resource{endpoints(t, "a", "1")}})
		ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: shard.ClusterType, Nonce: "n1",
			Resources: []*discoverygrpc.Resource{cluster(t, "a", "1")}})
		if r := ds.request(t); r.GetResponseNonce() != "n1" || r.GetErrorDetail() != nil {
			t.Fatalf("want the ACK of n1, got %v", r)
		}
		wantDrops(t, drops, map[drop.Reason]uint64{drop.UpstreamUnsubscribed: 1})
	})
}

// The StormRepeats-th identical answer to an ACK is a repeat: its ACK is
// deferred. A different response then supersedes the deferred ACK and is
// ACKed at once.
func TestDropsUpstreamRepeated(t *testing.T) {
	srv, addr := startScripted(t)
	drops := dropsClass(t, addr, false)
	ss := srv.next(t)
	ss.request(t)
	for i := range StormRepeats {
		nonce := string(rune('1' + i))
		respondClusters(t, ss, "v1", nonce, "a", "b")
		wantSotWReply(t, ss, nonce, false)
	}
	respondClusters(t, ss, "v1", "repeat", "b", "a") // the order does not matter
	respondClusters(t, ss, "v2", "new", "a")
	wantSotWReply(t, ss, "new", false)
	wantDrops(t, drops, map[drop.Reason]uint64{drop.UpstreamRepeated: 1, drop.UpstreamReplySuperseded: 1})
}

// A rejected version sent again is NACKed after a delay; a newer response
// supersedes that NACK, and only the newer one is answered.
func TestDropsUpstreamReplySuperseded(t *testing.T) {
	srv, addr := startScripted(t)
	drops := dropsClass(t, addr, false)
	ss := srv.next(t)
	ss.request(t)
	respondClusters(t, ss, "v1", "n1", "a", "a")
	wantSotWReply(t, ss, "n1", true)
	respondClusters(t, ss, "v1", "n2", "a", "a") // NACK deferred
	respondClusters(t, ss, "v2", "n3", "a")
	wantSotWReply(t, ss, "n3", false)
	wantDrops(t, drops, map[drop.Reason]uint64{drop.UpstreamRejected: 2, drop.UpstreamReplySuperseded: 1})
}
