package bench

import (
	"fmt"
	"maps"
	"slices"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Type URLs of the four types a proxy's ADS stream carries, in the order
// Envoy depends on them.
const (
	ListenerType = resource.ListenerType
	RouteType    = resource.RouteType
	EndpointType = resource.EndpointType
)

// xdsTypes are the types a synthetic configuration holds.
var xdsTypes = []string{ListenerType, RouteType, ClusterType, EndpointType}

// Topology is the size of one class's synthetic configuration.
type Topology struct {
	Listeners    int // HTTP connection managers, each fetching a route configuration by RDS
	Routes       int // route configurations; listener i uses route i mod Routes
	VirtualHosts int // virtual hosts per route configuration, each routing to a cluster
	Clusters     int // EDS clusters always present (churn adds and removes more)
	Endpoints    int // endpoints per cluster (its ClusterLoadAssignment)
}

// DefaultTopology is a mid-sized sidecar's configuration.
var DefaultTopology = Topology{Listeners: 10, Routes: 10, VirtualHosts: 5, Clusters: 50, Endpoints: 5}

// Validate reports a topology that cannot form a consistent configuration.
func (t Topology) Validate() error {
	if t.Listeners < 1 || t.Routes < 1 || t.VirtualHosts < 1 || t.Clusters < 1 || t.Endpoints < 1 {
		return fmt.Errorf("topology %+v: every count must be at least 1", t)
	}
	if t.Routes > t.Listeners {
		return fmt.Errorf("topology %+v: more routes than listeners leaves routes no listener uses", t)
	}
	return nil
}

// Config is one class's synthetic Envoy configuration: which resources
// exist and each one's revision. Its content is a pure function of the
// class, the topology and the revisions, so the churn that produced a
// generation reproduces it exactly. Not safe for concurrent use.
type Config struct {
	Class      string
	Topo       Topology
	Generation int // bumped by every change (the snapshot version)

	listeners, routes map[int]int // index → revision
	clusters          map[int]int // index → revision of the Cluster
	endpoints         map[int]int // cluster index → revision of its ClusterLoadAssignment
	nextCluster       int         // index of the next cluster churn adds
}

// NewConfig returns generation 0 of class's configuration.
func NewConfig(class string, topo Topology) *Config {
	c := &Config{Class: class, Topo: topo, listeners: map[int]int{}, routes: map[int]int{}, clusters: map[int]int{}, endpoints: map[int]int{}}
	for i := range topo.Listeners {
		c.listeners[i] = 0
	}
	for i := range topo.Routes {
		c.routes[i] = 0
	}
	for i := range topo.Clusters {
		c.clusters[i], c.endpoints[i] = 0, 0
	}
	c.nextCluster = topo.Clusters
	return c
}

// Version is the snapshot version of the current generation.
func (c *Config) Version() string { return fmt.Sprintf("g%d", c.Generation) }

// Resources builds the configuration's resources, by type.
func (c *Config) Resources() map[resource.Type][]types.Resource {
	out := map[resource.Type][]types.Resource{}
	for _, i := range slices.Sorted(maps.Keys(c.listeners)) {
		out[ListenerType] = append(out[ListenerType], c.listener(i))
	}
	for _, i := range slices.Sorted(maps.Keys(c.routes)) {
		out[RouteType] = append(out[RouteType], c.route(i))
	}
	for _, i := range slices.Sorted(maps.Keys(c.clusters)) {
		out[ClusterType] = append(out[ClusterType], c.cluster(i))
		out[EndpointType] = append(out[EndpointType], c.loadAssignment(i))
	}
	return out
}

func listenerName(i int) string { return fmt.Sprintf("listener-%04d", i) }
func routeName(i int) string    { return fmt.Sprintf("route-%04d", i) }
func soakClusterName(i int) string {
	return fmt.Sprintf("outbound|8080||svc-%05d.bench.svc.cluster.local", i)
}
func serviceName(i int) string        { return fmt.Sprintf("svc-%05d.bench.svc.cluster.local", i) }
func virtualHostName(r, v int) string { return fmt.Sprintf("vh-%04d-%02d", r, v) }

// ads is the config source of RDS and EDS: the ADS stream itself.
var ads = &corev3.ConfigSource{
	ResourceApiVersion:    corev3.ApiVersion_V3,
	ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
}

// mustAny wraps a message built here; it cannot fail for these types.
func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

// listener i: an HTTP connection manager on port 10000+i whose routes come
// by RDS; a revision changes its idle timeout.
func (c *Config) listener(i int) *listenerv3.Listener {
	rev := c.listeners[i]
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: fmt.Sprintf("outbound_0.0.0.0_%d", 10000+i),
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    ads,
			RouteConfigName: routeName(i % c.Topo.Routes),
		}},
		StreamIdleTimeout: durationpb.New(5*time.Minute + time.Duration(rev)*time.Second),
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       wellknown.Router,
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	}
	return &listenerv3.Listener{
		Name: listenerName(i),
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(10000 + i)},
		}}},
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name:       wellknown.HTTPConnectionManager,
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)},
		}}}},
	}
}

