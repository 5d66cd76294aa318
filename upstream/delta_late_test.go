package upstream

import (
	"maps"
	"slices"
	"strconv"
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
	answerAcked(t, ds, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: edsType, Nonce: "n1",
		Resources: []*discoverygrpc.Resource{endpoints(t, "c2", "1")}})

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

// A name unsubscribed and wanted again is not asked for by "+[name]" on the
// stream that unsubscribed it (conformance snapshot-ads/delta,
// snapshot-ads-delta-deleted-route-held.json). An answer the upstream sent
// before it read "-[name]" can arrive after "+[name]" went, and would be
// taken for its answer; go-control-plane forgot what it sent at the
// unsubscription, so when the resource was deleted meanwhile it answers
// "+[name]" with nothing, and the relay would serve the deleted resource
// for ever. The name is asked for on a new stream instead, which the old
// stream's answers never reach.
func TestDeltaResubscriptionCrossedByAnAnswerIsAskedOnANewStream(t *testing.T) {
	srv, addr := startScriptedDelta(t)
	c, class := newDeltaClient(t, addr, Backoff{Initial: time.Hour, Max: time.Hour})
	w := nopWatcher{}
	both := subscribe(t, class, edsType, shard.NewSubscription([]string{"c1", "c2"}, false), w)
	ds := srv.next(t)
	wantReq(t, ds.request(t), edsType, []string{"c1", "c2"}, nil)
	answerAcked(t, ds, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: edsType, Nonce: "n1",
		Resources: []*discoverygrpc.Resource{endpoints(t, "c1", "1"), endpoints(t, "c2", "1")}})
	c2 := subscribe(t, class, edsType, shard.NewSubscription([]string{"c2"}, false), w)
	class.Unsubscribe(both, w)
	wantReq(t, ds.request(t), edsType, nil, []string{"c1"})
	// A fence: the relay ACKs an answer after it recorded -[c1] (and the
	// class dropped c1).
	answerAcked(t, ds, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: edsType, Nonce: "n2",
		Resources: []*discoverygrpc.Resource{endpoints(t, "c2", "2")}})
	// The upstream changed c1 and sent it, before it read -[c1]; then c1
	// was deleted. The answer is still on its way when c1 is wanted again.
	crossing := &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: edsType, Nonce: "n3",
		Resources: []*discoverygrpc.Resource{endpoints(t, "c1", "2")}}
	c1 := subscribe(t, class, edsType, shard.NewSubscription([]string{"c1"}, false), w)

	var again *deltaStream
	select {
	case again = <-srv.streams:
	case r, ok := <-ds.reqs:
		if !ok { // the relay ended the stream: the new one is next
			again = srv.next(t)
			break
		}
		wantReq(t, r, edsType, []string{"c1"}, nil)
		answerAcked(t, ds, crossing)
		t.Fatalf("c1 asked for again by +[c1] on the stream that unsubscribed it: [c1] = %v, served from an answer sent before -[c1] was read, and no deletion will follow", names(c1))
	case <-time.After(10 * time.Second):
		t.Fatal("neither a request nor a new stream")
	}
	_ = ds.st.Send(crossing) // the old stream: nothing reads it any more
	r := again.request(t)
	wantReq(t, r, edsType, []string{"c1", "c2"}, nil)
	if got, want := r.GetInitialResourceVersions(), map[string]string{"c1": "", "c2": "2"}; !maps.Equal(got, want) {
		t.Fatalf("initial_resource_versions = %v, want %v: the class holds c2 alone (c1 claimed at no version)", got, want)
	}
	if st := c.Status()[0]; st.Reconnects != 0 || st.Restarts != (RestartCounts{Resubscribe: 1}) {
		t.Fatalf("status: %d reconnects, restarts %+v; want none and one resubscribe restart", st.Reconnects, st.Restarts)
	}
	// c1 does not exist: the new stream answers with c2's change alone.
	answerAcked(t, again, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: edsType, Nonce: "m1",
		Resources: []*discoverygrpc.Resource{endpoints(t, "c2", "3")}})
	if got := names(c1); len(got) != 0 {
		t.Fatalf("[c1] = %v, want nothing: c1 came only in the old stream's answer", got)
	}
	if got := names(c2); !slices.Equal(got, []string{"c2"}) {
		t.Fatalf("[c2] = %v, want [c2]", got)
	}
}

// A stream that unsubscribed more than maxUnsubscribed names of a type
// within resubscribeWindow forgets them by a restart: what it remembers is
// bounded. Names unsubscribed longer ago are forgotten, and subscribed
// again on the stream.
func TestDeltaUnsubscribedNamesBounded(t *testing.T) {
	var ts deltaTypeState
	now := time.Now()
	unsub := make([]string, 0, maxUnsubscribed+1)
	for i := range maxUnsubscribed {
		unsub = append(unsub, "n"+strconv.Itoa(i))
	}
	if ts.unsubscribe(append(unsub, shard.Wildcard), now) {
		t.Fatalf("%d names overflow, want them kept", maxUnsubscribed)
	}
	if name, again := ts.resubscribes(shard.NewSubscription([]string{"n7", "x"}, false), false, now); !again || name != "n7" {
		t.Fatalf("resubscribes = %q, %v; want n7", name, again)
	}
	if _, again := ts.resubscribes(shard.Subscription{Wildcard: true, Names: []string{"n7"}}, false, now); again {
		t.Fatal("a wildcard subscription resubscribes, want not: it keeps every name current")
	}
	if !ts.unsubscribe([]string{"one-more"}, now) {
		t.Fatalf("%d names do not overflow, want a restart", maxUnsubscribed+1)
	}
	later := now.Add(resubscribeWindow)
	if _, again := ts.resubscribes(shard.NewSubscription([]string{"n8"}, false), false, later); again {
		t.Fatal("a name unsubscribed resubscribeWindow ago resubscribes, want it asked on the stream")
	}
	if ts.unsubscribe([]string{"late"}, later) || len(ts.unsubscribed) != 1 {
		t.Fatalf("after the window, %d names remembered, want only the one just unsubscribed", len(ts.unsubscribed))
	}
}

// answerAcked sends resp on ds and waits for the relay's ACK of it: the
// relay has installed it.
func answerAcked(t *testing.T, ds *deltaStream, resp *discoverygrpc.DeltaDiscoveryResponse) {
	t.Helper()
	ds.send(t, resp)
	if ack := ds.request(t); ack.GetResponseNonce() != resp.GetNonce() {
		t.Fatalf("want the ACK of %s, got %v", resp.GetNonce(), ack)
	}
}
