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

// openWire opens the stream for typeURL ("" for ADS) of the protocol.
func openWire(ctx context.Context, conn *grpc.ClientConn, delta bool, typeURL string) (wireStream, error) {
	if delta {
		var s deltaStream
		var err error
		switch typeURL {
		case "":
			s, err = discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
		case ClusterType:
			s, err = clusterservice.NewClusterDiscoveryServiceClient(conn).DeltaClusters(ctx)
		case EndpointType:
			s, err = endpointservice.NewEndpointDiscoveryServiceClient(conn).DeltaEndpoints(ctx)
		case ListenerType:
			s, err = listenerservice.NewListenerDiscoveryServiceClient(conn).DeltaListeners(ctx)
		case RouteType:
			s, err = routeservice.NewRouteDiscoveryServiceClient(conn).DeltaRoutes(ctx)
		case SecretType:
			s, err = secretservice.NewSecretDiscoveryServiceClient(conn).DeltaSecrets(ctx)
		default:
			return nil, fmt.Errorf("xdstest: no per-type delta service for %s", typeURL)
		}
		return deltaWire{s}, err
	}
	var s sotwStream
	var err error
	switch typeURL {
	case "":
		s, err = discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	case ClusterType:
		s, err = clusterservice.NewClusterDiscoveryServiceClient(conn).StreamClusters(ctx)
	case EndpointType:
		s, err = endpointservice.NewEndpointDiscoveryServiceClient(conn).StreamEndpoints(ctx)
	case ListenerType:
		s, err = listenerservice.NewListenerDiscoveryServiceClient(conn).StreamListeners(ctx)
	case RouteType:
		s, err = routeservice.NewRouteDiscoveryServiceClient(conn).StreamRoutes(ctx)
	case SecretType:
		s, err = secretservice.NewSecretDiscoveryServiceClient(conn).StreamSecrets(ctx)
	default:
		return nil, fmt.Errorf("xdstest: no per-type SotW service for %s", typeURL)
	}
	return sotwWire{s}, err
}
