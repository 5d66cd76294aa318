package xdstypes

import (
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Children returns the names of the resources a decoded resource refers to
// by name (see shard.ChildType), sorted and unique: an EDS Cluster's service
// name (eds_cluster_config.service_name, else the cluster's name); the
// RouteConfiguration names of a Listener's HttpConnectionManagers with RDS
// (in api_listener, the filter chains and the default filter chain). Nil for
// other messages. Call it once per resource version: it decodes the
// Listener's connection managers.
func Children(msg proto.Message) []string {
	switch m := msg.(type) {
	case *clusterv3.Cluster:
		if m.GetType() != clusterv3.Cluster_EDS {
			return nil
		}
		if n := m.GetEdsClusterConfig().GetServiceName(); n != "" {
			return []string{n}
		}
		return []string{m.GetName()}
	case *listenerv3.Listener:
		var out []string
		add := func(a *anypb.Any) {
			var hcm hcmv3.HttpConnectionManager
			if a == nil || !a.MessageIs(&hcm) || a.UnmarshalTo(&hcm) != nil {
				return
			}
			if n := hcm.GetRds().GetRouteConfigName(); n != "" {
				out = append(out, n)
			}
		}
		add(m.GetApiListener().GetApiListener())
		for _, fc := range append(slices.Clip(m.GetFilterChains()), m.GetDefaultFilterChain()) {
			for _, f := range fc.GetFilters() {
				add(f.GetTypedConfig())
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return nil
}
