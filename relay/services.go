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
	VirtualHostType = "type.googleapis.com/envoy.config.route.v3.VirtualHost"
)

// Stream variants, as reported in status.
const (
	variantSotWADS      = "sotw-ads"
	variantSotWPerType  = "sotw"
	variantDeltaADS     = "delta-ads"
	variantDeltaPerType = "delta"
)

type (
	sotwStreamServer  = grpc.BidiStreamingServer[discoverygrpc.DiscoveryRequest, discoverygrpc.DiscoveryResponse]
	deltaStreamServer = grpc.BidiStreamingServer[discoverygrpc.DeltaDiscoveryRequest, discoverygrpc.DeltaDiscoveryResponse]
)

// Register installs every v3 xDS service on g: SotW and delta, aggregated and
// per type. Fetch (unary) methods answer Unimplemented.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, adsService{srv: s})
	listenerservice.RegisterListenerDiscoveryServiceServer(g, ldsService{srv: s})
	routeservice.RegisterRouteDiscoveryServiceServer(g, rdsService{srv: s})
	routeservice.RegisterScopedRoutesDiscoveryServiceServer(g, srdsService{srv: s})
	clusterservice.RegisterClusterDiscoveryServiceServer(g, cdsService{srv: s})
	endpointservice.RegisterEndpointDiscoveryServiceServer(g, edsService{srv: s})
	secretservice.RegisterSecretDiscoveryServiceServer(g, sdsService{srv: s})
	runtimeservice.RegisterRuntimeDiscoveryServiceServer(g, rtdsService{srv: s})
	routeservice.RegisterVirtualHostDiscoveryServiceServer(g, vhdsService{srv: s})
}

type adsService struct {
	discoverygrpc.UnimplementedAggregatedDiscoveryServiceServer
	srv *Server
}

func (a adsService) StreamAggregatedResources(st sotwStreamServer) error {
	return a.srv.serveSotW(st, "", variantSotWADS)
}

func (a adsService) DeltaAggregatedResources(st deltaStreamServer) error {
	return a.srv.serveDelta(st, "", variantDeltaADS)
}

type ldsService struct {
	listenerservice.UnimplementedListenerDiscoveryServiceServer
	srv *Server
}

func (x ldsService) StreamListeners(st sotwStreamServer) error {
	return x.srv.serveSotW(st, ListenerType, variantSotWPerType)
}

func (x ldsService) DeltaListeners(st deltaStreamServer) error {
	return x.srv.serveDelta(st, ListenerType, variantDeltaPerType)
}

type rdsService struct {
	routeservice.UnimplementedRouteDiscoveryServiceServer
	srv *Server
}

func (x rdsService) StreamRoutes(st sotwStreamServer) error {
	return x.srv.serveSotW(st, RouteType, variantSotWPerType)
}

func (x rdsService) DeltaRoutes(st deltaStreamServer) error {
	return x.srv.serveDelta(st, RouteType, variantDeltaPerType)
}

type srdsService struct {
	routeservice.UnimplementedScopedRoutesDiscoveryServiceServer
	srv *Server
}

func (x srdsService) StreamScopedRoutes(st sotwStreamServer) error {
	return x.srv.serveSotW(st, ScopedRouteType, variantSotWPerType)
}

func (x srdsService) DeltaScopedRoutes(st deltaStreamServer) error {
	return x.srv.serveDelta(st, ScopedRouteType, variantDeltaPerType)
}

type cdsService struct {
	clusterservice.UnimplementedClusterDiscoveryServiceServer
	srv *Server
}

func (x cdsService) StreamClusters(st sotwStreamServer) error {
	return x.srv.serveSotW(st, ClusterType, variantSotWPerType)
}

func (x cdsService) DeltaClusters(st deltaStreamServer) error {
	return x.srv.serveDelta(st, ClusterType, variantDeltaPerType)
}

type edsService struct {
	endpointservice.UnimplementedEndpointDiscoveryServiceServer
	srv *Server
}

func (x edsService) StreamEndpoints(st sotwStreamServer) error {
	return x.srv.serveSotW(st, EndpointType, variantSotWPerType)
}

func (x edsService) DeltaEndpoints(st deltaStreamServer) error {
	return x.srv.serveDelta(st, EndpointType, variantDeltaPerType)
}

type sdsService struct {
	secretservice.UnimplementedSecretDiscoveryServiceServer
	srv *Server
}

func (x sdsService) StreamSecrets(st sotwStreamServer) error {
	return x.srv.serveSotW(st, SecretType, variantSotWPerType)
}

func (x sdsService) DeltaSecrets(st deltaStreamServer) error {
	return x.srv.serveDelta(st, SecretType, variantDeltaPerType)
}

type rtdsService struct {
	runtimeservice.UnimplementedRuntimeDiscoveryServiceServer
	srv *Server
}

func (x rtdsService) StreamRuntime(st sotwStreamServer) error {
	return x.srv.serveSotW(st, RuntimeType, variantSotWPerType)
}

func (x rtdsService) DeltaRuntime(st deltaStreamServer) error {
	return x.srv.serveDelta(st, RuntimeType, variantDeltaPerType)
}

type vhdsService struct {
	routeservice.UnimplementedVirtualHostDiscoveryServiceServer
	srv *Server
}

func (x vhdsService) DeltaVirtualHosts(st deltaStreamServer) error {
	return x.srv.serveDelta(st, VirtualHostType, variantDeltaPerType)
}
