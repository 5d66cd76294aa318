package bench

import (
	"context"
	"fmt"
	"net"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xds-relay/xds-relay/shard/wire"
)

// ClusterType is the CDS type URL.
const ClusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// Receipt is one response a client received.
type Receipt struct {
	Client    int
	Version   string
	Resources int
	Bytes     int
	At        time.Time
}

// Client is a raw ADS client (SotW or delta) with a wildcard CDS
// subscription; it ACKs every response and reports it.
type Client struct {
	conn *grpc.ClientConn
	done chan error
}

// StartClient connects client id of class to addr from the loopback source
// address src (nil: any) and streams receipts until ctx ends. With delta, the
// client speaks incremental ADS (a legacy wildcard CDS subscription).
func StartClient(ctx context.Context, addr string, src net.IP, id int, class string, delta bool, out chan<- Receipt) (*Client, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if src != nil {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src}}
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", a)
		}))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn, done: make(chan error, 1)}
	node := &corev3.Node{Id: fmt.Sprintf("bench-client-%d", id), Cluster: class}
	ads := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn)
	// Responses are read raw and only their envelope parsed: the bench
	// measures the relay, not protobuf decoding in the clients.
	raw := grpc.ForceCodecV2(wire.NewCodec())
	var loop func() error
	if delta {
		stream, err := ads.DeltaAggregatedResources(ctx, raw)
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("client %d: %w", id, err)
		}
		if err := stream.Send(&discoverygrpc.DeltaDiscoveryRequest{Node: node, TypeUrl: ClusterType}); err != nil {
			conn.Close()
			return nil, err
		}
		loop = func() error {
			var m wire.Raw
			if err := stream.RecvMsg(&m); err != nil {
				return err
			}
			at := time.Now()
			resp, err := wire.ParseDeltaResponse(m.Bytes)
			if err != nil {
				return err
			}
			c.report(ctx, out, Receipt{Client: id, Version: resp.SystemVersionInfo, Resources: len(resp.Resources), Bytes: len(m.Bytes), At: at})
			return stream.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: resp.Nonce})
		}
	} else {
		stream, err := ads.StreamAggregatedResources(ctx, raw)
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("client %d: %w", id, err)
		}
		if err := stream.Send(&discoverygrpc.DiscoveryRequest{Node: node, TypeUrl: ClusterType}); err != nil {
			conn.Close()
			return nil, err
		}
		loop = func() error {
			var m wire.Raw
			if err := stream.RecvMsg(&m); err != nil {
				return err
			}
			at := time.Now()
			resp, err := wire.ParseResponse(m.Bytes)
			if err != nil {
				return err
			}
			c.report(ctx, out, Receipt{Client: id, Version: resp.VersionInfo, Resources: len(resp.Resources), Bytes: len(m.Bytes), At: at})
			return stream.Send(&discoverygrpc.DiscoveryRequest{TypeUrl: ClusterType, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce})
		}
	}
	go func() {
		for {
			if err := loop(); err != nil {
				c.done <- err
				return
			}
		}
	}()
	return c, nil
}

func (c *Client) report(ctx context.Context, out chan<- Receipt, r Receipt) {
	select {
	case out <- r:
	case <-ctx.Done():
	}
}

// Close closes the connection and waits for the receive loop to end.
func (c *Client) Close() {
	c.conn.Close()
	<-c.done
}
