package upstream

import (
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// respondClusters writes a CDS response of clusters named names.
func respondClusters(t *testing.T, ss *scriptedStream, version, nonce string, names ...string) {
	t.Helper()
	resp := &discoverygrpc.DiscoveryResponse{VersionInfo: version, Nonce: nonce, TypeUrl: xdstype.Cluster.URL}
	for _, n := range names {
		a, err := anypb.New(&clusterv3.Cluster{Name: n})
		if err != nil {
			t.Fatal(err)
		}
		resp.Resources = append(resp.Resources, a)
	}
	ss.send(t, resp)
}

type nopWatcher struct{}

func (nopWatcher) ShardChanged(*shard.Shard, *shard.Response) {}

func (nopWatcher) ShardHeartbeat(*shard.Shard, *shard.Heartbeat) {}

func newClient(t *testing.T, addr string, bo Backoff) (*Client, *shard.Class, *shard.Shard) {
	t.Helper()
	c, err := New(Config{Address: addr, RelayID: "relay-under-test", Backoff: bo}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	class := attachClass(t, c, &corev3.Node{Id: "downstream-1", Cluster: "class-a", UserAgentName: "envoy"})
	sh := subscribe(t, class, xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, nopWatcher{})
	return c, class, sh
}

func names(sh *shard.Shard) []string {
	if r := sh.Current(); r != nil {
		return r.Names
	}
	return nil
}

func TestNACKAndRepeatedRejectedVersion(t *testing.T) {
	srv, addr := startScripted(t)
	_, _, sh := newClient(t, addr, Backoff{Initial: time.Hour, Max: time.Hour})
	ss := srv.next(t)

	first := ss.request(t)
	if n := first.GetNode(); n.GetId() != "relay-under-test" || n.GetCluster() != "class-a" || n.GetUserAgentName() != "envoy" {
		t.Fatalf("upstream node = %v, want the relay's id with the class's fields", n)
	}
	if first.GetTypeUrl() != xdstype.Cluster.URL || len(first.GetResourceNames()) != 0 {
		t.Fatalf("first request = %v, want a legacy wildcard CDS request", first)
	}

	respondClusters(t, ss, "v1", "n1", "a", "a") // duplicate names: must be rejected
	nack := ss.request(t)
	if nack.GetErrorDetail() == nil || nack.GetResponseNonce() != "n1" || nack.GetVersionInfo() != "" {
		t.Fatalf("want a NACK of n1 at the empty version, got %v", nack)
	}
	if status.Code(status.ErrorProto(nack.GetErrorDetail())) != codes.InvalidArgument {
		t.Fatalf("NACK code = %v", nack.GetErrorDetail())
	}
	if names(sh) != nil {
		t.Fatal("a rejected response reached the shard")
	}

	// The control plane re-sends the rejected version at once (as
	// go-control-plane does). The relay must not answer at once, or the two
	// loop: the next request it sends must be the ACK of the good v2.
	respondClusters(t, ss, "v1", "n2", "a", "a")
	respondClusters(t, ss, "v2", "n3", "a", "b")
	ack := ss.request(t)
	if ack.GetErrorDetail() != nil || ack.GetResponseNonce() != "n3" || ack.GetVersionInfo() != "v2" {
		t.Fatalf("want the ACK of v2 (n3), got %v", ack)
	}
	if got := names(sh); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("shard holds %v after v2", got)
	}
}

func TestReconnectResubscribesAtNoVersion(t *testing.T) {
	srv, addr := startScripted(t)
	c, _, sh := newClient(t, addr, Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond})
	ss := srv.next(t)
	ss.request(t)
	respondClusters(t, ss, "v7", "n1", "a")
	if ack := ss.request(t); ack.GetVersionInfo() != "v7" {
		t.Fatalf("ACK = %v", ack)
	}
	ss.end <- status.Error(codes.Unavailable, "control plane restarting")

	again := srv.next(t)
	req := again.request(t)
	// A new stream claims no version: the upstream sends the whole state,
	// whatever it believes the relay holds.
	if req.GetVersionInfo() != "" || req.GetNode().GetId() != "relay-under-test" || req.GetTypeUrl() != xdstype.Cluster.URL {
		t.Fatalf("resubscription = %v, want CDS at no version, with the node", req)
	}
	if got := names(sh); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("shard lost its state across the reconnect: %v", got)
	}
	st := c.Status()
	if len(st) != 1 || st[0].Reconnects < 1 || st[0].Versions[xdstype.Cluster.URL] != "v7" {
		t.Fatalf("status = %+v", st)
	}
}

func TestInterestChangesAreSentUpstream(t *testing.T) {
	srv, addr := startScripted(t)
	_, class, _ := newClient(t, addr, Backoff{Initial: time.Hour, Max: time.Hour})
	ss := srv.next(t)
	ss.request(t) // CDS wildcard
	const eds = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	w := nopWatcher{}
	a := subscribe(t, class, eds, shard.NewSubscription([]string{"x", "y"}, false), w)
	if r := ss.request(t); r.GetTypeUrl() != eds || !slices.Equal(r.GetResourceNames(), []string{"x", "y"}) {
		t.Fatalf("EDS subscription = %v", r)
	}
	b := subscribe(t, class, eds, shard.NewSubscription([]string{"y", "z"}, false), w)
	if r := ss.request(t); !slices.Equal(r.GetResourceNames(), []string{"x", "y", "z"}) {
		t.Fatalf("union = %v", r.GetResourceNames())
	}
	class.Unsubscribe(a, w)
	if r := ss.request(t); !slices.Equal(r.GetResourceNames(), []string{"y", "z"}) {
		t.Fatalf("after dropping x: %v", r.GetResourceNames())
	}
	class.Unsubscribe(b, w)
	if r := ss.request(t); len(r.GetResourceNames()) != 0 || r.GetTypeUrl() != eds {
		t.Fatalf("after everyone left: %v, want an empty (unsubscribe) EDS request", r)
	}
}
