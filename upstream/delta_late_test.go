package upstream

import (
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xds-relay/xds-relay/shard"
)

// An answer the upstream sent before it read the unsubscription of the
// type's last name arrives once the class, asked for nothing of the type,
// has freed its table (conformance chain/delta,
// chain-delta-unsubscribed-endpoints-star.json). It must not make a new
// table: what it holds would be kept current by nobody and claimed by no
// version, so, deleted meanwhile, it would be served to the type's next
// wildcard, which the upstream answers without it.
func TestDeltaLateAnswerAfterTypeFreedIsDropped(t *testing.T) {
	srv, addr := startScriptedDelta(t)
	_, class := newDeltaClient(t, addr, Backoff{Initial: time.Hour, Max: time.Hour})
	w := nopWatcher{}
	named := subscribe(t, class, edsType, shard.NewSubscription([]string{"c2"}, false), w)
	ds := srv.next(t)
	wantReq(t, ds.request(t), edsType, []string{"c2"}, nil)
	class.Unsubscribe(named, w)
	wantReq(t, ds.request(t), edsType, nil, []string{"c2"})
	// The answer to +[c2], sent before the upstream read -[c2].
	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: edsType, Nonce: "n1",
		Resources: []*discoverygrpc.Resource{endpoints(t, "c2", "1")}})
	if ack := ds.request(t); ack.GetResponseNonce() != "n1" {
		t.Fatalf("want the ACK of n1, got %v", ack)
	}

	// c2 is deleted; a wildcard after names is asked on a new stream.
	wild := subscribe(t, class, edsType, shard.Subscription{Wildcard: true}, w)
	again := srv.next(t)
	r := again.request(t)
	wantReq(t, r, edsType, []string{"*"}, nil)
	if v := r.GetInitialResourceVersions(); len(v) != 0 {
		t.Fatalf("initial_resource_versions = %v, want none: nothing is held", v)
	}
	again.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: edsType, Nonce: "m1"})
	if ack := again.request(t); ack.GetResponseNonce() != "m1" {
		t.Fatalf("want the ACK of m1, got %v", ack)
	}
	if got := names(wild); len(got) != 0 {
		t.Fatalf("wildcard = %v, want nothing: c2 came in an answer to a request no longer current", got)
	}
}
