package xdstest

import (
	"fmt"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The four core type URLs.
const (
	ListenerType = resource.ListenerType
	RouteType    = resource.RouteType
	ClusterType  = resource.ClusterType
	EndpointType = resource.EndpointType
)

// SecretType is the SDS type URL: served by ADS and its own service, not
// one of the core types Resource builds.
const SecretType = resource.SecretType

// Types are the core type URLs in make-before-break order (parents first).
var Types = []string{ClusterType, EndpointType, ListenerType, RouteType}

// FullState reports whether SotW responses of typeURL carry the complete
// state (Listener and Cluster: spec "Grouping Resources into Responses").
func FullState(typeURL string) bool { return typeURL == ListenerType || typeURL == ClusterType }

// Short names a type URL in one letter (L, R, C, E) for schedules and logs.
func Short(typeURL string) string {
	switch typeURL {
	case ListenerType:
		return "L"
	case RouteType:
		return "R"
	case ClusterType:
		return "C"
	case EndpointType:
		return "E"
	}
	return typeURL
}

// Long is the inverse of Short.
func Long(short string) string {
	for _, t := range Types {
		if Short(t) == short {
			return t
		}
	}
	return short
}

// Resource builds the resource name of typeURL at generation gen (>= 1):
// a small, valid resource whose content differs between generations.
func Resource(typeURL, name string, gen int) types.Resource {
	switch typeURL {
	case ListenerType:
		return &listenerv3.Listener{Name: name, StatPrefix: fmt.Sprintf("gen-%d", gen)}
	case RouteType:
		return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{
			Name: fmt.Sprintf("vh-%d", gen), Domains: []string{"*"}}}}
	case ClusterType:
		return &clusterv3.Cluster{
			Name:                 name,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &corev3.ConfigSource{
				ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
				ResourceApiVersion:    corev3.ApiVersion_V3,
			}},
			ConnectTimeout: durationpb.New(time.Duration(gen) * time.Second),
			LbPolicy:       clusterv3.Cluster_ROUND_ROBIN,
		}
	case EndpointType:
		return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(10000 + gen)}}}},
			}}}},
		}}}
	}
	panic("xdstest: no resource builder for " + typeURL)
}

// Generation decodes a resource built by Resource and returns its name and
// generation; it fails unless the resource is exactly what Resource builds
// for that name and generation.
func Generation(a *anypb.Any) (string, int, error) {
	msg, err := a.UnmarshalNew()
	if err != nil {
		return "", 0, fmt.Errorf("decode %s: %w", a.GetTypeUrl(), err)
	}
	var name string
	var gen int
	switch m := msg.(type) {
	case *listenerv3.Listener:
		name = m.GetName()
		_, _ = fmt.Sscanf(m.GetStatPrefix(), "gen-%d", &gen)
	case *routev3.RouteConfiguration:
		name = m.GetName()
		if len(m.GetVirtualHosts()) > 0 {
			_, _ = fmt.Sscanf(m.GetVirtualHosts()[0].GetName(), "vh-%d", &gen)
		}
	case *clusterv3.Cluster:
		name, gen = m.GetName(), int(m.GetConnectTimeout().GetSeconds())
	case *endpointv3.ClusterLoadAssignment:
		name = m.GetClusterName()
		if e := m.GetEndpoints(); len(e) > 0 && len(e[0].GetLbEndpoints()) > 0 {
			gen = int(e[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()) - 10000
		}
	default:
		return "", 0, fmt.Errorf("unexpected type %s", a.GetTypeUrl())
	}
	if gen < 1 || !proto.Equal(msg, Resource(a.GetTypeUrl(), name, gen)) {
		return name, 0, fmt.Errorf("%s %q: content is no generation of xdstest.Resource", Short(a.GetTypeUrl()), name)
	}
	return name, gen, nil
}

// MustAny wraps m in an Any, failing the test if it cannot.
func MustAny(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
