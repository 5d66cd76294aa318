package app_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xds-relay/xds-relay/bench/xdstest"
)

// backend is a real gRPC server (the standard health service) counting the
// calls it serves.
type backend struct {
	addr  string
	calls atomic.Int64
}

func startBackend(t *testing.T) *backend {
	t.Helper()
	b := &backend{}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		b.calls.Add(1)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	b.addr = xdstest.ServeGRPC(t, srv)
	return b
}

// grpcResources is the xDS configuration a grpc-go client needs to reach
// target: Listener target → RouteConfiguration → EDS Cluster → endpoint addr.
func grpcResources(t *testing.T, target, addr string) map[resource.Type][]types.Resource {
	t.Helper()
	routeName, clusterName := target+"-route", target+"-cluster"
	ads := &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
	hcm := &hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: ads, RouteConfigName: routeName}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: xdstest.MustAny(t, &routerv3.Router{})},
		}},
	}
	lis := &listenerv3.Listener{
		Name:        target,
		ApiListener: &listenerv3.ApiListener{ApiListener: xdstest.MustAny(t, hcm)},
	}
	route := &routev3.RouteConfiguration{
		Name: routeName,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    target + "-vh",
			Domains: []string{target},
			Routes: []*routev3.Route{{
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: clusterName}}},
			}},
		}},
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	var port uint32
	if _, err := fmt.Sscan(portStr, &port); err != nil {
		t.Fatal(err)
	}
	cla := &endpointv3.ClusterLoadAssignment{
		ClusterName: clusterName,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:            &corev3.Locality{Region: "r1", Zone: "z1"},
			LoadBalancingWeight: wrapperspb.UInt32(1),
			LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
						Address:       host,
						PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
					}}},
				}},
				LoadBalancingWeight: wrapperspb.UInt32(1),
			}},
		}},
	}
	return map[resource.Type][]types.Resource{
		resource.ListenerType: {lis},
		resource.RouteType:    {route},
		resource.ClusterType:  {edsCluster(clusterName)},
		resource.EndpointType: {cla},
	}
}

// TestE2EGRPCClientThroughRelay runs grpc-go's own xDS client against the
// relay, which fronts go-control-plane: a real RPC to xds:///echo reaches the
// backend the configuration names, and after the control plane points echo at
// a second backend, RPCs move there.
func TestE2EGRPCClientThroughRelay(t *testing.T) {
	ctx := testContext(t)
	const class = "class-grpc"
	b1 := startBackend(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, class, "1", grpcResources(t, "echo", b1.addr))
	r := startRelay(t, m.Addr)

	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "grpc-client-1", "cluster": %q, "locality": {"region": "r1", "zone": "z1"}, "metadata": {"role": "test"}}
	}`, r.Addr(), class)
	builder, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatalf("xDS resolver: %v", err)
	}
	cc, err := grpc.NewClient("xds:///echo", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(builder))
	if err != nil {
		t.Fatalf("dial xds:///echo: %v", err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	hc := healthpb.NewHealthClient(cc)

	check := func(wait bool) error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(wait))
		if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			err = fmt.Errorf("health status %v", resp.GetStatus())
		}
		return err
	}
	if err := check(true); err != nil {
		t.Fatalf("first RPC through xds:///echo: %v", err)
	}
	if b1.calls.Load() != 1 {
		t.Fatalf("backend 1 served %d calls, want 1", b1.calls.Load())
	}
	streams := r.Server().Streams(0)
	if len(streams) != 1 || streams[0].Class != class || streams[0].Node != "grpc-client-1" {
		t.Fatalf("relay streams = %+v, want one stream of grpc-client-1 in %s", streams, class)
	}
	if got := len(streams[0].Types); got != 4 {
		t.Errorf("the grpc-go client subscribed to %d types through the relay, want 4 (LDS, RDS, CDS, EDS)", got)
	}

	b2 := startBackend(t)
	m.Set(t, class, "2", grpcResources(t, "echo", b2.addr))
	eventually(t, ctx, "RPCs to reach backend 2", func() bool {
		if err := check(false); err != nil {
			t.Logf("RPC during the switch: %v", err)
		}
		return b2.calls.Load() > 0
	})
	before := b1.calls.Load()
	for i := range 20 {
		if err := check(false); err != nil {
			t.Fatalf("RPC %d after the switch: %v", i, err)
		}
	}
	if got := b1.calls.Load(); got != before {
		t.Errorf("backend 1 got %d more calls after the switch to backend 2", got-before)
	}
	if r.Server().StreamCount() != 1 {
		t.Errorf("the grpc-go client has %d streams to the relay, want still 1", r.Server().StreamCount())
	}
}
