package relay

import (
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/shard/wire"
)

// A request that does not decode (bad protobuf, or invalid UTF-8 in a
// string field such as a resource name or the node id, which proto3
// forbids) is the client's fault: the stream ends with INVALID_ARGUMENT,
// counted as invalid_request. gRPC's own Recv would end it with INTERNAL
// ("grpc: failed to unmarshal"), so the relay's streams receive through
// wire.Decoded, which reports the decoding error instead of failing.

// sotwDecoding is a gRPC SotW stream receiving through wire.Decoded.
type sotwDecoding struct{ grpc.ServerStream }

func (d sotwDecoding) Recv() (*discoveryv3.DiscoveryRequest, error) {
	m, err := recvDecoded(d.ServerStream, func() any { return new(discoveryv3.DiscoveryRequest) }, "DiscoveryRequest")
	req, _ := m.(*discoveryv3.DiscoveryRequest)
	return req, err
}

// deltaDecoding is a gRPC delta stream receiving through wire.Decoded.
type deltaDecoding struct{ grpc.ServerStream }

func (d deltaDecoding) Recv() (*discoveryv3.DeltaDiscoveryRequest, error) {
	m, err := recvDecoded(d.ServerStream, func() any { return new(discoveryv3.DeltaDiscoveryRequest) }, "DeltaDiscoveryRequest")
	req, _ := m.(*discoveryv3.DeltaDiscoveryRequest)
	return req, err
}

var (
	_ sotwTransport  = sotwDecoding{}
	_ deltaTransport = deltaDecoding{}
)

// recvDecoded receives the next request, made by newMsg once it has
// arrived: a stream waiting for its client's next request, as an idle one
// does for its whole life, holds no request (wire.Decoded.New).
func recvDecoded(st grpc.ServerStream, newMsg func() any, kind string) (any, error) {
	d := wire.Decoded{New: newMsg}
	if err := st.RecvMsg(&d); err != nil {
		return nil, err
	}
	if d.Err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "request: not a valid %s: %s", kind, protoMessage(d.Err))
	}
	return d.Msg, nil
}

// decodingSotW has a gRPC stream receive through wire.Decoded (a test's
// fake transport is used as it is).
func decodingSotW(t sotwTransport) sotwTransport {
	if g, ok := t.(grpc.ServerStream); ok {
		return sotwDecoding{g}
	}
	return t
}

func decodingDelta(t deltaTransport) deltaTransport {
	if g, ok := t.(grpc.ServerStream); ok {
		return deltaDecoding{g}
	}
	return t
}
