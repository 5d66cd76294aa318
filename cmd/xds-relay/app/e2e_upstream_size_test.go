package app_test

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
	"github.com/xds-relay/xds-relay/upstream"
)

// bigCDS is a CDS state of n clusters of about 90 KB each.
func bigCDS(n int) map[resource.Type][]types.Resource {
	out := make([]types.Resource, 0, n)
	for i := range n {
		c := edsCluster("big-" + strings.Repeat("x", i))
		c.AltStatName = strings.Repeat("s", 90<<10)
		out = append(out, c)
	}
	return map[resource.Type][]types.Resource{resource.ClusterType: out}
}

// firstCDS subscribes a client allowing large messages to the CDS wildcard
// and returns the first response.
func firstCDS(t *testing.T, r *app.Relay, class string) (*discoveryv3.DiscoveryResponse, error) {
	t.Helper()
	ctx := testContext(t)
	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx, grpc.MaxCallRecvMsgSize(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "big-1", Cluster: class}, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	return st.Recv()
}

// TestE2EUpstreamStateOverGRPCDefaultReachesClients: a CDS state over
// gRPC's 4 MiB default message size, from go-control-plane, reaches a
// client through the relay under the default upstream.max_message_bytes.
func TestE2EUpstreamStateOverGRPCDefaultReachesClients(t *testing.T) {
	const class = "class-big"
	f := startFixture(t, class, bigCDS(60))
	resp, err := firstCDS(t, f.relay, class)
	if err != nil {
		t.Fatalf("first CDS response: %v", err)
	}
	if n, size := len(resp.GetResources()), proto.Size(resp); n != 60 || size <= 4<<20 {
		t.Fatalf("client got %d clusters in %d bytes, want 60 in over 4 MiB", n, size)
	}
}

// TestE2EUpstreamStateOverMaxMessageIsNACKed: with upstream.max_message_bytes
// under the state, the relay NACKs go-control-plane's response naming the
// key, and the upstream status says so.
func TestE2EUpstreamStateOverMaxMessageIsNACKed(t *testing.T) {
	const class = "class-big"
	f := startFixture(t, class, bigCDS(20), withConfig(func(c *app.Config) { c.Upstream.MaxMessageBytes = 1 << 20 }))
	dialADS(t, f.ctx, f.relay.Addr(), "big-1", class).Subscribe(resource.ClusterType)
	eventually(t, f.ctx, "a NACK naming "+upstream.MaxMessageKey, func() bool {
		reqs, _ := f.cp.Requests()
		for _, r := range reqs {
			if strings.Contains(r.GetErrorDetail().GetMessage(), upstream.MaxMessageKey) {
				return true
			}
		}
		return false
	})
	if st := upstreamStatus(t, f.ctx, f.relay, class); !strings.Contains(st.LastNACK, upstream.MaxMessageKey) {
		t.Fatalf("upstream status %+v does not name %s", st, upstream.MaxMessageKey)
	}
}
