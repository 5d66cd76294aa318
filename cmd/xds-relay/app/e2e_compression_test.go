package app_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// gzipADS opens a SotW ADS stream whose messages grpc-go compresses with
// gzip, sends req and returns the first answer (or the stream's error).
func gzipADS(t *testing.T, ctx context.Context, addr string, req *discoveryv3.DiscoveryRequest) (*discoveryv3.DiscoveryResponse, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	t.Cleanup(cancel)
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx, grpc.UseCompressor(grpcgzip.Name))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(req); err != nil && err != io.EOF { // EOF: the status comes with Recv
		return nil, err
	}
	return stream.Recv()
}

// restGzip POSTs a gzip-compressed CDS DiscoveryRequest with body (JSON)
// and returns the status and answer.
func restGzip(t *testing.T, ctx context.Context, addr string, body []byte) (int, string) {
	t.Helper()
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, _ = zw.Write(body)
	_ = zw.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v3/discovery:clusters", &z)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func cdsRequest(class string, names ...string) *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "gz", Cluster: class}, TypeUrl: resource.ClusterType, ResourceNames: names}
}

// By default a compressed request is refused before it is inflated: the
// gRPC stream ends with UNIMPLEMENTED, the REST poll gets 415, both naming
// server.allow_compressed_requests (gzip is registered with grpc-go as a
// side effect of the OTLP exporter's import; before, both were served).
func TestE2ECompressedRequestsRefused(t *testing.T) {
	const class = "class-gz"
	f := startFixture(t, class, clusters("a"), withConfig(func(c *app.Config) { c.REST.Listen = "127.0.0.1:0" }))
	_, err := gzipADS(t, f.ctx, f.relay.Addr(), cdsRequest(class))
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "server.allow_compressed_requests") {
		t.Errorf("gzip ADS stream: %v, want UNIMPLEMENTED naming server.allow_compressed_requests", err)
	}
	body, _ := protojson.Marshal(cdsRequest(class))
	if code, msg := restGzip(t, f.ctx, f.relay.RESTAddr(), body); code != http.StatusUnsupportedMediaType || !strings.Contains(msg, "server.allow_compressed_requests") {
		t.Errorf("gzip REST poll: %d %q, want 415 naming server.allow_compressed_requests", code, msg)
	}
	// Uncompressed clients are served as ever.
	if got := clusterNames(t, f.sotw(t, "plain", class).Next(10*time.Second)); len(got) != 1 {
		t.Errorf("plain client got %v", got)
	}
}

// With server.allow_compressed_requests a compressed request is served,
// and one inflating past the limits is refused: gRPC at
// limits.max_message_bytes (grpc-go stops inflating one byte past it),
// REST at its 1 MiB body limit.
func TestE2ECompressedRequestsAllowedWithinLimits(t *testing.T) {
	const class = "class-gz"
	f := startFixture(t, class, clusters("a"), withConfig(func(c *app.Config) {
		c.REST.Listen = "127.0.0.1:0"
		c.REST.MaxHold = -1
		c.Server.AllowCompressedRequests = true
		c.Limits.MaxMessageBytes = 64 << 10
	}))
	resp, err := gzipADS(t, f.ctx, f.relay.Addr(), cdsRequest(class))
	if err != nil || len(resp.GetResources()) != 1 {
		t.Fatalf("allowed gzip ADS stream: %v, %d resources", err, len(resp.GetResources()))
	}
	// 100 names of 2,000 bytes: 200 KB inflated, a few KB on the wire.
	var names []string
	for i := range 100 {
		names = append(names, fmt.Sprintf("%04d", i)+strings.Repeat("x", 1996))
	}
	_, err = gzipADS(t, f.ctx, f.relay.Addr(), cdsRequest(class, names...))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "after decompression larger than max 65536") {
		t.Errorf("a request inflating past limits.max_message_bytes: %v, want RESOURCE_EXHAUSTED", err)
	}

	body, _ := protojson.Marshal(cdsRequest(class))
	if code, msg := restGzip(t, f.ctx, f.relay.RESTAddr(), body); code != http.StatusOK {
		t.Errorf("allowed gzip REST poll: %d %q, want 200", code, msg)
	}
	bomb := append(bytes.Repeat([]byte(" "), 4<<20), body...) // 4 MB of JSON whitespace, ~4 KB of gzip
	if code, msg := restGzip(t, f.ctx, f.relay.RESTAddr(), bomb); code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "inflates past 1048576 bytes") {
		t.Errorf("gzip REST body inflating to 4 MB: %d %q, want 413", code, msg)
	}
}
