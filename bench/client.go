package bench

import (
	"context"
	"fmt"
	"net"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xds-relay/xds-relay/shard/wire"
)

// ClusterType is the CDS type URL.
const ClusterType = resource.ClusterType

// Services the clients can subscribe through.
const (
	ServiceADS = "ads" // AggregatedDiscoveryService
	ServiceCDS = "cds" // ClusterDiscoveryService (per type)
)

// Receipt is one response a client received.
type Receipt struct {
	Client    int
	TypeURL   string
	Version   string
	Resources int
	Bytes     int
	// Hash is the ContentHash of an EDS response's first resource (the
	// churn runs identify each update by it); 0 for other types.
	Hash uint64
	// Hashes holds every resource's ContentHash, in order, when the
	// client was asked for them (ClientOptions.HashResources).
	Hashes []uint64
	At     time.Time
}

// ClientOptions say how the gRPC clients talk: protocol, service and
// flow-control window.
type ClientOptions struct {
	Delta   bool   // incremental xDS instead of state of the world
	Service string // ServiceADS or ServiceCDS
	// Window is the HTTP/2 flow-control window the client advertises for
	// each stream and for the connection; 0 keeps grpc-go's (64 KiB,
	// grown by BDP estimation). EnvoyWindow is what Envoy advertises.
	Window int32
	// EDS, if set, is a load assignment each SotW stream also subscribes
	// to; its responses are reported on EDSOut (not out).
	EDS    string
	EDSOut chan<- Receipt
	// HashResources fills Receipt.Hashes (SotW; tests).
	HashResources bool
}

// EnvoyWindow is Envoy's default HTTP/2 stream and connection window
// (initial_stream_window_size and initial_connection_window_size, 256 MiB),
// which its xDS gRPC client uses unless the operator sets others.
const EnvoyWindow = 256 << 20

// Conn is one gRPC connection carrying raw xDS streams (SotW or delta, over
// ADS or the CDS service), each with a wildcard CDS subscription; every
// stream ACKs each response and reports it.
type Conn struct {
	conn    *grpc.ClientConn
	streams int
	done    chan error // one value per started stream
}

// Dial connects to addr from the loopback source address src (nil: any) and
// opens one stream per entry of ids, stream ids[i] presenting the node class
// classes[i]. Receipts go to out until ctx ends.
func Dial(ctx context.Context, addr string, src net.IP, opts ClientOptions, ids []int, classes []string, out chan<- Receipt) (*Conn, error) {
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if src != nil {
		dial = append(dial, grpc.WithContextDialer(contextDialer(src)))
	}
	if opts.Window > 0 {
		dial = append(dial, grpc.WithInitialWindowSize(opts.Window), grpc.WithInitialConnWindowSize(opts.Window))
	}
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return nil, err
	}
	c := &Conn{conn: conn, done: make(chan error, len(ids))}
	for i, id := range ids {
		loop, err := openStream(ctx, conn, opts, id, classes[i], out)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("client %d: %w", id, err)
		}
		c.streams++
		go func() {
			for {
				if err := loop(); err != nil {
					c.done <- err
					return
				}
			}
		}()
	}
	return c, nil
}

