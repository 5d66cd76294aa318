package app_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/bench/xdstest"
)

// lrsResources is grpcResources with the cluster's load reported to the
// xDS server itself (lrs_server: self), as grpc-go's own LRS tests have it.
func lrsResources(t *testing.T, target, addr string) map[resource.Type][]types.Resource {
	t.Helper()
	res := grpcResources(t, target, addr)
	c := res[resource.ClusterType][0].(*clusterv3.Cluster)
	c.LrsServer = &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Self{Self: &corev3.SelfConfigSource{}}}
	return res
}

// TestE2EGRPCClientLoadReportsReachControlPlane: two grpc-go xDS clients of
// one class, whose cluster reports load to its xDS server (lrs_server:
// self), make RPCs through the relay; the control plane's LRS server gets
// one stream for the class, opened with the class's upstream node, and
// load reports of the cluster counting every RPC of both clients. The
// stream ends once the last client of the class stops reporting.
func TestE2EGRPCClientLoadReportsReachControlPlane(t *testing.T) {
	ctx := testContext(t)
	const class, target = "class-lrs", "echo"
	cluster := target + "-cluster"
	lrs := xdstest.NewLRSServer(&lrsv3.LoadStatsResponse{
		Clusters:              []string{cluster},
		LoadReportingInterval: durationpb.New(100 * time.Millisecond),
	})
	b := startBackend(t)
	m := startMgmt(t, "127.0.0.1:0", func(o *xdstest.CPOptions) { o.LRS = lrs })
	m.Set(t, class, "1", lrsResources(t, target, b.addr))
	r := startRelay(t, m.Addr)

	const perClient = 7
	var conns []*grpc.ClientConn
	for i := range 2 {
		cc := grpcXDSConn(t, bootstrapFor(fmt.Sprintf("grpc-client-%d", i), class, xdsServer(r.Addr())), target)
		conns = append(conns, cc)
		hc := healthpb.NewHealthClient(cc)
		for j := range perClient {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			cancel()
			if err != nil {
				t.Fatalf("client %d, RPC %d: %v", i, j, err)
			}
		}
	}
	if got := b.calls.Load(); got != 2*perClient {
		t.Fatalf("backend served %d calls, want %d", got, 2*perClient)
	}
	err := lrs.WaitFor(ctx, func([]xdstest.LRSStream) bool { return lrs.Totals(cluster).Succeeded >= 2*perClient })
	if err != nil {
		t.Fatalf("the control plane's LRS server got %+v of %s, want %d successful requests: %v", lrs.Totals(cluster), cluster, 2*perClient, err)
	}
	tot := lrs.Totals(cluster)
	if tot.Succeeded != 2*perClient || tot.Issued != 2*perClient || tot.Errors != 0 {
		t.Errorf("load of %s at the control plane = %+v, want %d issued and succeeded, no errors", cluster, tot, 2*perClient)
	}
	for _, cs := range lrs.ClusterStats() {
		if cs.GetClusterName() != cluster {
			t.Errorf("the control plane got load of %q, which it did not ask for", cs.GetClusterName())
		}
		for _, l := range cs.GetUpstreamLocalityStats() {
			if l.GetLocality().GetRegion() != "r1" || l.GetLocality().GetZone() != "z1" {
				t.Errorf("load reported for locality %v, want r1/z1 (the endpoint's)", l.GetLocality())
			}
		}
		if cs.GetLoadReportInterval().AsDuration() <= 0 {
			t.Errorf("cluster stats without a load_report_interval: %v", cs)
		}
	}
	streams := lrs.Streams()
	if len(streams) != 1 {
		t.Fatalf("the control plane's LRS server served %d streams, want one for the class", len(streams))
	}
	node := streams[0].Node
	if node.GetId() != relayID || node.GetCluster() != class || !slices.Contains(node.GetClientFeatures(), "envoy.lrs.supports_send_all_clusters") {
		t.Errorf("upstream LRS node = %v, want the class's upstream node (id %s, cluster %s) announcing send_all_clusters", node, relayID, class)
	}
	if v, ok := scrape(t, ctx, r, fmt.Sprintf(`xds_relay_load_reports_forwarded_total{class=%q}`, class)); !ok || v < 1 {
		t.Errorf("xds_relay_load_reports_forwarded_total{class=%q} = %v (found %v), want at least 1", class, v, ok)
	}
	if v, ok := scrape(t, ctx, r, fmt.Sprintf(`xds_relay_load_reports_received_total{class=%q}`, class)); !ok || v < 2 {
		t.Errorf("xds_relay_load_reports_received_total{class=%q} = %v (found %v), want at least 2", class, v, ok)
	}

	// One client leaves: the class's stream stays for the other.
	_ = conns[0].Close()
	time.Sleep(300 * time.Millisecond)
	if s := lrs.Streams(); len(s) != 1 || !s[0].Open {
		t.Fatalf("after one client left, the control plane has streams %+v, want the one still open", s)
	}
	// The last leaves: the class's stream ends.
	_ = conns[1].Close()
	if err := lrs.WaitFor(ctx, func(s []xdstest.LRSStream) bool { return len(s) == 1 && !s[0].Open }); err != nil {
		t.Fatalf("the class's upstream LRS stream is still open after its last client left: %v", err)
	}
}

