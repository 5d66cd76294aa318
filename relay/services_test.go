package relay

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// On ADS (SotW and delta), responses of different types arrive in the order
// the class's updates happened.
func TestADSOrder(t *testing.T) {
	cases := []struct {
		proto    int
		listener []string // the Listener subscription
		replace  bool     // updates replace the type's table
	}{
		{0, nil, false},          // SotW, legacy wildcard, merged updates
		{1, []string{"*"}, true}, // delta, explicit wildcard, full states
	}
	for _, tc := range cases {
		p := protocols[tc.proto]
		t.Run(p.name, func(t *testing.T) {
			h := newHarness(t)
			types := []string{ClusterType, EndpointType, ListenerType}
			for _, typeURL := range types {
				h.apply(typeURL, true, resource(t, typeURL, "A", 0))
			}
			c := p.ads(h, t)
			c.subscribe(ClusterType)
			c.subscribe(EndpointType, "A")
			c.subscribe(ListenerType, tc.listener...)
			for _, typeURL := range types {
				c.wantNext(typeURL, resource(t, typeURL, "A", 0)) // first responses follow the requests' order
			}

			orders := [][]int{{0, 1, 2}, {2, 0, 1}, {1, 2, 0}, {0, 2, 1}, {2, 1, 0}, {1, 0, 2}}
			v := 0
			for round := 0; round < 5; round++ {
				for _, order := range orders {
					v++
					for _, i := range order {
						h.apply(types[i], tc.replace, resource(t, types[i], "A", v))
					}
					for _, i := range order {
						c.wantNext(types[i], resource(t, types[i], "A", v))
					}
				}
			}
			c.expectNothing(quietWindow)
		})
	}
}

// perTypeServices are the per-type services with a subscription for each
// (nil: the legacy wildcard) and the proto of their resources.
var perTypeServices = []struct {
	typeURL   string
	names     []string
	want      proto.Message
	deltaOnly bool // VHDS has no SotW method
}{
	{ClusterType, nil, &clusterv3.Cluster{}, false},
	{EndpointType, []string{"r"}, &endpointv3.ClusterLoadAssignment{}, false},
	{ListenerType, []string{"*"}, &listenerv3.Listener{}, false},
	{RouteType, []string{"r"}, &routev3.RouteConfiguration{}, false},
	{ScopedRouteType, []string{"r"}, &routev3.ScopedRouteConfiguration{}, false},
	{SecretType, []string{"r"}, &tlsv3.Secret{}, false},
	{RuntimeType, []string{"r"}, &runtimev3.Runtime{}, false},
	{VirtualHostType, []string{"r"}, &routev3.VirtualHost{}, true},
}

// wantProto requires a to hold a message of want's type.
func wantProto(t *testing.T, a *anypb.Any, want proto.Message) {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	if got, w := m.ProtoReflect().Descriptor().FullName(), want.ProtoReflect().Descriptor().FullName(); got != w {
		t.Fatalf("resource is a %s, want %s", got, w)
	}
}

// Every per-type service answers its type, with resources of the right proto.
func TestPerTypeServices(t *testing.T) {
	h := newHarness(t)
	for _, tc := range perTypeServices {
		if tc.deltaOnly {
			continue
		}
		t.Run(short(tc.typeURL), func(t *testing.T) {
			c := h.perType(t, tc.typeURL)
			c.subscribe(tc.typeURL, tc.names...)
			r1 := resource(t, tc.typeURL, "r", 1)
			h.apply(tc.typeURL, true, r1)
			got := c.nextOf(tc.typeURL)
			wantResources(t, got, r1)
			wantProto(t, got.Resources[0], tc.want)
			c.ack(got)

			// A follow-up request may leave type_url empty on a per-type stream.
			r2 := resource(t, tc.typeURL, "r", 2)
			h.apply(tc.typeURL, true, r2)
			got = c.nextOf(tc.typeURL)
			wantResources(t, got, r2)
			c.send(&request{VersionInfo: got.VersionInfo, ResponseNonce: got.Nonce, ResourceNames: tc.names})
			r3 := resource(t, tc.typeURL, "r", 3)
			h.apply(tc.typeURL, true, r3)
			wantResources(t, c.nextOf(tc.typeURL), r3)
		})
	}
}

