package upstream

import (
	"maps"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/drop"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// fastBackoff reconnects at once.
var fastBackoff = Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}

// firstRequests reads the first request of each of n types on a new
// stream, by type URL.
func firstRequests(t *testing.T, ds *deltaStream, n int) map[string]*discoverygrpc.DeltaDiscoveryRequest {
	t.Helper()
	out := map[string]*discoverygrpc.DeltaDiscoveryRequest{}
	for len(out) < n {
		r := ds.request(t)
		if _, dup := out[r.GetTypeUrl()]; dup {
			t.Fatalf("second %s request %v before the first of every type", r.GetTypeUrl(), r)
		}
		out[r.GetTypeUrl()] = r
	}
	return out
}

func TestDeltaReconnectSendsInitialResourceVersions(t *testing.T) {
	srv, addr := startScriptedDelta(t)
	c, class := newDeltaClient(t, addr, fastBackoff)
	w := nopWatcher{}
	cds := subscribe(t, class, xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, w)
	ds := srv.next(t)
	wantReq(t, ds.request(t), xdstype.Cluster.URL, []string{"*"}, nil)
	eds := subscribe(t, class, edsType, shard.NewSubscription([]string{"x", "y"}, false), w)
	wantReq(t, ds.request(t), edsType, []string{"x", "y"}, nil)

	for _, resp := range []*discoverygrpc.DeltaDiscoveryResponse{
		{TypeUrl: xdstype.Cluster.URL, Nonce: "n1", Resources: []*discoverygrpc.Resource{cluster(t, "a", "a1"), cluster(t, "b", "b1"), cluster(t, "c", "c1")}},
		{TypeUrl: xdstype.Cluster.URL, Nonce: "n2", RemovedResources: []string{"b"}},
		{TypeUrl: xdstype.Cluster.URL, Nonce: "n3", Resources: []*discoverygrpc.Resource{cluster(t, "a", "a22")}},
		{TypeUrl: edsType, Nonce: "n4", Resources: []*discoverygrpc.Resource{endpoints(t, "x", "x1")}},
		{TypeUrl: xdstype.Cluster.URL, Nonce: "n5", Resources: []*discoverygrpc.Resource{cluster(t, "d", "d1")}},
		{TypeUrl: xdstype.Cluster.URL, Nonce: "n6", RemovedResources: []string{"d"}},
	} {
		ds.send(t, resp)
		if ack := ds.request(t); ack.GetResponseNonce() != resp.Nonce || ack.GetErrorDetail() != nil {
			t.Fatalf("want the ACK of %s, got %v", resp.Nonce, ack)
		}
	}
	cdsBefore, edsBefore := cds.Current(), eds.Current()
	if !slices.Equal(cdsBefore.Names, []string{"a", "c"}) || !slices.Equal(edsBefore.Names, []string{"x"}) {
		t.Fatalf("before the reconnect CDS %v EDS %v", cdsBefore.Names, edsBefore.Names)
	}

	ds.end <- status.Error(codes.Unavailable, "control plane restarting")
	again := srv.next(t)
	first := firstRequests(t, again, 2)
	cr, er := first[xdstype.Cluster.URL], first[edsType]
	if cr == nil || er == nil {
		t.Fatalf("first requests of the new stream: %v", first)
	}
	if cr.GetNode().GetId() != "relay-under-test" && er.GetNode().GetId() != "relay-under-test" {
		t.Fatalf("no node on the new stream's first request: %v / %v", cr, er)
	}
	wantReq(t, cr, xdstype.Cluster.URL, []string{"*"}, nil)
	wantReq(t, er, edsType, []string{"x", "y"}, nil)
	// The versions the server gave for what the relay still holds; neither
	// b nor d (removed); y (never received) claimed at no version, so that
	// the server tells whether it exists.
	if got, want := cr.GetInitialResourceVersions(), map[string]string{"a": "a22", "c": "c1"}; !maps.Equal(got, want) {
		t.Errorf("CDS initial_resource_versions = %v, want %v", got, want)
	}
	if got, want := er.GetInitialResourceVersions(), map[string]string{"x": "x1", "y": ""}; !maps.Equal(got, want) {
		t.Errorf("EDS initial_resource_versions = %v, want %v", got, want)
	}
	if cr.GetResponseNonce() != "" || er.GetResponseNonce() != "" {
		t.Errorf("a nonce of the old stream on the new one: %q %q", cr.GetResponseNonce(), er.GetResponseNonce())
	}
	// The server is in sync and sends nothing: clients keep the same state.
	again.quiet(t, 300*time.Millisecond)
	if cds.Current() != cdsBefore || eds.Current() != edsBefore {
		t.Fatalf("the reconnect changed the shards: CDS %v EDS %v", names(cds), names(eds))
	}

	// Updates on the new stream apply on top of the held state.
	again.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, Nonce: "m1", RemovedResources: []string{"c"}})
	if ack := again.request(t); ack.GetResponseNonce() != "m1" {
		t.Fatalf("ACK = %v", ack)
	}
	if got := names(cds); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("CDS after the removal on the new stream: %v", got)
	}
	if st := c.Status(); len(st) != 1 || st[0].Reconnects < 1 || st[0].State != StateConnected {
		t.Fatalf("status = %+v", st)
	}
}

