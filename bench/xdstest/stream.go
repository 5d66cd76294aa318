package xdstest

import (
	"context"
	"fmt"

	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	secretservice "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc"
)

type (
	sotwStream  = grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
	deltaStream = grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]
)

// wireStream is one gRPC stream of either protocol: the only place the
// client differs between SotW and delta on the wire. A response is handed
// to the client as a *discoveryv3.DiscoveryResponse or
// *discoveryv3.DeltaDiscoveryResponse.
type wireStream interface {
	send(req any) error
	recv() (any, error)
}

type sotwWire struct{ s sotwStream }

func (w sotwWire) send(req any) error { return w.s.Send(req.(*discoveryv3.DiscoveryRequest)) }
func (w sotwWire) recv() (any, error) { return w.s.Recv() }

type deltaWire struct{ s deltaStream }

func (w deltaWire) send(req any) error { return w.s.Send(req.(*discoveryv3.DeltaDiscoveryRequest)) }
func (w deltaWire) recv() (any, error) { return w.s.Recv() }

var (
	_ wireStream = sotwWire{}
	_ wireStream = deltaWire{}
)

// streamMethods are the full method names of the SotW and delta streams of
// each service the client opens, by type URL ("": ADS).
var streamMethods = map[string][2]string{
	"":           {discoveryv3.AggregatedDiscoveryService_StreamAggregatedResources_FullMethodName, discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResources_FullMethodName},
	ClusterType:  {clusterservice.ClusterDiscoveryService_StreamClusters_FullMethodName, clusterservice.ClusterDiscoveryService_DeltaClusters_FullMethodName},
	EndpointType: {endpointservice.EndpointDiscoveryService_StreamEndpoints_FullMethodName, endpointservice.EndpointDiscoveryService_DeltaEndpoints_FullMethodName},
	ListenerType: {listenerservice.ListenerDiscoveryService_StreamListeners_FullMethodName, listenerservice.ListenerDiscoveryService_DeltaListeners_FullMethodName},
	RouteType:    {routeservice.RouteDiscoveryService_StreamRoutes_FullMethodName, routeservice.RouteDiscoveryService_DeltaRoutes_FullMethodName},
	SecretType:   {secretservice.SecretDiscoveryService_StreamSecrets_FullMethodName, secretservice.SecretDiscoveryService_DeltaSecrets_FullMethodName},
}

// openWire opens the stream for typeURL ("" for ADS) of the protocol, as the
// generated clients do.
func openWire(ctx context.Context, conn *grpc.ClientConn, delta bool, typeURL string) (wireStream, error) {
	methods, ok := streamMethods[typeURL]
	if !ok {
		return nil, fmt.Errorf("xdstest: no per-type service for %s", typeURL)
	}
	desc := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
	if delta {
		cs, err := conn.NewStream(ctx, desc, methods[1], grpc.StaticMethod())
		if err != nil {
			return nil, err
		}
		return deltaWire{&grpc.GenericClientStream[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]{ClientStream: cs}}, nil
	}
	cs, err := conn.NewStream(ctx, desc, methods[0], grpc.StaticMethod())
	if err != nil {
		return nil, err
	}
	return sotwWire{&grpc.GenericClientStream[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]{ClientStream: cs}}, nil
}
