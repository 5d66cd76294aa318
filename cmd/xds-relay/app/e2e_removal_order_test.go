package app_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// routedTo is grpcResources for target with its cluster named cluster
// (endpoint addr) and the route sending everything there.
func routedTo(t *testing.T, target, cluster, addr string) map[resource.Type][]types.Resource {
	t.Helper()
	res := grpcResources(t, target, addr)
	rc := proto.Clone(res[resource.RouteType][0].(*routev3.RouteConfiguration)).(*routev3.RouteConfiguration)
	rc.VirtualHosts[0].Routes[0].GetRoute().ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: cluster}
	cla := proto.Clone(res[resource.EndpointType][0].(*endpointv3.ClusterLoadAssignment)).(*endpointv3.ClusterLoadAssignment)
	cla.ClusterName = cluster
	res[resource.RouteType] = []types.Resource{rc}
	res[resource.ClusterType] = []types.Resource{edsCluster(cluster)}
	res[resource.EndpointType] = []types.Resource{cla}
	return res
}

// clustersFirst is the state between the two steps of a route change made
// cluster first: to's clusters and endpoints, from's route still naming
// its cluster, which is gone.
func clustersFirst(from, to map[resource.Type][]types.Resource) map[resource.Type][]types.Resource {
	return map[resource.Type][]types.Resource{
		resource.ListenerType: from[resource.ListenerType],
		resource.RouteType:    from[resource.RouteType],
		resource.ClusterType:  to[resource.ClusterType],
		resource.EndpointType: to[resource.EndpointType],
	}
}

// TestE2ERouteChangeBeforeClusterRemoval (issue 23, X8): go-control-plane,
// as a delta and as a SotW upstream asked for every type by the wildcard,
// changes a route from cluster old to cluster new in two steps, the
// clusters first: old's removal reaches the relay before the route that
// stops naming it. A client holding the route is told of old's removal
// only after the route change: grpc-go's RPCs do not fail meanwhile (told
// first, it reports old missing and fails them), a raw SotW client and a
// raw delta client see the new route before a CDS without old.
func TestE2ERouteChangeBeforeClusterRemoval(t *testing.T) {
	for _, proto := range []string{"delta", "sotw"} {
		t.Run(proto, func(t *testing.T) {
			ctx := testContext(t)
			const class = "class-order"
			a, b := startBackend(t), startBackend(t)
			m := startMgmt(t, "127.0.0.1:0")
			from, to := routedTo(t, "echo", "old", a.addr), routedTo(t, "echo", "new", b.addr)
			m.Set(t, class, "1", from)
			r := startRelay(t, m.Addr, upstreamProtocol(proto), withConfig(func(c *app.Config) {
				c.Upstream.Ask = "wildcard"
				c.Delta.ParentRemovalWait = time.Minute // a removal released by its wait comes after the test
			}))

			hc := grpcClient(t, r.Addr(), "grpc-1", class, "echo")
			check := func(wait bool) error {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				_, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(wait))
				return err
			}
			if err := check(true); err != nil {
				t.Fatalf("first RPC: %v", err)
			}
			sotw := dialADS(t, ctx, r.Addr(), "sotw-1", class)
			sotw.Subscribe(resource.ListenerType, "echo")
			sotw.Subscribe(resource.RouteType, "echo-route")
			sotw.Subscribe(resource.ClusterType) // the wildcard, as Envoy asks
			delta := dialDelta(t, ctx, r.Addr(), "delta-1", class)
			delta.Subscribe(resource.ListenerType, "*")
			delta.Subscribe(resource.RouteType, "echo-route")
			delta.Subscribe(resource.ClusterType, "*")
			for range 3 {
				sotw.Next(10 * time.Second)
				delta.Next(10 * time.Second)
			}

			var failed atomic.Int64
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := check(false); err != nil {
						failed.Add(1)
						t.Logf("RPC failed: %v", err)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()

			m.Set(t, class, "2", clustersFirst(from, to))
			// The clients are told of new; old stays until the route goes.
			if got := clusterNames(t, sotw.Next(10*time.Second)); !slices.Contains(got, "old") {
				t.Errorf("SotW client: CDS %v before the route change, want old kept", got)
			}
			if got := nextN(delta, 1); !slices.Equal(got, []string{"CDS [new] -[]"}) {
				t.Errorf("delta client: %q before the route change, want new added and old kept", got)
			}
			time.Sleep(time.Second) // what a client told of old's removal would do, it does meanwhile
			close(stop)
			<-done
			if n := failed.Load(); n > 0 {
				t.Errorf("%d RPCs failed while the route still named old, its removal sent", n)
			}
			m.Set(t, class, "3", to)

			sotwSeen := sotwSequence(t, sotw, 2)
			if want := []string{"RDS [new]", "CDS [new]"}; !slices.Equal(sotwSeen, want) {
				t.Errorf("SotW client saw %q after the route change, want %q", sotwSeen, want)
			}
			if got, want := nextN(delta, 2), []string{"RDS [echo-route] -[]", "CDS [] -[old]"}; !slices.Equal(got, want) {
				t.Errorf("delta client saw %q after the route change, want %q", got, want)
			}
			// (grpc-go may fail an RPC picked in the instant its new route
			// is in place and its balancer not yet: "unknown cluster
			// selected", direct too.)
			eventually(t, ctx, "RPCs to reach the new cluster", func() bool {
				_ = check(false)
				return b.calls.Load() > 0
			})
		})
	}
}