// A name the relay stopped wanting is dropped from the class (the upstream
// was told to stop keeping it current). If it is wanted again and the stream
// reconnects before the upstream answered, the relay must not claim to hold
// it in initial_resource_versions on the new stream it is asked on: a server
// that believes it would never send it, and the name would be reported
// absent once shard.PendingGrace passes.
func TestDeltaReconnectDoesNotClaimDroppedResources(t *testing.T) {
	srv, addr := startScriptedDelta(t)
	_, class := newDeltaClient(t, addr, fastBackoff)
	w := nopWatcher{}
	x := subscribe(t, class, edsType, shard.NewSubscription([]string{"x"}, false), w)
	ds := srv.next(t)
	wantReq(t, ds.request(t), edsType, []string{"x"}, nil)
	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: edsType, Nonce: "n1", Resources: []*discoverygrpc.Resource{endpoints(t, "x", "x1")}})
	ds.request(t)
	if got := names(x); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("shard = %v, want [x]", got)
	}
	class.Unsubscribe(x, w)
	wantReq(t, ds.request(t), edsType, nil, []string{"x"})
	for _, st := range class.Status() {
		if st.TypeURL == edsType && st.Resources != 0 {
			t.Fatalf("the class still holds %d EDS resources after unsubscribing", st.Resources)
		}
	}

	// Wanted again: asked on a new stream (see resubscribeRestart), as
	// after a reconnect.
	x = subscribe(t, class, edsType, shard.NewSubscription([]string{"x"}, false), w)

	again := srv.next(t)
	r := again.request(t)
	wantReq(t, r, edsType, []string{"x"}, nil)
	if v := r.GetInitialResourceVersions()["x"]; v != "" {
		t.Errorf("BUG: the new stream claims x at version %q in initial_resource_versions, but the relay dropped x when it "+
			"unsubscribed (class holds nothing for it)", v)
	}
	// Claimed at no version at most: a server honouring
	// initial_resource_versions sends x.
	again.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: edsType, Nonce: "m1", Resources: []*discoverygrpc.Resource{endpoints(t, "x", "x1")}})
	again.request(t)
	deadline := time.Now().Add(shard.PendingGrace + 2*time.Second)
	for x.Current() == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // retry pace
	}
	if cur := x.Current(); cur == nil {
		t.Errorf("the shard for x is not served after the grace")
	} else if !cur.Has("x") {
		t.Errorf("the shard for x is served as %v (absence known: %v), want [x]: clients are told x does not exist", cur.Names, cur.AbsenceKnown)
	}
}

