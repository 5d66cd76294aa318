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

// Client is a raw SotW ADS client with a wildcard CDS subscription; it ACKs
// every response and reports it.
type Client struct {
	conn *grpc.ClientConn
	done chan error
}

// StartClient connects client id of class to addr from the loopback source
// address src (nil: any) and streams receipts until ctx ends.
func StartClient(ctx context.Context, addr string, src net.IP, id int, class string, out chan<- Receipt) (*Client, error) {
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
	// Responses are read raw and only their envelope parsed: the bench
	// measures the relay, not protobuf decoding in the clients.
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx, grpc.ForceCodecV2(wire.NewCodec()))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("client %d: %w", id, err)
	}
	node := &corev3.Node{Id: fmt.Sprintf("bench-client-%d", id), Cluster: class}
	if err := stream.Send(&discoverygrpc.DiscoveryRequest{Node: node, TypeUrl: ClusterType}); err != nil {
		conn.Close()
		return nil, err
	}
	c := &Client{conn: conn, done: make(chan error, 1)}
	go func() {
		for {
			var raw wire.Raw
			if err := stream.RecvMsg(&raw); err != nil {
				c.done <- err
				return
			}
			at := time.Now()
			resp, err := wire.ParseResponse(raw.Bytes)
			if err != nil {
				c.done <- err
				return
			}
			select {
			case out <- Receipt{Client: id, Version: resp.VersionInfo, Resources: len(resp.Resources), Bytes: len(raw.Bytes), At: at}:
			case <-ctx.Done():
			}
			if err := stream.Send(&discoverygrpc.DiscoveryRequest{TypeUrl: ClusterType, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce}); err != nil {
				c.done <- err
				return
			}
		}
	}()
	return c, nil
}

// Close closes the connection and waits for the receive loop to end.
func (c *Client) Close() {
	c.conn.Close()
	<-c.done
}
