package relay

import (
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	runtimeservice "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	secretservice "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc"

	"github.com/xds-relay/xds-relay/shard"
)

// Type URLs of the per-type services.
const (
	ListenerType    = shard.ListenerType
	RouteType       = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	ScopedRouteType = "type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration"
	ClusterType     = shard.ClusterType
	EndpointType    = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	SecretType      = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
	RuntimeType     = "type.googleapis.com/envoy.service.runtime.v3.Runtime"
	variantADS      = "sotw-ads"
	variantPerType  = "sotw"
)

type sotwStreamServer = grpc.BidiStreamingServer[discoverygrpc.DiscoveryRequest, discoverygrpc.DiscoveryResponse]

// Register installs every v3 xDS service on g. Delta and Fetch methods answer
// Unimplemented until the relay serves them.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, adsService{srv: s})
	listenerservice.RegisterListenerDiscoveryServiceServer(g, ldsService{srv: s})
	routeservice.RegisterRouteDiscoveryServiceServer(g, rdsService{srv: s})
	routeservice.RegisterScopedRoutesDiscoveryServiceServer(g, srdsService{srv: s})
	clusterservice.RegisterClusterDiscoveryServiceServer(g, cdsService{srv: s})
	endpointservice.RegisterEndpointDiscoveryServiceServer(g, edsService{srv: s})
	secretservice.RegisterSecretDiscoveryServiceServer(g, sdsService{srv: s})
	runtimeservice.RegisterRuntimeDiscoveryServiceServer(g, rtdsService{srv: s})
}

type adsService struct {
	discoverygrpc.UnimplementedAggregatedDiscoveryServiceServer
	srv *Server
}

func (a adsService) StreamAggregatedResources(st sotwStreamServer) error {
	return a.srv.serveSotW(st, "", variantADS)
}

type ldsService struct {
	listenerservice.UnimplementedListenerDiscoveryServiceServer
	srv *Server
}

func (x ldsService) StreamListeners(st sotwStreamServer) error {
	return x.srv.serveSotW(st, ListenerType, variantPerType)
}

type rdsService struct {
	routeservice.UnimplementedRouteDiscoveryServiceServer
	srv *Server
}

func (x rdsService) StreamRoutes(st sotwStreamServer) error {
	return x.srv.serveSotW(st, RouteType, variantPerType)
}

type srdsService struct {
	routeservice.UnimplementedScopedRoutesDiscoveryServiceServer
	srv *Server
}

func (x srdsService) StreamScopedRoutes(st sotwStreamServer) error {
	return x.srv.serveSotW(st, ScopedRouteType, variantPerType)
}

type cdsService struct {
	clusterservice.UnimplementedClusterDiscoveryServiceServer
	srv *Server
}

func (x cdsService) StreamClusters(st sotwStreamServer) error {
	return x.srv.serveSotW(st, ClusterType, variantPerType)
}

type edsService struct {
	endpointservice.UnimplementedEndpointDiscoveryServiceServer
	srv *Server
}

func (x edsService) StreamEndpoints(st sotwStreamServer) error {
	return x.srv.serveSotW(st, EndpointType, variantPerType)
}

type sdsService struct {
	secretservice.UnimplementedSecretDiscoveryServiceServer
	srv *Server
}

func (x sdsService) StreamSecrets(st sotwStreamServer) error {
	return x.srv.serveSotW(st, SecretType, variantPerType)
}

type rtdsService struct {
	runtimeservice.UnimplementedRuntimeDiscoveryServiceServer
	srv *Server
}

func (x rtdsService) StreamRuntime(st sotwStreamServer) error {
	return x.srv.serveSotW(st, RuntimeType, variantPerType)
}
