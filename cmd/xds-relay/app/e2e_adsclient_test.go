package app_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// adsClient is a raw ADS SotW client of the relay. It ACKs every response
// and queues it for the test.
type adsClient struct {
	t      *testing.T
	node   *corev3.Node
	conn   *grpc.ClientConn
	stream grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
	cancel context.CancelFunc
	resps  chan *discoveryv3.DiscoveryResponse
	done   chan struct{} // the receiver returned; err is set

	sendMu sync.Mutex
	first  bool                // guarded by sendMu
	names  map[string][]string // guarded by sendMu: subscription per type
	err    error               // set before done is closed
}

// dialADS opens an ADS stream to addr as node id/cluster. It is closed when
// the test ends.
func dialADS(t *testing.T, ctx context.Context, addr, id, cluster string) *adsClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		cancel()
		_ = conn.Close()
		t.Fatalf("open ADS stream: %v", err)
	}
	c := &adsClient{
		t:      t,
		node:   &corev3.Node{Id: id, Cluster: cluster, Locality: &corev3.Locality{Region: "r-" + cluster}},
		conn:   conn,
		stream: stream,
		cancel: cancel,
		resps:  make(chan *discoveryv3.DiscoveryResponse, 16),
		done:   make(chan struct{}),
		first:  true,
		names:  map[string][]string{},
	}
	go c.receive(sctx)
	t.Cleanup(c.Close)
	return c
}

func (c *adsClient) receive(ctx context.Context) {
	defer close(c.done)
	for {
		resp, err := c.stream.Recv()
		if err != nil {
			c.err = err
			return
		}
		if err := c.send(resp.GetTypeUrl(), resp.GetVersionInfo(), resp.GetNonce(), nil); err != nil {
			c.err = fmt.Errorf("ACK: %w", err)
			return
		}
		select {
		case c.resps <- resp:
		case <-ctx.Done():
			c.err = ctx.Err()
			return
		}
	}
}

// send writes a request for typeURL; names nil keeps the last subscription.
func (c *adsClient) send(typeURL, version, nonce string, names []string) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if names != nil {
		c.names[typeURL] = names
	}
	req := &discoveryv3.DiscoveryRequest{
		TypeUrl:       typeURL,
		VersionInfo:   version,
		ResponseNonce: nonce,
		ResourceNames: c.names[typeURL],
	}
	if c.first {
		req.Node, c.first = c.node, false
	}
	return c.stream.Send(req)
}

// Subscribe sends the initial request for typeURL (no names: legacy wildcard).
func (c *adsClient) Subscribe(typeURL string, names ...string) {
	c.t.Helper()
	if names == nil {
		names = []string{}
	}
	if err := c.send(typeURL, "", "", names); err != nil {
		c.t.Fatalf("%s: subscribe %s: %v", c.node.GetId(), typeURL, err)
	}
}

// Next returns the next response, failing the test if the stream ends or
// nothing arrives within timeout.
func (c *adsClient) Next(timeout time.Duration) *discoveryv3.DiscoveryResponse {
	c.t.Helper()
	resp, err := c.next(timeout)
	if err != nil {
		c.t.Fatalf("%s: %v", c.node.GetId(), err)
	}
	return resp
}

func (c *adsClient) next(timeout time.Duration) (*discoveryv3.DiscoveryResponse, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case resp := <-c.resps:
		return resp, nil
	case <-c.done:
		return nil, fmt.Errorf("stream ended: %w", c.err)
	case <-timer.C:
		return nil, fmt.Errorf("no response within %v", timeout)
	}
}

// Err returns the stream's error if it has ended, else nil.
func (c *adsClient) Err() error {
	select {
	case <-c.done:
		if c.err == nil {
			return errors.New("stream ended")
		}
		return c.err
	default:
		return nil
	}
}

// Close ends the stream and waits for the receiver.
func (c *adsClient) Close() {
	c.cancel()
	<-c.done
	_ = c.conn.Close()
}

// clusterNames decodes a CDS response: the sorted cluster names. Every
// resource must be an Any of the response's type.
func clusterNames(t *testing.T, resp *discoveryv3.DiscoveryResponse) []string {
	t.Helper()
	if resp.GetTypeUrl() != resource.ClusterType {
		t.Fatalf("response type %q, want %q", resp.GetTypeUrl(), resource.ClusterType)
	}
	var names []string
	for i, a := range resp.GetResources() {
		if a.GetTypeUrl() != resp.GetTypeUrl() {
			t.Fatalf("resources[%d]: type %q in a %q response", i, a.GetTypeUrl(), resp.GetTypeUrl())
		}
		var c clusterv3.Cluster
		if err := anypb.UnmarshalTo(a, &c, proto.UnmarshalOptions{}); err != nil {
			t.Fatalf("resources[%d]: %v", i, err)
		}
		names = append(names, c.GetName())
	}
	slices.Sort(names)
	return names
}