// Malformed requests end the stream with InvalidArgument naming the field.
func TestBadRequests(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		name    string
		service string // "" for ADS
		reqs    []*request
		code    codes.Code
		field   string
	}{
		{"no node", "", []*request{{TypeUrl: ClusterType}}, codes.InvalidArgument, "node"},
		{"no node per-type", EndpointType, []*request{{ResourceNames: []string{"A"}}}, codes.InvalidArgument, "node"},
		{"ADS without type_url", "", []*request{{Node: h.node}}, codes.InvalidArgument, "type_url"},
		{"ADS without type_url later", "", []*request{{Node: h.node, TypeUrl: ClusterType}, {TypeUrl: ""}}, codes.InvalidArgument, "type_url"},
		{"mismatched type_url", ClusterType, []*request{{Node: h.node, TypeUrl: EndpointType}}, codes.InvalidArgument, "type_url"},
		{"mismatched type_url later", EndpointType, []*request{{Node: h.node, ResourceNames: []string{"A"}}, {TypeUrl: ClusterType}}, codes.InvalidArgument, "type_url"},
		// A locator-only request would otherwise read as a wildcard.
		{"resource locators", "", []*request{{Node: h.node, TypeUrl: ClusterType, ResourceLocators: []*discoveryv3.ResourceLocator{{Name: "A"}}}}, codes.Unimplemented, "resource_locators"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h.perType(t, tc.service).wantRefused(tc.reqs, tc.code, tc.field)
		})
	}
}

// The relay serves every v3 xDS service under its generated name, with every
// method, and LoadReportingService; the unary Fetch methods answer
// Unimplemented.
func TestServiceMethods(t *testing.T) {
	want := map[string][]string{
		"envoy.service.load_stats.v3.LoadReportingService":      {"StreamLoadStats"},
		"envoy.service.discovery.v3.AggregatedDiscoveryService": {"DeltaAggregatedResources", "StreamAggregatedResources"},
		"envoy.service.listener.v3.ListenerDiscoveryService":    {"DeltaListeners", "FetchListeners", "StreamListeners"},
		"envoy.service.route.v3.RouteDiscoveryService":          {"DeltaRoutes", "FetchRoutes", "StreamRoutes"},
		"envoy.service.route.v3.ScopedRoutesDiscoveryService":   {"DeltaScopedRoutes", "FetchScopedRoutes", "StreamScopedRoutes"},
		"envoy.service.route.v3.VirtualHostDiscoveryService":    {"DeltaVirtualHosts"},
		"envoy.service.cluster.v3.ClusterDiscoveryService":      {"DeltaClusters", "FetchClusters", "StreamClusters"},
		"envoy.service.endpoint.v3.EndpointDiscoveryService":    {"DeltaEndpoints", "FetchEndpoints", "StreamEndpoints"},
		"envoy.service.secret.v3.SecretDiscoveryService":        {"DeltaSecrets", "FetchSecrets", "StreamSecrets"},
		"envoy.service.runtime.v3.RuntimeDiscoveryService":      {"DeltaRuntime", "FetchRuntime", "StreamRuntime"},
	}
	g := grpc.NewServer()
	(&Server{}).Register(g)
	got := map[string][]string{}
	for name, info := range g.GetServiceInfo() {
		for _, m := range info.Methods {
			got[name] = append(got[name], m.Name)
		}
		slices.Sort(got[name])
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("services: got %v, want %v", got, want)
	}

	h := newHarness(t)
	for service, methods := range want {
		for _, m := range methods {
			if !strings.HasPrefix(m, "Fetch") {
				continue
			}
			err := h.conn.Invoke(t.Context(), "/"+service+"/"+m, &request{Node: h.node}, &response{})
			if status.Code(err) != codes.Unimplemented || !strings.Contains(status.Convert(err).Message(), m) {
				t.Errorf("%s: got %v, want Unimplemented naming the method", m, err)
			}
		}
	}
}

// xDS v2 methods are refused with Unimplemented, saying v3 is needed.
func TestV2Refused(t *testing.T) {
	h := newHarness(t)
	for _, method := range []string{
		"/envoy.api.v2.ClusterDiscoveryService/StreamClusters",
		"/envoy.api.v2.EndpointDiscoveryService/StreamEndpoints",
		"/envoy.api.v2.ListenerDiscoveryService/StreamListeners",
		"/envoy.service.discovery.v2.AggregatedDiscoveryService/StreamAggregatedResources",
		"/envoy.service.discovery.v2.RuntimeDiscoveryService/StreamRuntime",
	} {
		t.Run(method, func(t *testing.T) {
			err := callRaw(t, h, method)
			if status.Code(err) != codes.Unimplemented || !strings.Contains(strings.ToLower(status.Convert(err).Message()), "v3") {
				t.Fatalf("got %v, want Unimplemented mentioning v3", err)
			}
		})
	}
	if err := callRaw(t, h, "/no.such.Service/Method"); status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method: got %v, want Unimplemented", err)
	}
}

func callRaw(t *testing.T, h *harness, method string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), recvTimeout)
	defer cancel()
	desc := &grpc.StreamDesc{StreamName: method[strings.LastIndex(method, "/")+1:], ServerStreams: true, ClientStreams: true}
	cs, err := h.conn.NewStream(ctx, desc, method)
	if err != nil {
		return err
	}
	_ = cs.SendMsg(&request{Node: h.node, TypeUrl: "type.googleapis.com/envoy.api.v2.Cluster"})
	err = cs.RecvMsg(&response{})
	if err == nil {
		return fmt.Errorf("%s answered a response", method)
	}
	return err
}
