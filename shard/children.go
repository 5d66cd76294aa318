package shard

// Type URLs of the resources Listeners and Clusters refer to by name.
const (
	RouteType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	EndpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// ChildType is the type of the resources a resource of typeURL refers to by
// name (Resource.Children): RouteConfiguration for a Listener (its RDS
// route_config_name), ClusterLoadAssignment for a Cluster (its EDS service
// name); "" for other types. A client is told of a child's removal before
// its parent's (spec "Eventual consistency considerations": stale clusters
// and their endpoints are removed after what replaces them is in place).
func ChildType(typeURL string) string {
	switch typeURL {
	case ListenerType:
		return RouteType
	case ClusterType:
		return EndpointType
	}
	return ""
}
