package relay

import resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

// The type URLs the tests name (the relay itself reads package xdstype).
const (
	ListenerType    = resourcev3.ListenerType
	RouteType       = resourcev3.RouteType
	ScopedRouteType = resourcev3.ScopedRouteType
	ClusterType     = resourcev3.ClusterType
	EndpointType    = resourcev3.EndpointType
	SecretType      = resourcev3.SecretType
	RuntimeType     = resourcev3.RuntimeType
	VirtualHostType = resourcev3.VirtualHostType
)
