package upstream

import (
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/shard/store"
)

const listenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"

func edsClusterNamed(name, service string) *clusterv3.Cluster {
	return &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: service,
			EdsConfig: &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}}}
}

func rdsHCM(t *testing.T, route string) *anypb.Any {
	t.Helper()
	a, err := anypb.New(&hcmv3.HttpConnectionManager{StatPrefix: "s",
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: route}}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The validator records, once per resource version, the names of the
// resources a Cluster (its EDS service name) or a Listener (its RDS route
// configurations) refers to; a resource held keeps them without being
// decoded again.
func TestValidatorRecordsChildren(t *testing.T) {
	held := store.New()
	v := &validator{store: held}
	check := func(typeURL string, raws [][]byte, want map[string][]string) {
		t.Helper()
		cands, _, err := unwrapSotW(raws)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := v.resources(typeURL, cands)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			held.Acquire(r) // as the class's table does
			if !slices.Equal(r.Children(), want[r.Name]) {
				t.Errorf("%s children %q, want %q", r.Name, r.Children(), want[r.Name])
			}
		}
	}
	clusters := [][]byte{
		xdstest.AnyBytes(edsClusterNamed("a", "")),
		xdstest.AnyBytes(edsClusterNamed("b", "b-eds")),
		xdstest.AnyBytes(&clusterv3.Cluster{Name: "static"}),
	}
	want := map[string][]string{"a": {"a"}, "b": {"b-eds"}}
	check(clusterType, clusters, want)
	check(clusterType, clusters, want) // held: not decoded, same children

	chain := func(route string) *listenerv3.FilterChain {
		return &listenerv3.FilterChain{Filters: []*listenerv3.Filter{{Name: "hcm",
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: rdsHCM(t, route)}}}}
	}
	listeners := [][]byte{
		xdstest.AnyBytes(&listenerv3.Listener{Name: "api", ApiListener: &listenerv3.ApiListener{ApiListener: rdsHCM(t, "r-api")}}),
		xdstest.AnyBytes(&listenerv3.Listener{Name: "chains", FilterChains: []*listenerv3.FilterChain{chain("r2"), chain("r1"), chain("r1")},
			DefaultFilterChain: chain("r3")}),
		xdstest.AnyBytes(&listenerv3.Listener{Name: "inline", ApiListener: &listenerv3.ApiListener{ApiListener: func() *anypb.Any {
			a, _ := anypb.New(&hcmv3.HttpConnectionManager{StatPrefix: "s"})
			return a
		}()}}),
	}
	check(listenerType, listeners, map[string][]string{"api": {"r-api"}, "chains": {"r1", "r2", "r3"}})
}
