package upstream

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/drop"
	"github.com/xds-relay/xds-relay/shard/xdstype"
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
	subscribe(t, attachClass(t, c, &corev3.Node{Id: "downstream-1", Cluster: "class-a"}), xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, nopWatcher{})
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

// dropsStream attaches a client counting drops to the scripted upstream at
// addr, and reads the first request of the stream it opens.
func dropsStream[Req, Resp any](t *testing.T, streams <-chan *scripted[Req, Resp], addr string, delta bool) (*scripted[Req, Resp], *drop.Counters) {
	t.Helper()
	drops := dropsClass(t, addr, delta)
	ss := nextScripted(t, streams)
	ss.request(t)
	return ss, drops
}

func sotwDrops(t *testing.T) (*scriptedStream, *drop.Counters) {
	srv, addr := startScripted(t)
	return dropsStream(t, srv.streams, addr, false)
}

func deltaDrops(t *testing.T) (*deltaStream, *drop.Counters) {
	srv, addr := startScriptedDelta(t)
	return dropsStream(t, srv.streams, addr, true)
}

// wantReply checks a request of the relay answers nonce, as a NACK or an
// ACK.
func wantReply(t *testing.T, r interface {
	GetResponseNonce() string
	GetErrorDetail() *status.Status
}, nonce string, nack bool) {
	t.Helper()
	if r.GetResponseNonce() != nonce || (r.GetErrorDetail() != nil) != nack {
		t.Fatalf("want a reply to %s (NACK %v), got %v", nonce, nack, r)
	}
}

func TestDropsUpstreamRejected(t *testing.T) {
	t.Run("sotw", func(t *testing.T) {
		ss, drops := sotwDrops(t)
		respondClusters(t, ss, "v1", "n1", "a", "a") // duplicate names
		wantReply(t, ss.request(t), "n1", true)
		wantDrops(t, drops, map[drop.Reason]uint64{drop.UpstreamRejected: 1})
	})
	t.Run("delta", func(t *testing.T) {
		ds, drops := deltaDrops(t)
		ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, Nonce: "n1",
			Resources: []*discoverygrpc.Resource{cluster(t, "a", "1"), cluster(t, "a", "2")}})
		wantReply(t, ds.request(t), "n1", true)
		wantDrops(t, drops, map[drop.Reason]uint64{drop.UpstreamRejected: 1})
	})
}

// A response for a type the stream never subscribed to is dropped
// unanswered: the ACK of the next good response is the fence.
func TestDropsUpstreamUnsubscribed(t *testing.T) {
	t.Run("sotw", func(t *testing.T) {
		ss, drops := sotwDrops(t)
		ss.send(t, &discoverygrpc.DiscoveryResponse{VersionInfo: "e1", Nonce: "e1", TypeUrl: edsType})
		respondClusters(t, ss, "v1", "n1", "a")
		wantReply(t, ss.request(t), "n1", false)
		wantDrops(t, drops, map[drop.Reason]uint64{drop.UpstreamUnsubscribed: 1})
	})
	t.Run("delta", func(t *testing.T) {
		ds, drops := deltaDrops(t)
		ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: edsType, Nonce: "e1",
			Resources: []*discoverygrpc.Resource{endpoints(t, "a", "1")}})
		ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, Nonce: "n1",
			Resources: []*discoverygrpc.Resource{cluster(t, "a", "1")}})
		wantReply(t, ds.request(t), "n1", false)
		wantDrops(t, drops, map[drop.Reason]uint64{drop.UpstreamUnsubscribed: 1})
	})
}

// The StormRepeats-th identical answer to an ACK is a repeat: its ACK is
// deferred. A different response then supersedes the deferred ACK and is
// ACKed at once.
func TestDropsUpstreamRepeated(t *testing.T) {
	ss, drops := sotwDrops(t)
	for i := range StormRepeats {
		nonce := string(rune('1' + i))
		respondClusters(t, ss, "v1", nonce, "a", "b")
		wantReply(t, ss.request(t), nonce, false)
	}
	respondClusters(t, ss, "v1", "repeat", "b", "a") // the order does not matter
	respondClusters(t, ss, "v2", "new", "a")
	wantReply(t, ss.request(t), "new", false)
	wantDrops(t, drops, map[drop.Reason]uint64{drop.UpstreamRepeated: 1, drop.UpstreamReplySuperseded: 1})
}

// A rejected version sent again is NACKed after a delay; a newer response
// supersedes that NACK, and only the newer one is answered.
func TestDropsUpstreamReplySuperseded(t *testing.T) {
	ss, drops := sotwDrops(t)
	respondClusters(t, ss, "v1", "n1", "a", "a")
	wantReply(t, ss.request(t), "n1", true)
	respondClusters(t, ss, "v1", "n2", "a", "a") // NACK deferred
	respondClusters(t, ss, "v2", "n3", "a")
	wantReply(t, ss.request(t), "n3", false)
	wantDrops(t, drops, map[drop.Reason]uint64{drop.UpstreamRejected: 2, drop.UpstreamReplySuperseded: 1})
}
