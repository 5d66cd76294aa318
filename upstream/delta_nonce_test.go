package upstream

import (
	"testing"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// TestDeltaSubscriptionChangesCarryNoNonce: a delta request that is not an
// ACK or NACK carries no response_nonce (spec). istiod ignores a request
// whose nonce is not the latest it sent, so a subscription change carrying
// an older nonce can be lost during a push (issue 11, item 6).
func TestDeltaSubscriptionChangesCarryNoNonce(t *testing.T) {
	w := nopWatcher{}
	_, class, _, ds := startDeltaCDS(t, w)
	wantReq(t, ds.request(t), xdstype.Cluster.URL, []string{"*"}, nil)
	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, Nonce: "n1", SystemVersionInfo: "v1",
		Resources: []*discoverygrpc.Resource{cluster(t, "a", "1")}})
	if ack := ds.request(t); ack.GetResponseNonce() != "n1" {
		t.Fatalf("ACK = %v, want nonce n1", ack)
	}

	// Subscription changes of the type answered, and of another type.
	eds := subscribe(t, class, edsType, shard.NewSubscription([]string{"a"}, false), w)
	r := ds.request(t)
	wantReq(t, r, edsType, []string{"a"}, nil)
	if r.GetResponseNonce() != "" {
		t.Fatalf("subscription change %v carries a nonce", r)
	}
	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: edsType, Nonce: "n2", Resources: []*discoverygrpc.Resource{endpoints(t, "a", "1")}})
	if ack := ds.request(t); ack.GetResponseNonce() != "n2" {
		t.Fatalf("ACK = %v, want nonce n2", ack)
	}
	class.Unsubscribe(eds, w)
	r = ds.request(t)
	wantReq(t, r, edsType, nil, []string{"a"})
	if r.GetResponseNonce() != "" {
		t.Fatalf("unsubscription %v carries a nonce", r)
	}
	named := subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"b"}, false), w)
	r = ds.request(t)
	wantReq(t, r, xdstype.Cluster.URL, []string{"b"}, nil)
	if r.GetResponseNonce() != "" {
		t.Fatalf("subscription change %v carries a nonce", r)
	}
	class.Unsubscribe(named, w)
	if r = ds.request(t); r.GetResponseNonce() != "" {
		t.Fatalf("unsubscription %v carries a nonce", r)
	}
}
