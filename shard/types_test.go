package shard

import resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

// The type URLs the tests name (the package itself reads package xdstype).
const (
	ListenerType = resourcev3.ListenerType
	RouteType    = resourcev3.RouteType
	ClusterType  = resourcev3.ClusterType
	EndpointType = resourcev3.EndpointType
)
