package xdstype

import (
	"slices"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// References returns the names of the Clusters a decoded resource routes
// to, sorted and unique (see shard.Resource.References): a
// RouteConfiguration's route actions (cluster, weighted clusters, mirror
// policies, of its routes and virtual hosts); a Listener's inline route
// configurations (HttpConnectionManager.route_config) and TCP proxies
// (cluster, weighted clusters), in api_listener, the filter chains and the
// default filter chain. Nil for other messages and when none. A cluster
// chosen at run time (cluster_header, a cluster specifier plugin) is no
// name and is not listed. Call it once per resource version.
func References(msg proto.Message) []string {
	var out []string
	switch m := msg.(type) {
	case *routev3.RouteConfiguration:
		out = routeClusters(out, m)
	case *listenerv3.Listener:
		add := func(a *anypb.Any) {
			if a == nil {
				return
			}
			var hcm hcmv3.HttpConnectionManager
			var tcp tcpv3.TcpProxy
			switch {
			case a.MessageIs(&hcm):
				if a.UnmarshalTo(&hcm) == nil {
					out = routeClusters(out, hcm.GetRouteConfig())
				}
			case a.MessageIs(&tcp):
				if a.UnmarshalTo(&tcp) == nil {
					out = appendName(out, tcp.GetCluster())
					for _, w := range tcp.GetWeightedClusters().GetClusters() {
						out = appendName(out, w.GetName())
					}
				}
			}
		}
		add(m.GetApiListener().GetApiListener())
		for _, fc := range append(slices.Clip(m.GetFilterChains()), m.GetDefaultFilterChain()) {
			for _, f := range fc.GetFilters() {
				add(f.GetTypedConfig())
			}
		}
	default:
		return nil
	}
	if len(out) == 0 {
		return nil
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// routeClusters appends the clusters rc's routes name (nil rc: none).
func routeClusters(out []string, rc *routev3.RouteConfiguration) []string {
	mirrors := func(ps []*routev3.RouteAction_RequestMirrorPolicy) {
		for _, p := range ps {
			out = appendName(out, p.GetCluster())
		}
	}
	for _, vh := range rc.GetVirtualHosts() {
		mirrors(vh.GetRequestMirrorPolicies())
		for _, r := range vh.GetRoutes() {
			a := r.GetRoute()
			if a == nil {
				continue
			}
			out = appendName(out, a.GetCluster())
			for _, w := range a.GetWeightedClusters().GetClusters() {
				out = appendName(out, w.GetName())
			}
			mirrors(a.GetRequestMirrorPolicies())
		}
	}
	return out
}

func appendName(out []string, name string) []string {
	if name == "" {
		return out
	}
	return append(out, name)
}
