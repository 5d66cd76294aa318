package xdstype

import (
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	runtimeservice "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	secretservice "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Type is what the relay knows of one resource type. The registered Types
// are read-only.
type Type struct {
	// URL is the type URL, as go-control-plane's resource package spells it.
	URL string
	// Message is the resource's message: what validation, REST-JSON and the
	// file source decode it as. Every registered message has its name in
	// field 1 (name; cluster_name for a ClusterLoadAssignment), which is
	// where package shard/wire reads it without decoding.
	Message protoreflect.MessageType
	// Short is the type's usual name (LDS, CDS, …), as the status page
	// shows it.
	Short string
	// Label is the type's value of the metrics' type label: its message's
	// name without the package.
	Label string
	// Service is the v3 per-type discovery service of the type: its Stream*
	// (SotW) and Delta* methods serve the type, its Fetch* ones answer
	// Unimplemented.
	Service *grpc.ServiceDesc
	// RESTPath is the type's REST-JSON polling endpoint (xds-api-endpoints
	// "REST endpoints"); "" when it has none.
	RESTPath string
	// FullState: SotW responses carry every resource of the type, and a
	// resource absent from one is deleted (the spec's Listener and Cluster;
	// grpc-go's AllResourcesRequiredInSotW).
	FullState bool
	// Child is the type of the resources the type's resources refer to by
	// name: RouteConfiguration for a Listener (RDS), ClusterLoadAssignment
	// for a Cluster (EDS); nil for the others. A delta client is told of a
	// child's removal before its parent's (spec "Eventual consistency
	// considerations": what replaces a resource is in place before what it
	// refers to goes).
	Child *Type
	// Children reads, from a decoded resource, the names of the Child
	// resources it refers to, sorted and unique; nil when Child is. Call it
	// once per resource version: it may decode nested messages.
	Children func(proto.Message) []string
	// ApplyOrder ranks the type in the order the file source pushes its
	// types, so that what a resource refers to is pushed before it: lower
	// first; equal ranks, and then unregistered types, by URL.
	ApplyOrder int
	// Secret: the type's resources hold private keys, and go only to
	// clients with a verified certificate (tls.allow_secrets_without_client_cert).
	Secret bool
}

// URLPrefix is the prefix of the canonical type URL of every type.
const URLPrefix = resource.APITypePrefix

// The file source's ranks (Type.ApplyOrder): secrets, clusters, endpoints,
// listeners, routes, then the rest.
const (
	applySecrets = iota + 1
	applyClusters
	applyEndpoints
	applyListeners
	applyRoutes
	applyRest
)

// The registered types. Adding one is an entry here, in all, and its cases
// in the tests (xdstype_test.go and the consumers' agreement test,
// cmd/xds-relay/app/xdstype_test.go).
var (
	Listener = &Type{
		URL:        resource.ListenerType,
		Message:    (*listenerv3.Listener)(nil).ProtoReflect().Type(),
		Short:      "LDS",
		Label:      "Listener",
		Service:    &listenerservice.ListenerDiscoveryService_ServiceDesc,
		RESTPath:   resource.FetchListeners,
		FullState:  true,
		Child:      Route,
		Children:   listenerChildren,
		ApplyOrder: applyListeners,
	}
	Route = &Type{
		URL:        resource.RouteType,
		Message:    (*routev3.RouteConfiguration)(nil).ProtoReflect().Type(),
		Short:      "RDS",
		Label:      "RouteConfiguration",
		Service:    &routeservice.RouteDiscoveryService_ServiceDesc,
		RESTPath:   resource.FetchRoutes,
		ApplyOrder: applyRoutes,
	}
	ScopedRoute = &Type{
		URL:        resource.ScopedRouteType,
		Message:    (*routev3.ScopedRouteConfiguration)(nil).ProtoReflect().Type(),
		Short:      "SRDS",
		Label:      "ScopedRouteConfiguration",
		Service:    &routeservice.ScopedRoutesDiscoveryService_ServiceDesc,
		RESTPath:   resource.FetchScopedRoutes,
		ApplyOrder: applyRest,
	}
	// VirtualHost has no SotW method and no REST endpoint: VHDS is delta
	// only.
	VirtualHost = &Type{
		URL:        resource.VirtualHostType,
		Message:    (*routev3.VirtualHost)(nil).ProtoReflect().Type(),
		Short:      "VHDS",
		Label:      "VirtualHost",
		Service:    &routeservice.VirtualHostDiscoveryService_ServiceDesc,
		ApplyOrder: applyRest,
	}
	Cluster = &Type{
		URL:        resource.ClusterType,
		Message:    (*clusterv3.Cluster)(nil).ProtoReflect().Type(),
		Short:      "CDS",
		Label:      "Cluster",
		Service:    &clusterservice.ClusterDiscoveryService_ServiceDesc,
		RESTPath:   resource.FetchClusters,
		FullState:  true,
		Child:      Endpoint,
		Children:   clusterChildren,
		ApplyOrder: applyClusters,
	}
	Endpoint = &Type{
		URL:        resource.EndpointType,
		Message:    (*endpointv3.ClusterLoadAssignment)(nil).ProtoReflect().Type(),
		Short:      "EDS",
		Label:      "ClusterLoadAssignment",
		Service:    &endpointservice.EndpointDiscoveryService_ServiceDesc,
		RESTPath:   resource.FetchEndpoints,
		ApplyOrder: applyEndpoints,
	}
	Secret = &Type{
		URL:        resource.SecretType,
		Message:    (*tlsv3.Secret)(nil).ProtoReflect().Type(),
		Short:      "SDS",
		Label:      "Secret",
		Service:    &secretservice.SecretDiscoveryService_ServiceDesc,
		RESTPath:   resource.FetchSecrets,
		ApplyOrder: applySecrets,
		Secret:     true,
	}
	Runtime = &Type{
		URL:        resource.RuntimeType,
		Message:    (*runtimeservice.Runtime)(nil).ProtoReflect().Type(),
		Short:      "RTDS",
		Label:      "Runtime",
		Service:    &runtimeservice.RuntimeDiscoveryService_ServiceDesc,
		RESTPath:   resource.FetchRuntimes,
		ApplyOrder: applyRest,
	}
)

// all is every registered type, in the order All returns them.
var all = []*Type{Listener, Route, ScopedRoute, VirtualHost, Cluster, Endpoint, Secret, Runtime}

// legacySecrets are the message names of Secrets in earlier API versions,
// which IsSecret also matches, in case an upstream still serves them.
var legacySecrets = []string{"envoy.api.v2.auth.Secret"}

var (
	byURL     = make(map[string]*Type, len(all))
	byMessage = make(map[string]*Type, len(all)) // by message full name
)

func init() {
	for _, t := range all {
		byURL[t.URL] = t
		byMessage[string(t.Message.Descriptor().FullName())] = t
	}
}

// All returns the registered types: Listener, Route, ScopedRoute,
// VirtualHost, Cluster, Endpoint, Secret, Runtime.
func All() []*Type { return slices.Clone(all) }

// Lookup returns the registered type of typeURL, nil when there is none.
func Lookup(typeURL string) *Type { return byURL[typeURL] }

// FullState reports whether SotW responses of typeURL carry all of its
// resources (Type.FullState); false for an unregistered type.
func FullState(typeURL string) bool {
	t := byURL[typeURL]
	return t != nil && t.FullState
}

// ChildType is the URL of typeURL's Child type, "" when it has none (or is
// not registered).
func ChildType(typeURL string) string {
	if t := byURL[typeURL]; t != nil && t.Child != nil {
		return t.Child.URL
	}
	return ""
}

// ApplyOrder is typeURL's Type.ApplyOrder; an unregistered type ranks with
// the last registered ones.
func ApplyOrder(typeURL string) int {
	if t := byURL[typeURL]; t != nil {
		return t.ApplyOrder
	}
	return applyRest
}

// IsSecret reports whether typeURL names a Secret type (Type.Secret), or the
// Secret of an earlier API version. It matches the message name after the
// URL's last "/", so that no spelling of the prefix gets around a check.
func IsSecret(typeURL string) bool {
	name := typeURL[strings.LastIndexByte(typeURL, '/')+1:]
	if t := byMessage[name]; t != nil {
		return t.Secret
	}
	return slices.Contains(legacySecrets, name)
}
