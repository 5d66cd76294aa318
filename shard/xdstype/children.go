package xdstype

import (
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// clusterChildren is Cluster.Children: an EDS Cluster's service name
// (eds_cluster_config.service_name, else the cluster's name); nil for other
// clusters and other messages.
func clusterChildren(msg proto.Message) []string {
	m, ok := msg.(*clusterv3.Cluster)
	if !ok || m.GetType() != clusterv3.Cluster_EDS {
		return nil
	}
	if n := m.GetEdsClusterConfig().GetServiceName(); n != "" {
		return []string{n}
	}
	return []string{m.GetName()}
}

// listenerChildren is Listener.Children: the RouteConfiguration names of a
// Listener's HttpConnectionManagers with RDS (in api_listener, the filter
// chains and the default filter chain), sorted and unique; nil for other
// messages. It decodes the connection managers.
func listenerChildren(msg proto.Message) []string {
	m, ok := msg.(*listenerv3.Listener)
	if !ok {
		return nil
	}
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
