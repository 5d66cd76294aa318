package relay

import (
	"fmt"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
)

func statusProto(msg string) *rpcstatus.Status {
	return &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: msg}
}

func short(typeURL string) string { return typeURL[strings.LastIndex(typeURL, ".")+1:] }

// resource builds the named resource of typeURL from a real envoy proto; v
// varies its content.
func resource(t testing.TB, typeURL, name string, v int) *shard.Resource {
	t.Helper()
	marker := fmt.Sprintf("v%d", v)
	var m proto.Message
	switch typeURL {
	case ClusterType:
		m = &clusterv3.Cluster{Name: name, AltStatName: marker}
	case EndpointType:
		m = &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{Priority: uint32(v)}}}
	case ListenerType:
		m = &listenerv3.Listener{Name: name, StatPrefix: marker}
	case RouteType:
		m = &routev3.RouteConfiguration{Name: name, InternalOnlyHeaders: []string{marker}}
	case ScopedRouteType:
		m = &routev3.ScopedRouteConfiguration{Name: name, RouteConfigurationName: marker}
	case SecretType:
		m = &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_GenericSecret{GenericSecret: &tlsv3.GenericSecret{
			Secret: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: marker}}}}}
	case RuntimeType:
		layer, err := structpb.NewStruct(map[string]any{"v": marker})
		if err != nil {
			t.Fatal(err)
		}
		m = &runtimev3.Runtime{Name: name, Layer: layer}
	default:
		t.Fatalf("no resource builder for %q", typeURL)
	}
	return encode(t, name, m)
}

func encode(t testing.TB, name string, m proto.Message) *shard.Resource {
	t.Helper()
	b := xdstest.AnyBytes(m)
	return &shard.Resource{Name: name, Any: b, Hash: dedup.ResourceHash(b)}
}

// resourceName decodes a resource and returns its name (field 1 of every v3
// resource type).
func resourceName(t testing.TB, a *anypb.Any) string {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatalf("undecodable %s resource: %v", a.TypeUrl, err)
	}
	r := m.ProtoReflect()
	return r.Get(r.Descriptor().Fields().ByNumber(1)).String()
}

// names returns the response's resource names, in response order.
func names(t testing.TB, resp *response) []string {
	t.Helper()
	out := make([]string, 0, len(resp.Resources))
	for _, a := range resp.Resources {
		out = append(out, resourceName(t, a))
	}
	return out
}

// wantResources asserts resp carries exactly rs (by name and content).
func wantResources(t testing.TB, resp *response, rs ...*shard.Resource) {
	t.Helper()
	got := map[string]*anypb.Any{}
	for _, a := range resp.Resources {
		got[resourceName(t, a)] = a
	}
	want := make([]string, 0, len(rs))
	for _, r := range rs {
		want = append(want, r.Name)
	}
	if len(resp.Resources) != len(rs) {
		t.Fatalf("%s response %s has %v, want %v", short(resp.TypeUrl), resp.VersionInfo, names(t, resp), want)
	}
	for _, r := range rs {
		a := &anypb.Any{}
		if err := proto.Unmarshal(r.Any, a); err != nil {
			t.Fatal(err)
		}
		g, ok := got[r.Name]
		if !ok {
			t.Fatalf("%s response %s has %v, want %v", short(resp.TypeUrl), resp.VersionInfo, names(t, resp), want)
		}
		if !proto.Equal(g, a) {
			t.Fatalf("%s response %s: resource %q has stale or wrong content", short(resp.TypeUrl), resp.VersionInfo, r.Name)
		}
	}
}
