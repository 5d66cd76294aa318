package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// stalledClient is a proxy that subscribes to everything a class has and
// then never reads: HTTP/2 flow control stops the relay's writes to it at
// the smallest windows, and its responses pile up on the relay's side.
type stalledClient struct {
	conn   *grpc.ClientConn
	cancel context.CancelFunc
}

// startStalledClient subscribes (SotW ADS) to every resource of want's
// types: wildcard LDS and CDS, RDS and EDS by name.
func startStalledClient(ctx context.Context, addr string, id int, class string, want State) (*stalledClient, error) {
	d := contextDialer(loopbackSource(1000000 + id))
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(d),
		// The minimum windows (and no BDP growth): the relay can have at
		// most 64 KiB in flight to this client.
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	s, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		cancel()
		conn.Close()
		return nil, err
	}
	node := &corev3.Node{Id: fmt.Sprintf("stalled-client-%d", id), Cluster: class}
	for i, t := range xdsTypes {
		req := &discoverygrpc.DiscoveryRequest{TypeUrl: t}
		if i == 0 {
			req.Node = node
		}
		if isDependent(t) {
			req.ResourceNames = slices.Sorted(maps.Keys(want[t]))
		}
		if err := s.Send(req); err != nil {
			cancel()
			conn.Close()
			return nil, err
		}
	}
	return &stalledClient{conn: conn, cancel: cancel}, nil
}

// disconnected reports whether the relay closed the client's connection.
func (c *stalledClient) disconnected() bool {
	st := c.conn.GetState()
	return st != connectivity.Ready && st != connectivity.Connecting
}

func (c *stalledClient) close() {
	c.cancel()
	c.conn.Close()
}