// route r: VirtualHosts virtual hosts, each routing to one of the clusters
// that are always present; a revision changes the header every route adds.
func (c *Config) route(r int) *routev3.RouteConfiguration {
	rev := c.routes[r]
	rc := &routev3.RouteConfiguration{Name: routeName(r)}
	for v := range c.Topo.VirtualHosts {
		target := (r*c.Topo.VirtualHosts + v) % c.Topo.Clusters
		rc.VirtualHosts = append(rc.VirtualHosts, &routev3.VirtualHost{
			Name:    virtualHostName(r, v),
			Domains: []string{serviceName(target), serviceName(target) + ":8080"},
			Routes: []*routev3.Route{{
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: soakClusterName(target)},
					Timeout:          durationpb.New(15 * time.Second),
					RetryPolicy:      &routev3.RetryPolicy{RetryOn: "5xx,connect-failure", NumRetries: wrapperspb.UInt32(2)},
				}},
				RequestHeadersToAdd: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-bench-revision", Value: fmt.Sprint(rev)}}},
			}},
		})
	}
	return rc
}

// cluster i: EDS over ADS; a revision changes its connect timeout.
func (c *Config) cluster(i int) *clusterv3.Cluster {
	rev := c.clusters[i]
	return &clusterv3.Cluster{
		Name:                 soakClusterName(i),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads, ServiceName: serviceName(i)},
		ConnectTimeout:       durationpb.New(time.Second + time.Duration(rev)*time.Millisecond),
		LbPolicy:             clusterv3.Cluster_LEAST_REQUEST,
		CircuitBreakers: &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			MaxConnections: wrapperspb.UInt32(1024), MaxRequests: wrapperspb.UInt32(1024),
		}}},
	}
}

// loadAssignment of cluster i: Endpoints pod addresses in one locality; a
// revision moves them (pods replaced).
func (c *Config) loadAssignment(i int) *endpointv3.ClusterLoadAssignment {
	rev := c.endpoints[i]
	var lbs []*endpointv3.LbEndpoint
	for j := range c.Topo.Endpoints {
		ip := fmt.Sprintf("10.%d.%d.%d", (i/250)%250, i%250, (j+rev*c.Topo.Endpoints)%250+1)
		lbs = append(lbs, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080},
				}}},
			}},
			HealthStatus:        corev3.HealthStatus_HEALTHY,
			LoadBalancingWeight: wrapperspb.UInt32(1),
		})
	}
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: serviceName(i),
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:    &corev3.Locality{Region: "bench-region", Zone: fmt.Sprintf("bench-zone-%d", i%3)},
			LbEndpoints: lbs,
		}},
	}
}
