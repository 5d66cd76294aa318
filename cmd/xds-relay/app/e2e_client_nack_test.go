package app_test

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// A client's NACK stays with the relay: the control plane never sees a
// request with error_detail, and the client is not sent the rejected
// version again; the next version reaches it.
func TestE2EClientNACKIsNotForwarded(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "class-a", "v1", clusters("a"))
	r := startRelay(t, m.Addr)

	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const cds = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "c1", Cluster: "class-a"}, TypeUrl: cds}); err != nil {
		t.Fatal(err)
	}
	v1, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: cds, ResponseNonce: v1.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: "client rejects cluster a"}}); err != nil {
		t.Fatal(err)
	}
	// The relay counts the NACK before anything else happens: a NACK that
	// arrived after a newer response would be stale, and rightly ignored.
	eventually(t, ctx, "the client's one NACK counted in /debug/streams", func() bool {
		var streams struct {
			Streams []struct {
				Types []struct {
					NACKs int `json:"nacks"`
				} `json:"types"`
			} `json:"streams"`
		}
		getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/streams", &streams)
		return len(streams.Streams) == 1 && len(streams.Streams[0].Types) == 1 && streams.Streams[0].Types[0].NACKs == 1
	})
	// A new version upstream: the next response must be it, not the
	// rejected v1 again.
	m.Set(t, "class-a", "v2", clusters("a", "b"))
	next, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := clusterNames(t, next); len(got) != 2 || next.GetVersionInfo() == v1.GetVersionInfo() {
		t.Fatalf("after the NACK the client got %v at %s, want [a b] at a new version", got, next.GetVersionInfo())
	}
	if n := m.Stats().NACKs; n != 0 {
		t.Fatalf("the control plane saw %d NACKs; a client's NACK must not be forwarded", n)
	}
}
