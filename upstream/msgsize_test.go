package upstream

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// testMaxMsg is the key in these tests: small, the mechanism is the same.
const testMaxMsg = 4096

// bigClusters is a CDS response of about size bytes.
func bigClusters(t *testing.T, version, nonce string, size int) *discoverygrpc.DiscoveryResponse {
	t.Helper()
	resp := &discoverygrpc.DiscoveryResponse{VersionInfo: version, Nonce: nonce, TypeUrl: xdstype.Cluster.URL}
	for i := 0; proto.Size(resp) < size; i++ {
		a, err := anypb.New(&clusterv3.Cluster{Name: strings.Repeat("c", 200) + string(rune('a'+i%26)) + strings.Repeat("x", i)})
		if err != nil {
			t.Fatal(err)
		}
		resp.Resources = append(resp.Resources, a)
	}
	return resp
}

// newSizedClient is a client of addr whose key is testMaxMsg.
func newSizedClient(t *testing.T, addr string, bo Backoff, delta bool) (*Client, *shard.Class) {
	t.Helper()
	c, err := New(Config{Address: addr, RelayID: "relay-under-test", Backoff: bo, MaxMessageBytes: testMaxMsg, Delta: delta}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, attachClass(t, c, &corev3.Node{Id: "downstream-1", Cluster: "class-a"})
}

// A response over upstream.max_message_bytes (but under the transport's
// ceiling) is NACKed naming the key and its size; the class keeps its last
// good state and the stream stays up.
func TestResponseOverMaxMessageIsNACKedNamingTheKey(t *testing.T) {
	srv, addr := startScripted(t)
	c, class := newSizedClient(t, addr, Backoff{Initial: time.Hour, Max: time.Hour}, false)
	sh := subscribe(t, class, xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, nopWatcher{})
	ss := srv.next(t)
	ss.request(t)
	respondClusters(t, ss, "v1", "n1", "a")
	if ack := ss.request(t); ack.GetErrorDetail() != nil || ack.GetVersionInfo() != "v1" {
		t.Fatalf("want the ACK of v1, got %v", ack)
	}

	big := bigClusters(t, "v2", "n2", testMaxMsg+100)
	size := proto.Size(big)
	ss.send(t, big)
	nack := ss.request(t)
	msg := nack.GetErrorDetail().GetMessage()
	if nack.GetResponseNonce() != "n2" || nack.GetVersionInfo() != "v1" || !strings.Contains(msg, MaxMessageKey) || !strings.Contains(msg, "4096") {
		t.Fatalf("want a NACK of n2 at v1 naming %s, got %v", MaxMessageKey, nack)
	}
	if !strings.Contains(msg, strconv.Itoa(size)) {
		t.Fatalf("NACK %q does not name the response's size %d", msg, size)
	}
	if got := names(sh); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("shard holds %v after the oversized v2, want v1's [a]", got)
	}
	// A re-send of the same version is NACKed later, not at once: the
	// next request answers the good v3.
	ss.send(t, bigClusters(t, "v2", "n3", testMaxMsg+100))
	respondClusters(t, ss, "v3", "n4", "a", "b")
	if ack := ss.request(t); ack.GetErrorDetail() != nil || ack.GetResponseNonce() != "n4" {
		t.Fatalf("want the ACK of v3 (n4), got %v", ack)
	}
	if st := c.Status(); len(st) != 1 || st[0].Reconnects != 0 || !strings.Contains(st[0].LastNACK, MaxMessageKey) {
		t.Fatalf("status = %+v, want one NACK naming the key and no reconnect", st)
	}
}

// A stream that fails on its first CDS response (one over even the
// transport's ceiling), after its LDS was accepted, delivered no good
// state: the backoff's step grows from stream to stream instead of
// starting over.
func TestBackoffGrowsAcrossStreamsFailingOnFirstResponse(t *testing.T) {
	srv, addr := startScripted(t)
	c, class := newSizedClient(t, addr, Backoff{Initial: time.Millisecond, Max: time.Hour}, false)
	subscribe(t, class, xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, nopWatcher{})
	subscribe(t, class, xdstype.Listener.URL, shard.Subscription{Wildcard: true}, nopWatcher{})
	lds, err := anypb.New(&listenerv3.Listener{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	for attempt := range 5 {
		ss := srv.next(t)
		if st := c.Status(); attempt > 0 && (len(st) != 1 || st[0].Failures != attempt) {
			t.Fatalf("stream %d: status = %+v, want %d consecutive failures", attempt+1, st, attempt)
		}
		ss.request(t)
		ss.request(t)
		ss.send(t, &discoverygrpc.DiscoveryResponse{VersionInfo: "l1", Nonce: "n1", TypeUrl: xdstype.Listener.URL, Resources: []*anypb.Any{lds}})
		if ack := ss.request(t); ack.GetTypeUrl() != xdstype.Listener.URL || ack.GetErrorDetail() != nil {
			t.Fatalf("want the ACK of the LDS, got %v", ack)
		}
		ss.send(t, bigClusters(t, "c1", "n2", transportCeiling(testMaxMsg)+100))
	}
	srv.next(t)
	if st := c.Status(); st[0].Failures != 5 {
		t.Fatalf("status = %+v, want 5 consecutive failures", st[0])
	}
}

// A delta response over the key is NACKed whole, naming the key; the class
// keeps what it held.
func TestDeltaResponseOverMaxMessageIsNACKed(t *testing.T) {
	srv, addr := startScriptedDelta(t)
	_, class := newSizedClient(t, addr, Backoff{Initial: time.Hour, Max: time.Hour}, true)
	sh := subscribe(t, class, xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, nopWatcher{})
	ds := srv.next(t)
	ds.request(t)
	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, Nonce: "n1", Resources: []*discoverygrpc.Resource{cluster(t, "a", "1")}})
	if ack := ds.request(t); ack.GetErrorDetail() != nil || ack.GetResponseNonce() != "n1" {
		t.Fatalf("want the ACK of n1, got %v", ack)
	}
	big := &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, Nonce: "n2"}
	for i := 0; proto.Size(big) < testMaxMsg+100; i++ {
		big.Resources = append(big.Resources, cluster(t, strings.Repeat("b", 200)+strconv.Itoa(i), "1"))
	}
	ds.send(t, big)
	nack := ds.request(t)
	if nack.GetResponseNonce() != "n2" || !strings.Contains(nack.GetErrorDetail().GetMessage(), MaxMessageKey) {
		t.Fatalf("want a NACK of n2 naming %s, got %v", MaxMessageKey, nack)
	}
	if got := names(sh); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("shard holds %v after the oversized response, want [a]", got)
	}
}
