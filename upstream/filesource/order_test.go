package filesource

import (
	"slices"
	"testing"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// Types are pushed in the registry's apply order: secrets, clusters,
// endpoints, listeners, routes, then the rest (registered or not) by URL.
func TestApplyOrderFollowsTheRegistry(t *testing.T) {
	var urls []string
	for _, typ := range xdstype.All() {
		urls = append(urls, typ.URL)
	}
	urls = append(urls, resourcev3.ExtensionConfigType)
	slices.Reverse(urls)
	want := []string{
		resourcev3.SecretType, resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType,
		resourcev3.ExtensionConfigType, resourcev3.ScopedRouteType, resourcev3.VirtualHostType, resourcev3.RuntimeType,
	}
	if got := applyOrder(urls); !slices.Equal(got, want) {
		t.Errorf("apply order\n%q\nwant\n%q", got, want)
	}
}
