package upstream

import (
	"maps"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

const edsType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"

// cluster is a delta Resource entry carrying Cluster name at version.
func cluster(t *testing.T, name, version string) *discoverygrpc.Resource {
	t.Helper()
	a, err := anypb.New(&clusterv3.Cluster{Name: name, ConnectTimeout: durationpb.New(time.Duration(len(version)) * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	return &discoverygrpc.Resource{Name: name, Version: version, Resource: a}
}

func endpoints(t *testing.T, name, version string) *discoverygrpc.Resource {
	t.Helper()
	a, err := anypb.New(&endpointv3.ClusterLoadAssignment{ClusterName: name})
	if err != nil {
		t.Fatal(err)
	}
	return &discoverygrpc.Resource{Name: name, Version: version, Resource: a}
}

// newDeltaClient starts an upstream client speaking delta and returns it
// with the class of node "downstream-1" in "class-a" (no interest yet).
func newDeltaClient(t *testing.T, addr string, bo Backoff) (*Client, *shard.Class) {
	t.Helper()
	c, err := New(Config{Address: addr, RelayID: "relay-under-test", Backoff: bo, Delta: true}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, attachClass(t, c, &corev3.Node{Id: "downstream-1", Cluster: "class-a", UserAgentName: "envoy"})
}

// startDeltaCDS starts a scripted delta server and a client of it that does
// not reconnect within a test, whose class subscribes w to every cluster. It
// returns the client, the class, the CDS shard and the server's end of the
// stream the client opens.
func startDeltaCDS(t *testing.T, w shard.Watcher) (*Client, *shard.Class, *shard.Shard, *scripted[discoverygrpc.DeltaDiscoveryRequest, discoverygrpc.DeltaDiscoveryResponse]) {
	t.Helper()
	srv, addr := startScriptedDelta(t)
	c, class := newDeltaClient(t, addr, Backoff{Initial: time.Hour, Max: time.Hour})
	cds := subscribe(t, class, xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, w)
	return c, class, cds, srv.next(t)
}

// wantReq checks a delta request's type, subscribe and unsubscribe lists
// (order-insensitive) and that it is no NACK.
func wantReq(t *testing.T, r *discoverygrpc.DeltaDiscoveryRequest, typeURL string, sub, unsub []string) {
	t.Helper()
	gotSub := slices.Sorted(slices.Values(r.GetResourceNamesSubscribe()))
	gotUnsub := slices.Sorted(slices.Values(r.GetResourceNamesUnsubscribe()))
	if r.GetTypeUrl() != typeURL || !slices.Equal(gotSub, sub) || !slices.Equal(gotUnsub, unsub) || r.GetErrorDetail() != nil {
		t.Fatalf("request %v, want %s subscribe %v unsubscribe %v", r, typeURL, sub, unsub)
	}
}

func TestDeltaSubscriptionDiffs(t *testing.T) {
	w := nopWatcher{}
	_, class, cds, ds := startDeltaCDS(t, w)

	first := ds.request(t)
	if n := first.GetNode(); n.GetId() != "relay-under-test" || n.GetCluster() != "class-a" || n.GetUserAgentName() != "envoy" {
		t.Fatalf("upstream node = %v, want the relay's id with the class's fields", n)
	}
	wantReq(t, first, xdstype.Cluster.URL, []string{"*"}, nil)
	if len(first.GetInitialResourceVersions()) != 0 || first.GetResponseNonce() != "" {
		t.Fatalf("first request of a new relay = %v, want no versions and no nonce", first)
	}

	a := subscribe(t, class, edsType, shard.NewSubscription([]string{"x", "y"}, false), w)
	r := ds.request(t)
	wantReq(t, r, edsType, []string{"x", "y"}, nil)
	if r.GetNode() != nil {
		t.Fatalf("node sent again on the stream's second request: %v", r)
	}
	b := subscribe(t, class, edsType, shard.NewSubscription([]string{"y", "z"}, false), w)
	wantReq(t, ds.request(t), edsType, []string{"z"}, nil) // only what is new, not the union
	// A subscription to names already in the union changes nothing upstream.
	c := subscribe(t, class, edsType, shard.NewSubscription([]string{"x"}, false), w)
	ds.quiet(t, 200*time.Millisecond)
	class.Unsubscribe(a, w)
	ds.quiet(t, 200*time.Millisecond) // x is still wanted by c, y by b
	class.Unsubscribe(c, w)
	wantReq(t, ds.request(t), edsType, nil, []string{"x"})
	class.Unsubscribe(b, w)
	wantReq(t, ds.request(t), edsType, nil, []string{"y", "z"})
	// The wildcard is kept for the stream's life: go-control-plane would
	// not resend what it believes the stream holds if it came back.
	class.Unsubscribe(cds, w)
	ds.quiet(t, 200*time.Millisecond)
}

func TestDeltaUpdatesRemovalsAndACKs(t *testing.T) {
	w := nopWatcher{}
	c, class, sh, ds := startDeltaCDS(t, w)
	ds.request(t)

	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, SystemVersionInfo: "s1", Nonce: "n1",
		Resources: []*discoverygrpc.Resource{cluster(t, "a", "1"), cluster(t, "b", "1"), cluster(t, "c", "1")}})
	ack := ds.request(t)
	wantReq(t, ack, xdstype.Cluster.URL, nil, nil)
	if ack.GetResponseNonce() != "n1" {
		t.Fatalf("ACK = %v, want nonce n1", ack)
	}
	if got := names(sh); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("shard holds %v, want [a b c]", got)
	}
	before := sh.Current().Resources[1]

	// One changed, one removed: the rest is untouched.
	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, SystemVersionInfo: "s2", Nonce: "n2",
		Resources: []*discoverygrpc.Resource{cluster(t, "a", "22")}, RemovedResources: []string{"c"}})
	if ack := ds.request(t); ack.GetResponseNonce() != "n2" || ack.GetErrorDetail() != nil {
		t.Fatalf("ACK = %v, want nonce n2", ack)
	}
	cur := sh.Current()
	if !slices.Equal(cur.Names, []string{"a", "b"}) || cur.Resources[1] != before {
		t.Fatalf("shard holds %v, want [a b] with b untouched", cur.Names)
	}
	if !slices.Equal(cur.Removed, []string{"c"}) || len(cur.Changed) != 1 || cur.Changed[0].Name != "a" {
		t.Fatalf("shard change = changed %d removed %v, want a changed and c removed", len(cur.Changed), cur.Removed)
	}

	// Explicit names: an EDS resource and its removal (absence is known).
	eds := subscribe(t, class, edsType, shard.NewSubscription([]string{"x"}, false), w)
	wantReq(t, ds.request(t), edsType, []string{"x"}, nil)
	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: edsType, Nonce: "n3", Resources: []*discoverygrpc.Resource{endpoints(t, "x", "1")}})
	if ack := ds.request(t); ack.GetTypeUrl() != edsType || ack.GetResponseNonce() != "n3" {
		t.Fatalf("EDS ACK = %v", ack)
	}
	if got := names(eds); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("EDS shard holds %v, want [x]", got)
	}
	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: edsType, Nonce: "n4", RemovedResources: []string{"x"}})
	if ack := ds.request(t); ack.GetResponseNonce() != "n4" || ack.GetErrorDetail() != nil {
		t.Fatalf("EDS ACK = %v", ack)
	}
	if cur := eds.Current(); cur == nil || len(cur.Names) != 0 || !cur.AbsenceKnown || !slices.Equal(cur.Removed, []string{"x"}) {
		t.Fatalf("EDS shard after removal = %+v, want empty with x removed (absence known)", cur)
	}
	st := c.Status()
	if len(st) != 1 || st[0].ACKs != 4 || st[0].NACKs != 0 || st[0].Versions[xdstype.Cluster.URL] != "s2" {
		t.Fatalf("status = %+v", st)
	}
}