// sotwSequence returns the next n responses of c as "TYPE [names]": the
// clusters a route routes to (RDS), the clusters listed (CDS).
func sotwSequence(t *testing.T, c *adsClient, n int) []string {
	t.Helper()
	var out []string
	for range n {
		resp := c.Next(10 * time.Second)
		switch resp.GetTypeUrl() {
		case resource.RouteType:
			out = append(out, fmt.Sprintf("RDS %v", routedClusters(t, resp)))
		case resource.ClusterType:
			out = append(out, fmt.Sprintf("CDS %v", clusterNames(t, resp)))
		default:
			out = append(out, resp.GetTypeUrl())
		}
	}
	return out
}

// routedClusters are the clusters an RDS response's routes name.
func routedClusters(t *testing.T, resp *discoveryv3.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range resp.GetResources() {
		var rc routev3.RouteConfiguration
		if err := a.UnmarshalTo(&rc); err != nil {
			t.Fatal(err)
		}
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				out = append(out, r.GetRoute().GetCluster())
			}
		}
	}
	return out
}

var _ = clusterv3.Cluster{}
var _ context.Context

// inlineTo is routedTo with the route inline in the Listener.
func inlineTo(t *testing.T, target, cluster, addr string) map[resource.Type][]types.Resource {
	t.Helper()
	res := routedTo(t, target, cluster, addr)
	lis := proto.Clone(res[resource.ListenerType][0].(*listenerv3.Listener)).(*listenerv3.Listener)
	var hcm hcmv3.HttpConnectionManager
	if err := lis.GetApiListener().GetApiListener().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: res[resource.RouteType][0].(*routev3.RouteConfiguration)}
	lis.ApiListener.ApiListener = xdstest.MustAny(t, &hcm)
	res[resource.ListenerType] = []types.Resource{lis}
	delete(res, resource.RouteType)
	return res
}

// TestE2EListenerToRDSBeforeClusterRemoval (issue 23, X8, grpc-go's
// RouteResourceChangeToInline): a Listener's inline route names old; the
// clusters change first (new added, old removed), then the Listener
// switches to RDS, a route naming new. Old's removal waits until the
// client holds that route too, not only the Listener naming it: a
// grpc-go client's RPCs do not fail meanwhile, and a raw delta client is
// told of old's removal after the Listener and the route.
func TestE2EListenerToRDSBeforeClusterRemoval(t *testing.T) {
	ctx := testContext(t)
	const class = "class-inline"
	a, b := startBackend(t), startBackend(t)
	m := startMgmt(t, "127.0.0.1:0")
	from, to := inlineTo(t, "echo", "old", a.addr), routedTo(t, "echo", "new", b.addr)
	m.Set(t, class, "1", from)
	r := startRelay(t, m.Addr, upstreamProtocol("delta"), withConfig(func(c *app.Config) {
		c.Upstream.Ask = "wildcard"
		c.Delta.ParentRemovalWait = time.Minute
	}))
	hc := grpcClient(t, r.Addr(), "grpc-1", class, "echo")
	check := func(wait bool) error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(wait))
		return err
	}
	if err := check(true); err != nil {
		t.Fatalf("first RPC: %v", err)
	}
	delta := dialDelta(t, ctx, r.Addr(), "delta-1", class)
	delta.Subscribe(resource.ListenerType, "*")
	delta.Subscribe(resource.ClusterType, "*")
	nextN(delta, 2)

	m.Set(t, class, "2", map[resource.Type][]types.Resource{
		resource.ListenerType: from[resource.ListenerType],
		resource.ClusterType:  to[resource.ClusterType],
		resource.EndpointType: to[resource.EndpointType],
	})
	if got := nextN(delta, 1); !slices.Equal(got, []string{"CDS [new] -[]"}) {
		t.Errorf("delta client: %q while the Listener still routes to old, want new added and old kept", got)
	}
	m.Set(t, class, "3", to)
	if got := nextN(delta, 1); !slices.Equal(got, []string{"LDS [echo] -[]"}) {
		t.Fatalf("delta client: %q, want the Listener switched to RDS", got)
	}
	delta.Quiet(300 * time.Millisecond) // old's removal waits for the route the Listener names
	delta.Subscribe(resource.RouteType, "echo-route")
	if got, want := nextN(delta, 2), []string{"RDS [echo-route] -[]", "CDS [] -[old]"}; !slices.Equal(got, want) {
		t.Errorf("delta client saw %q once it asked for the route, want %q", got, want)
	}
	for i := range 20 {
		if err := check(false); err != nil && b.calls.Load() == 0 {
			t.Errorf("RPC %d failed before the new route was in place: %v", i, err)
		}
	}
	eventually(t, ctx, "RPCs to reach the new cluster", func() bool {
		_ = check(false)
		return b.calls.Load() > 0
	})
}
