package relay

import (
	"context"
	"fmt"
	"strings"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// Stream variants, as reported in status.
const (
	variantSotWADS      = "sotw-ads"
	variantSotWPerType  = "sotw"
	variantDeltaADS     = "delta-ads"
	variantDeltaPerType = "delta"
)

type (
	sotwServerStream  = grpc.GenericServerStream[discoverygrpc.DiscoveryRequest, discoverygrpc.DiscoveryResponse]
	deltaServerStream = grpc.GenericServerStream[discoverygrpc.DeltaDiscoveryRequest, discoverygrpc.DeltaDiscoveryResponse]
)

// services are the v3 xDS services the relay serves, each by its generated
// description and the type URL its streams serve ("": ADS, every type):
// ADS, and the registered types' services.
var services = func() []xdsService {
	out := []xdsService{{&discoverygrpc.AggregatedDiscoveryService_ServiceDesc, ""}}
	for _, t := range xdstype.All() {
		out = append(out, xdsService{t.Service, t.URL})
	}
	return out
}()

// xdsService is one service of services.
type xdsService struct {
	desc    *grpc.ServiceDesc
	typeURL string
}

// Register installs every v3 xDS service on g: SotW and delta, aggregated and
// per type, and LoadReportingService (lrs.go). Fetch (unary) methods answer
// Unimplemented.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	for _, svc := range services {
		g.RegisterService(serviceDesc(svc.desc, svc.typeURL), s)
	}
	g.RegisterService(loadServiceDesc, s)
}

// xdsHandler is the HandlerType of the relay's service descriptions: what
// their handlers call on the *Server they are registered with.
type xdsHandler interface {
	serveSotW(t sotwTransport, fixedType, variant string) error
	serveDelta(t deltaTransport, fixedType, variant string) error
}

var _ xdsHandler = (*Server)(nil)

// serviceDesc describes the service of gen, with the same name and methods,
// served by the relay: its Stream* methods by serveSotW, its Delta* methods
// by serveDelta, for typeURL. (gen is only read: generated descriptions are
// not to be modified.) It panics on a method it does not know how to serve,
// so that a new method of the generated code is not left answering nothing.
func serviceDesc(gen *grpc.ServiceDesc, typeURL string) *grpc.ServiceDesc {
	sotwVariant, deltaVariant := variantSotWPerType, variantDeltaPerType
	if typeURL == "" {
		sotwVariant, deltaVariant = variantSotWADS, variantDeltaADS
	}
	d := &grpc.ServiceDesc{ServiceName: gen.ServiceName, HandlerType: (*xdsHandler)(nil), Metadata: gen.Metadata}
	for _, m := range gen.Methods {
		d.Methods = append(d.Methods, grpc.MethodDesc{MethodName: m.MethodName, Handler: unimplementedUnary(m.MethodName)})
	}
	for _, st := range gen.Streams {
		var h grpc.StreamHandler
		switch {
		case strings.HasPrefix(st.StreamName, "Stream"):
			h = func(srv any, ss grpc.ServerStream) error {
				return srv.(xdsHandler).serveSotW(&sotwServerStream{ServerStream: ss}, typeURL, sotwVariant)
			}
		case strings.HasPrefix(st.StreamName, "Delta"):
			h = func(srv any, ss grpc.ServerStream) error {
				return srv.(xdsHandler).serveDelta(&deltaServerStream{ServerStream: ss}, typeURL, deltaVariant)
			}
		default:
			panic(fmt.Sprintf("relay: no handler for %s/%s", gen.ServiceName, st.StreamName))
		}
		d.Streams = append(d.Streams, grpc.StreamDesc{StreamName: st.StreamName, Handler: h, ServerStreams: true, ClientStreams: true})
	}
	return d
}

// unimplementedUnary answers a unary method (Fetch*, REST over gRPC) with
// Unimplemented, as generated servers do.
func unimplementedUnary(method string) grpc.MethodHandler {
	return func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
		return nil, status.Errorf(codes.Unimplemented, "method %s not implemented", method)
	}
}