func TestDeltaBadResponsesAreNACKed(t *testing.T) {
	c, _, sh, ds := startDeltaCDS(t, nopWatcher{})
	ds.request(t)
	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, Nonce: "good0",
		Resources: []*discoverygrpc.Resource{cluster(t, "a", "1")}})
	ds.request(t)
	good := sh.Current()
	if good == nil || !slices.Equal(good.Names, []string{"a"}) {
		t.Fatalf("shard = %v, want [a]", names(sh))
	}

	misnamed := cluster(t, "b", "1")
	misnamed.Name = "not-b"
	eds := endpoints(t, "b", "1") // a ClusterLoadAssignment in a CDS response
	unnamed := cluster(t, "b", "1")
	unnamed.Name = ""
	undecodable := cluster(t, "b", "1")
	undecodable.Resource.Value = []byte{0xff, 0xff}
	// (TTLs and heartbeats are relayed: they are no reason to NACK.)
	bad := map[string][]*discoverygrpc.Resource{
		"name-mismatch": {misnamed},
		"type-mismatch": {cluster(t, "c", "1"), eds},
		"duplicate":     {cluster(t, "b", "1"), cluster(t, "b", "2")},
		"unnamed":       {unnamed},
		"undecodable":   {cluster(t, "c", "1"), undecodable},
	}
	for _, nonce := range slices.Sorted(maps.Keys(bad)) {
		ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, Nonce: nonce, Resources: bad[nonce],
			RemovedResources: []string{"a"}})
		nack := ds.request(t)
		if nack.GetErrorDetail() == nil || nack.GetErrorDetail().GetMessage() == "" || nack.GetResponseNonce() != nonce || nack.GetTypeUrl() != xdstype.Cluster.URL {
			t.Fatalf("%s: want a NACK of nonce %q with error_detail, got %v", nonce, nonce, nack)
		}
		if len(nack.GetResourceNamesSubscribe()) != 0 || len(nack.GetResourceNamesUnsubscribe()) != 0 {
			t.Fatalf("%s: a NACK changed the subscription: %v", nonce, nack)
		}
		t.Logf("%s: NACK %q", nonce, nack.GetErrorDetail().GetMessage())
		if sh.Current() != good {
			t.Fatalf("%s: a rejected response reached the shard: %v", nonce, names(sh))
		}
	}

	// The stream still works: the next good response is installed.
	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, Nonce: "good1",
		Resources: []*discoverygrpc.Resource{cluster(t, "b", "1")}, RemovedResources: []string{"a"}})
	if ack := ds.request(t); ack.GetErrorDetail() != nil || ack.GetResponseNonce() != "good1" {
		t.Fatalf("want the ACK of good1, got %v", ack)
	}
	if got := names(sh); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("shard = %v, want [b]", got)
	}
	if st := c.Status(); len(st) != 1 || st[0].NACKs != len(bad) || st[0].ACKs != 2 {
		t.Fatalf("status = %+v, want %d NACKs and 2 ACKs", st, len(bad))
	}
}