// loadStream opens a raw LRS stream to addr and sends the first request.
func loadStream(t *testing.T, ctx context.Context, addr string, node *corev3.Node) lrsv3.LoadReportingService_StreamLoadStatsClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	s, err := lrsv3.NewLoadReportingServiceClient(conn).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&lrsv3.LoadStatsRequest{Node: node}); err != nil {
		t.Fatal(err)
	}
	return s
}

// wantUnimplemented requires s to end with UNIMPLEMENTED saying each of
// says.
func wantUnimplemented(t *testing.T, s lrsv3.LoadReportingService_StreamLoadStatsClient, says ...string) {
	t.Helper()
	_, err := s.Recv()
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("load-report stream ended with %v, want UNIMPLEMENTED", err)
	}
	for _, w := range says {
		if !strings.Contains(status.Convert(err).Message(), w) {
			t.Errorf("status %q does not say %q", status.Convert(err).Message(), w)
		}
	}
}

// TestE2EFileSourceLRSUnimplemented: a relay serving files has no control
// plane to report load to; a client's load-report stream is told so.
func TestE2EFileSourceLRSUnimplemented(t *testing.T) {
	ctx := testContext(t)
	r := startRelay(t, "", sampleSource())
	s := loadStream(t, ctx, r.Addr(), &corev3.Node{Id: "n1", Cluster: "class-a"})
	wantUnimplemented(t, s, "no control plane", "no load reporting service")
}

// TestE2EControlPlaneWithoutLRSUnimplemented: go-control-plane serves no
// LoadReportingService; a client's load-report stream through the relay
// ends with UNIMPLEMENTED saying that the control plane has none, and so
// does the next, while the client's xDS keeps working.
func TestE2EControlPlaneWithoutLRSUnimplemented(t *testing.T) {
	ctx := testContext(t)
	const class = "class-no-lrs"
	b := startBackend(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, class, "1", lrsResources(t, "echo", b.addr))
	r := startRelay(t, m.Addr)
	node := &corev3.Node{Id: "n1", Cluster: class}
	wantUnimplemented(t, loadStream(t, ctx, r.Addr(), node), "the control plane", "has no load reporting service", m.Addr)
	start := time.Now()
	wantUnimplemented(t, loadStream(t, ctx, r.Addr(), node), "has no load reporting service")
	if d := time.Since(start); d > time.Second {
		t.Errorf("the second stream took %v to be refused, want at once (the refusal is held)", d)
	}

	// A grpc-go client whose cluster reports load still gets its RPCs
	// through.
	cc := grpcXDSConn(t, bootstrapFor("grpc-client", class, xdsServer(r.Addr())), "echo")
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("RPC of a load-reporting client behind a control plane without LRS: %v", err)
	}
}