// After a NACK the relay still holds the last good state: the versions it
// sends on reconnect are those of that state, not of the rejected response.
func TestDeltaReconnectAfterNACKKeepsGoodVersions(t *testing.T) {
	srv, addr := startScriptedDelta(t)
	_, class := newDeltaClient(t, addr, fastBackoff)
	sh := subscribe(t, class, xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, nopWatcher{})
	ds := srv.next(t)
	ds.request(t)
	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, Nonce: "n1", Resources: []*discoverygrpc.Resource{cluster(t, "a", "a1")}})
	ds.request(t)
	bad := cluster(t, "b", "b1")
	bad.Name = "c"
	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, Nonce: "n2",
		Resources: []*discoverygrpc.Resource{cluster(t, "a", "a2"), bad}, RemovedResources: []string{"zz"}})
	if nack := ds.request(t); nack.GetErrorDetail() == nil {
		t.Fatalf("want a NACK, got %v", nack)
	}
	ds.end <- status.Error(codes.Unavailable, "bye")
	r := srv.next(t).request(t)
	if got, want := r.GetInitialResourceVersions(), map[string]string{"a": "a1"}; !maps.Equal(got, want) {
		t.Fatalf("initial_resource_versions after a NACK = %v, want %v", got, want)
	}
	if got := names(sh); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("shard = %v", got)
	}
}

// Names a delta upstream never answers for are pending for at most
// shard.PendingGrace (spec: "clients are still encouraged to use a timeout";
// go-control-plane never reports a missing resource). That must hold for the
// first request of a type too, not only for names added later.
func TestDeltaUnansweredFirstRequestIsResolvedAfterGrace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first bool // "never" is the type's first interest
	}{{"later-name", false}, {"first-request", true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, addr := startScriptedDelta(t)
			_, class := newDeltaClient(t, addr, Backoff{Initial: time.Hour, Max: time.Hour})
			w := nopWatcher{}
			ds := srv.next(t)
			if !tc.first {
				subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"a"}, false), w)
				wantReq(t, ds.request(t), xdstype.Cluster.URL, []string{"a"}, nil)
				ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, Nonce: "n1", Resources: []*discoverygrpc.Resource{cluster(t, "a", "1")}})
				ds.request(t)
			}
			sh := subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"never"}, false), w)
			wantReq(t, ds.request(t), xdstype.Cluster.URL, []string{"never"}, nil)
			// The upstream never answers for "never".
			deadline := time.Now().Add(shard.PendingGrace + 2*time.Second)
			for sh.Current() == nil && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond) // retry pace
			}
			if cur := sh.Current(); cur == nil {
				t.Fatalf("shard for an unanswered cluster still not served %v after the request (grace %v): its clients never learn it is absent",
					shard.PendingGrace+2*time.Second, shard.PendingGrace)
			} else if cur.Has("never") || !cur.AbsenceKnown {
				t.Fatalf("shard = %v (absence known %v), want empty with absence known", cur.Names, cur.AbsenceKnown)
			}
		})
	}
}