// openStream opens stream id and sends its subscription; the returned
// function receives, reports and ACKs one response.
func openStream(ctx context.Context, conn *grpc.ClientConn, opts ClientOptions, id int, class string, out chan<- Receipt) (func() error, error) {
	node := &corev3.Node{Id: fmt.Sprintf("bench-client-%d", id), Cluster: class}
	// Responses are read raw and only their envelope parsed: the bench
	// measures the server, not protobuf decoding in the clients.
	raw := grpc.ForceCodecV2(wire.NewCodec())
	ads := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn)
	cds := clusterservice.NewClusterDiscoveryServiceClient(conn)
	// recv receives one response and reports it where its type goes.
	recv := func(st grpc.ClientStream) (Receipt, string, error) {
		var m wire.Raw
		if err := st.RecvMsg(&m); err != nil {
			return Receipt{}, "", err
		}
		at := time.Now()
		r, nonce, err := parseReceipt(m.Bytes, opts.Delta)
		if err != nil {
			return Receipt{}, "", err
		}
		r.Client, r.At = id, at
		if opts.HashResources && !opts.Delta {
			resp, _ := wire.ParseResponse(m.Bytes)
			for _, res := range resp.Resources {
				r.Hashes = append(r.Hashes, ContentHash(res))
			}
		}
		if r.TypeURL == EndpointType && opts.EDSOut != nil {
			report(ctx, opts.EDSOut, r)
		} else {
			report(ctx, out, r)
		}
		return r, nonce, nil
	}
	if opts.Delta {
		open := ads.DeltaAggregatedResources
		if opts.Service == ServiceCDS {
			open = cds.DeltaClusters
		}
		first := []*discoverygrpc.DeltaDiscoveryRequest{{Node: node, TypeUrl: ClusterType}}
		return subscribe(ctx, open, raw, first, recv, func(_ Receipt, nonce string) *discoverygrpc.DeltaDiscoveryRequest {
			return &discoverygrpc.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: nonce}
		})
	}
	open := ads.StreamAggregatedResources
	if opts.Service == ServiceCDS {
		open = cds.StreamClusters
	}
	first := []*discoverygrpc.DiscoveryRequest{{Node: node, TypeUrl: ClusterType}}
	var eds []string
	if opts.EDS != "" {
		eds = []string{opts.EDS}
		first = append(first, &discoverygrpc.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: eds})
	}
	return subscribe(ctx, open, raw, first, recv, func(r Receipt, nonce string) *discoverygrpc.DiscoveryRequest {
		ack := &discoverygrpc.DiscoveryRequest{TypeUrl: r.TypeURL, VersionInfo: r.Version, ResponseNonce: nonce}
		if r.TypeURL == EndpointType {
			ack.ResourceNames = eds
		}
		return ack
	})
}

// subscribe opens a stream with open and sends the first requests; the
// returned function receives and reports one response (recv) and sends
// the ACK that ack makes of it. One function serves SotW and delta.
func subscribe[Req, Resp any](ctx context.Context, open func(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[Req, Resp], error), codec grpc.CallOption,
	first []*Req, recv func(grpc.ClientStream) (Receipt, string, error), ack func(r Receipt, nonce string) *Req) (func() error, error) {
	st, err := open(ctx, codec)
	if err != nil {
		return nil, err
	}
	for _, req := range first {
		if err := st.Send(req); err != nil {
			return nil, err
		}
	}
	return func() error {
		r, nonce, err := recv(st)
		if err != nil {
			return err
		}
		return st.Send(ack(r, nonce))
	}, nil
}

// parseReceipt reads a response's envelope: version, resource count, size,
// and the nonce to ACK.
func parseReceipt(b []byte, delta bool) (Receipt, string, error) {
	if delta {
		resp, err := wire.ParseDeltaResponse(b)
		if err != nil {
			return Receipt{}, "", err
		}
		return Receipt{TypeURL: resp.TypeURL, Version: resp.SystemVersionInfo, Resources: len(resp.Resources), Bytes: len(b)}, resp.Nonce, nil
	}
	resp, err := wire.ParseResponse(b)
	if err != nil {
		return Receipt{}, "", err
	}
	r := Receipt{TypeURL: resp.TypeURL, Version: resp.VersionInfo, Resources: len(resp.Resources), Bytes: len(b)}
	if r.TypeURL == EndpointType && len(resp.Resources) > 0 {
		r.Hash = ContentHash(resp.Resources[0])
	}
	return r, resp.Nonce, nil
}

func report(ctx context.Context, out chan<- Receipt, r Receipt) {
	select {
	case out <- r:
	case <-ctx.Done():
	}
}

// Close closes the connection and waits for every stream's loop to end.
func (c *Conn) Close() {
	c.conn.Close()
	for range c.streams {
		<-c.done
	}
}
