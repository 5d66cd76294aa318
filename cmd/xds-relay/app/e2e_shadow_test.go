package app_test

import (
	"context"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// grpcClient dials xds:///target through the relay at addr as a grpc-go
// xDS client (its own xDS client and ADS stream) of class.
func grpcClient(t *testing.T, addr, id, class, target string) healthpb.HealthClient {
	t.Helper()
	return healthpb.NewHealthClient(grpcXDSConn(t, bootstrapFor(id, class, xdsServer(addr)), target))
}

// withoutCluster is res without its Cluster and ClusterLoadAssignment (the
// Listener and route still name the cluster).
func withoutCluster(res map[resource.Type][]types.Resource) map[resource.Type][]types.Resource {
	return map[resource.Type][]types.Resource{
		resource.ListenerType: res[resource.ListenerType],
		resource.RouteType:    res[resource.RouteType],
	}
}

// TestE2EShadowOfRemovedClusterNotServed (issue 23, X6): go-control-plane
// as a SotW upstream, a grpc-go client. The client's Cluster c (endpoint
// A) is deleted, then c is recreated with no endpoints. The client's
// dropped ClusterLoadAssignment must not come back from the relay's shadow
// of it: the full-state CDS said c was gone, so the endpoint A it named is
// no longer the control plane's. Direct, and through a delta upstream, the
// client has no backend; no RPC may reach A.
func TestE2EShadowOfRemovedClusterNotServed(t *testing.T) {
	for _, proto := range []string{"sotw", "delta"} {
		t.Run(proto, func(t *testing.T) {
			ctx := testContext(t)
			const class = "class-shadow"
			a := startBackend(t)
			m := startMgmt(t, "127.0.0.1:0")
			full := grpcResources(t, "echo", a.addr)
			m.Set(t, class, "1", full)
			r := startRelay(t, m.Addr, upstreamProtocol(proto))
			hc := grpcClient(t, r.Addr(), "grpc-1", class, "echo")
			check := func(wait bool, d time.Duration) error {
				cctx, cancel := context.WithTimeout(ctx, d)
				defer cancel()
				_, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(wait))
				return err
			}
			if err := check(true, 5*time.Second); err != nil {
				t.Fatalf("first RPC: %v", err)
			}

			// c goes, with its endpoints: the client drops its assignment.
			m.Set(t, class, "2", withoutCluster(full))
			eventually(t, ctx, "RPCs to fail once the cluster is gone", func() bool { return check(false, time.Second) != nil })
			eventually(t, ctx, "the client to drop its assignment", func() bool {
				for _, st := range r.Server().Streams(0) {
					for _, ty := range st.Types {
						if ty.TypeURL == resource.EndpointType && len(ty.Names) > 0 {
							return false
						}
					}
				}
				return true
			})

			// c comes back without endpoints, the route still naming it.
			back := withoutCluster(full)
			back[resource.ClusterType] = full[resource.ClusterType]
			m.Set(t, class, "3", back)
			before := a.calls.Load()
			deadline := time.Now().Add(4 * time.Second)
			for time.Now().Before(deadline) {
				_ = check(false, 300*time.Millisecond)
				time.Sleep(100 * time.Millisecond)
			}
			if got := a.calls.Load() - before; got != 0 {
				t.Fatalf("%d RPCs reached endpoint A after its cluster was deleted and recreated without endpoints", got)
			}
		})
	}
}

var _ = clusterv3.Cluster{}
var _ = endpointv3.ClusterLoadAssignment{}
var _ context.Context
