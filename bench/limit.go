package bench

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"

	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/relay"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// limitServer is the limit target: a bare gRPC server with ADS and the CDS
// service that writes one pre-encoded body (plus each stream's nonce, as the
// relay does) to every open stream and discards what clients send. No
// protobuf work happens per stream, so it is the floor of any gRPC relay on
// the machine.
type limitServer struct {
	addr     string
	bc       *broadcaster
	requests atomic.Int64
	streamID atomic.Uint64 // numbers streams for their nonce stampers
	grpcSrv  *grpc.Server
	done     chan struct{}
}

func startLimitServer() (*limitServer, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &limitServer{addr: lis.Addr().String(), bc: newBroadcaster(), done: make(chan struct{})}
	// The relay's transport settings and pooled reads: the floor is what
	// gRPC itself costs configured as the relay configures it.
	opts := append(relay.TransportOptions(), grpc.ForceServerCodecV2(wire.NewCodec()), grpc.MaxConcurrentStreams(1<<20))
	s.grpcSrv = grpc.NewServer(opts...)
	for _, gen := range []*grpc.ServiceDesc{&discoverygrpc.AggregatedDiscoveryService_ServiceDesc, &clusterservice.ClusterDiscoveryService_ServiceDesc} {
		s.grpcSrv.RegisterService(s.serviceDesc(gen), s)
	}
	go func() {
		defer close(s.done)
		_ = s.grpcSrv.Serve(relay.BufferReads(lis))
	}()
	return s, nil
}

func (s *limitServer) Addr() string { return s.addr }

func (s *limitServer) publish(class int, p *payloads) { s.bc.publish(class, p) }

func (s *limitServer) publishEDS(class int, body wire.Body) { s.bc.publishEDS(class, body) }

func (s *limitServer) counts() (streams, requests int) {
	return s.bc.subscribed(), int(s.requests.Load())
}

func (s *limitServer) stop() {
	s.grpcSrv.Stop()
	<-s.done
}

// serve runs one stream: after the first request it writes whatever the
// broadcaster offers, while a reader discards ACKs; either ending ends both.
func (s *limitServer) serve(st grpc.ServerStream, delta bool) error {
	var req wire.Raw
	if err := st.RecvMsg(&req); err != nil {
		return err
	}
	s.requests.Add(1)
	sub := s.bc.subscribe(delta, requestClass(req.Bytes, delta))
	defer s.bc.unsubscribe(sub)
	readErr := make(chan error, 1)
	go func() {
		for {
			var ack wire.Raw
			if err := st.RecvMsg(&ack); err != nil {
				readErr <- err
				return
			}
			s.requests.Add(1)
		}
	}()
	ctx := st.Context()
	var nonce uint64
	stamper := wire.NewStamper(s.streamID.Add(1))
	var m wire.Stamped // reused: SendMsg has encoded it when it returns
	for {
		select {
		case body := <-sub.next:
			nonce++
			m = stamper.Stamp(body, nonce)
			if err := st.SendMsg(&m); err != nil {
				return err
			}
		case body := <-sub.eds:
			nonce++
			m = stamper.Stamp(body, nonce)
			if err := st.SendMsg(&m); err != nil {
				return err
			}
		case err := <-readErr:
			return err
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// requestClass is the class number of a stream's first request's node
// (className); 0 when it names none.
func requestClass(b []byte, delta bool) int {
	var node interface{ GetCluster() string }
	if delta {
		var req discoverygrpc.DeltaDiscoveryRequest
		if proto.Unmarshal(b, &req) != nil {
			return 0
		}
		node = req.GetNode()
	} else {
		var req discoverygrpc.DiscoveryRequest
		if proto.Unmarshal(b, &req) != nil {
			return 0
		}
		node = req.GetNode()
	}
	k, err := strconv.Atoi(strings.TrimPrefix(node.GetCluster(), classPrefix))
	if err != nil || k < 0 {
		return 0
	}
	return k
}

// serviceDesc describes the service of gen (only read) with its streams
// served by serve: Delta* as delta, the others as SotW. Unary methods are
// not served.
func (s *limitServer) serviceDesc(gen *grpc.ServiceDesc) *grpc.ServiceDesc {
	d := &grpc.ServiceDesc{ServiceName: gen.ServiceName, HandlerType: (*any)(nil), Metadata: gen.Metadata}
	for _, st := range gen.Streams {
		delta := strings.HasPrefix(st.StreamName, "Delta")
		d.Streams = append(d.Streams, grpc.StreamDesc{StreamName: st.StreamName, ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error { return s.serve(ss, delta) }})
	}
	return d
}