// An answer the upstream sent before it saw an unsubscription arrives after
// it: the version it carries for the name no longer asked is not recorded,
// so a reconnect does not claim a resource the class never kept (the
// upstream would then never send it).
func TestDeltaStaleAnswerVersionNotClaimed(t *testing.T) {
	srv, addr := startScriptedDelta(t)
	drops := &drop.Counters{}
	c, err := New(Config{Address: addr, RelayID: "relay-under-test", Backoff: fastBackoff, Delta: true, Drops: drops}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	class := attachClass(t, c, &corev3.Node{Id: "downstream-1", Cluster: "class-a"})
	w := nopWatcher{}
	x := subscribe(t, class, edsType, shard.NewSubscription([]string{"x"}, false), w)
	ds := srv.next(t)
	wantReq(t, ds.request(t), edsType, []string{"x"}, nil)
	y := subscribe(t, class, edsType, shard.NewSubscription([]string{"y"}, false), w)
	wantReq(t, ds.request(t), edsType, []string{"y"}, nil)
	class.Unsubscribe(y, w)
	wantReq(t, ds.request(t), edsType, nil, []string{"y"})
	// The answer to +[y], sent before the upstream saw -[y].
	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: edsType, Nonce: "n1",
		Resources: []*discoverygrpc.Resource{endpoints(t, "x", "x1"), endpoints(t, "y", "y1")}})
	if ack := ds.request(t); ack.GetResponseNonce() != "n1" {
		t.Fatalf("want the ACK of n1, got %v", ack)
	}
	if got := x.Current(); got == nil || !slices.Equal(got.Names, []string{"x"}) {
		t.Fatalf("[x] = %+v", got)
	}
	wantDrops(t, drops, map[drop.Reason]uint64{drop.UpstreamUnsubscribed: 1}) // y
	// Wanted again: asked on a new stream (see resubscribeRestart).
	subscribe(t, class, edsType, shard.NewSubscription([]string{"y"}, false), w)
	again := srv.next(t)
	r := again.request(t)
	if got, want := r.GetInitialResourceVersions(), map[string]string{"x": "x1", "y": ""}; !maps.Equal(got, want) {
		t.Errorf("initial_resource_versions = %v, want %v: y's version came from a stale answer (y is claimed at no version)", got, want)
	}
}

// A wildcard wanted after names is asked on a new stream whose first request
// declares exactly what the relay holds (go-control-plane records an answer
// as sent when it sends it, so one in flight across an unsubscription would
// never be reported removed to a "+[*]" on the old stream).
func TestDeltaWildcardAfterNamesOnNewStream(t *testing.T) {
	srv, addr := startScriptedDelta(t)
	c, class := newDeltaClient(t, addr, fastBackoff)
	w := nopWatcher{}
	named, _ := holdClustersAB(t, srv, class, w)
	wild := subscribe(t, class, xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, w)
	class.Unsubscribe(named, w)
	again := srv.next(t) // the old stream ends without asking for "*"
	r := again.request(t)
	wantReq(t, r, xdstype.Cluster.URL, []string{"*"}, nil)
	if st := c.Status()[0]; st.Reconnects != 0 || st.Restarts != (RestartCounts{Wildcard: 1}) {
		t.Fatalf("status: %d reconnects, restarts %+v; want none and one wildcard restart", st.Reconnects, st.Restarts)
	}
	if got, want := r.GetInitialResourceVersions(), map[string]string{"a": "a1", "b": "b1"}; !maps.Equal(got, want) {
		t.Errorf("initial_resource_versions = %v, want %v", got, want)
	}
	if got := wild.Current(); got != nil {
		t.Fatalf("wildcard served %v before the new stream's answer", got.Names)
	}
	// b was deleted while the relay was asking: the new stream says so.
	again.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, Nonce: "m1",
		Resources: []*discoverygrpc.Resource{cluster(t, "c", "c1")}, RemovedResources: []string{"b"}})
	if ack := again.request(t); ack.GetResponseNonce() != "m1" {
		t.Fatalf("want the ACK of m1, got %v", ack)
	}
	if got := wild.Current(); got == nil || !slices.Equal(got.Names, []string{"a", "c"}) {
		t.Fatalf("wildcard = %+v, want [a c]", got)
	}
}

// holdClustersAB subscribes a shard to Clusters [a b] on the relay's first
// stream and answers it with a at a1 and b at b1; it returns the shard and
// the stream, the answer ACKed.
func holdClustersAB(t *testing.T, srv scriptedDelta, class *shard.Class, w shard.Watcher) (*shard.Shard, *deltaStream) {
	t.Helper()
	ab := subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"a", "b"}, false), w)
	ds := srv.next(t)
	wantReq(t, ds.request(t), xdstype.Cluster.URL, []string{"a", "b"}, nil)
	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, Nonce: "n1",
		Resources: []*discoverygrpc.Resource{cluster(t, "a", "a1"), cluster(t, "b", "b1")}})
	if ack := ds.request(t); ack.GetResponseNonce() != "n1" {
		t.Fatalf("want the ACK of n1, got %v", ack)
	}
	return ab, ds
}
