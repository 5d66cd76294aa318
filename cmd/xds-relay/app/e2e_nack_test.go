package app_test

import (
	"context"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/bench/xdstest"
)

// handADS is a hand-made ADS management server: the test reads the relay's
// requests and writes whatever responses it likes, well-formed or not.
type handADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	reqs    chan *discoveryv3.DiscoveryRequest
	streams chan grpc.BidiStreamingServer[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
}

func (h *handADS) StreamAggregatedResources(st grpc.BidiStreamingServer[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]) error {
	select {
	case h.streams <- st:
	case <-st.Context().Done():
		return st.Context().Err()
	}
	for {
		req, err := st.Recv()
		if err != nil {
			return err
		}
		select {
		case h.reqs <- req:
		case <-st.Context().Done():
			return st.Context().Err()
		}
	}
}

func startHandADS(t *testing.T) (*handADS, string) {
	t.Helper()
	h := &handADS{
		reqs:    make(chan *discoveryv3.DiscoveryRequest, 16),
		streams: make(chan grpc.BidiStreamingServer[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse], 1),
	}
	srv := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(srv, h)
	return h, xdstest.ServeGRPC(t, srv)
}

// stream returns the next upstream stream the relay opens.
func (h *handADS) stream(t *testing.T, ctx context.Context) grpc.BidiStreamingServer[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse] {
	t.Helper()
	return receive(t, ctx, h.streams, "the relay never opened an upstream stream")
}

func (h *handADS) request(t *testing.T, ctx context.Context) *discoveryv3.DiscoveryRequest {
	t.Helper()
	return receive(t, ctx, h.reqs, "timed out waiting for a request from the relay")
}

// receive returns the next value of ch, failing the test with msg if ctx
// ends first.
func receive[T any](t *testing.T, ctx context.Context, ch <-chan T, msg string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatal(msg)
		var zero T
		return zero
	}
}

// TestE2EBadUpstreamResponseIsNACKedAndNeverReachesClients sends the relay,
// from a hand-made control plane speaking the real protocol, responses that
// must be rejected: the relay NACKs each one upstream (error_detail set, the
// bad response's nonce, the last good version) and its clients keep the last
// good state: the next thing they receive is the next good response.
func TestE2EBadUpstreamResponseIsNACKedAndNeverReachesClients(t *testing.T) {
	ctx := testContext(t)
	h, addr := startHandADS(t)
	r := startRelay(t, addr)
	const class = "class-nack"
	c1 := dialADS(t, ctx, r.Addr(), "client-1", class)
	c2 := dialADS(t, ctx, r.Addr(), "client-2", class)
	c1.Subscribe(resource.ClusterType)
	c2.Subscribe(resource.ClusterType)

	up := h.stream(t, ctx)
	req := h.request(t, ctx)
	if req.GetNode().GetId() != relayID || req.GetNode().GetCluster() != class {
		t.Fatalf("first upstream request node = %v, want id %q cluster %q", req.GetNode(), relayID, class)
	}
	if req.GetTypeUrl() != resource.ClusterType || len(req.GetResourceNames()) != 0 || req.GetResponseNonce() != "" {
		t.Fatalf("first upstream request = %v, want a wildcard CDS request", req)
	}

	send := func(version, nonce string, res ...*anypb.Any) {
		t.Helper()
		if err := up.Send(&discoveryv3.DiscoveryResponse{VersionInfo: version, Nonce: nonce, TypeUrl: resource.ClusterType, Resources: res}); err != nil {
			t.Fatalf("send %s: %v", nonce, err)
		}
	}
	// expect reads the relay's answer to nonce: an ACK (nack false) or a NACK.
	expect := func(nonce, version string, nack bool) {
		t.Helper()
		req := h.request(t, ctx)
		if req.GetResponseNonce() != nonce || req.GetVersionInfo() != version || (req.GetErrorDetail() != nil) != nack {
			t.Fatalf("relay answered nonce %q with nonce %q version %q error_detail %v; want nonce %q version %q NACK %v",
				nonce, req.GetResponseNonce(), req.GetVersionInfo(), req.GetErrorDetail(), nonce, version, nack)
		}
		if nack && req.GetErrorDetail().GetMessage() == "" {
			t.Errorf("NACK of %q without a message", nonce)
		}
		if req.GetTypeUrl() != resource.ClusterType || len(req.GetResourceNames()) != 0 {
			t.Errorf("answer to %q changed the subscription: type %q names %v", nonce, req.GetTypeUrl(), req.GetResourceNames())
		}
	}
	expectClients := func(want ...string) {
		t.Helper()
		for _, c := range []*adsClient{c1, c2} {
			if got := clusterNames(t, c.Next(10*time.Second)); !slices.Equal(got, want) {
				t.Fatalf("%s got clusters %v, want %v", c.node.GetId(), got, want)
			}
		}
	}

	good1 := xdstest.MustAny(t, edsCluster("alpha"))
	send("v1", "n1", good1)
	expect("n1", "v1", false)
	expectClients("alpha")

	endpointAny := xdstest.MustAny(t, &endpointv3.ClusterLoadAssignment{ClusterName: "sneaky"})
	garbage := &anypb.Any{TypeUrl: resource.ClusterType, Value: []byte{0x0a, 0x05, 'b', 'r', 'o', 'k', 'e', 0x12, 0xff}}
	bad := []struct {
		name      string
		resources []*anypb.Any
	}{
		{"Any type differs from the response type", []*anypb.Any{good1, endpointAny}},
		{"duplicate resource name", []*anypb.Any{good1, xdstest.MustAny(t, edsCluster("beta")), xdstest.MustAny(t, edsCluster("beta"))}},
		{"truncated resource", []*anypb.Any{good1, garbage}},
		{"resource without a name", []*anypb.Any{good1, xdstest.MustAny(t, &clusterv3.Cluster{})}},
	}
	for i, b := range bad {
		nonce := "bad-" + string(rune('a'+i))
		send("v-bad-"+string(rune('a'+i)), nonce, b.resources...)
		expect(nonce, "v1", true)
		if st := upstreamStatus(t, ctx, r, class); st.NACKs != i+1 || st.Versions[resource.ClusterType] != "v1" {
			t.Errorf("%s: /debug/upstream nacks %d version %q, want %d and v1", b.name, st.NACKs, st.Versions[resource.ClusterType], i+1)
		}
	}

	// Barrier: the next good response is the next thing clients see.
	send("v2", "n2", good1, xdstest.MustAny(t, edsCluster("gamma")))
	expect("n2", "v2", false)
	expectClients("alpha", "gamma")
	for _, c := range []*adsClient{c1, c2} {
		if err := c.Err(); err != nil {
			t.Errorf("%s: stream ended: %v", c.node.GetId(), err)
		}
	}
}
