package upstream

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/shard"
)

// testFeed is a class's load as the relay would feed it: the test makes a
// report due and says what it holds.
type testFeed struct {
	resps   chan *lrsv3.LoadStatsResponse
	due     chan struct{}
	refused chan error

	mu    sync.Mutex
	stats []*endpointv3.ClusterStats // the next CollectLoad's
}

func newTestFeed() *testFeed {
	return &testFeed{resps: make(chan *lrsv3.LoadStatsResponse, 16), due: make(chan struct{}, 1), refused: make(chan error, 1)}
}

func (f *testFeed) LoadResponse(r *lrsv3.LoadStatsResponse) { f.resps <- r }
func (f *testFeed) LoadDue() <-chan struct{}                { return f.due }
func (f *testFeed) LoadRefused(err error)                   { f.refused <- err }
func (f *testFeed) CollectLoad() []*endpointv3.ClusterStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	f.stats = nil
	return s
}

// hold makes stats the window and signals it due.
func (f *testFeed) hold(stats ...*endpointv3.ClusterStats) {
	f.mu.Lock()
	f.stats = stats
	f.mu.Unlock()
	f.due <- struct{}{}
}

func (f *testFeed) response(t *testing.T) *lrsv3.LoadStatsResponse {
	t.Helper()
	select {
	case r := <-f.resps:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("the control plane's response did not reach the feed")
	}
	return nil
}

// lrsClass is a class of node in a registry of its own whose classes have
// no ADS stream (the tests here serve LRS only).
func lrsClass(t *testing.T, node *corev3.Node) *shard.Class {
	t.Helper()
	cl, err := shard.NewClassifier(nil)
	if err != nil {
		t.Fatal(err)
	}
	class, err := shard.NewRegistryWith(cl, nil, shard.Lifecycle{}).Acquire(node)
	if err != nil {
		t.Fatal(err)
	}
	return class
}

// lrsClient is an upstream client of addr counting into m.
func lrsClient(t *testing.T, addr string, m Metrics) *Client {
	t.Helper()
	c, err := New(Config{Address: addr, RelayID: "relay-under-test", Backoff: Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond}, Metrics: m},
		zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// serveLRS serves lrs alone on a loopback port.
func serveLRS(t *testing.T, lrs *xdstest.LRSServer) string {
	t.Helper()
	g := grpc.NewServer()
	if lrs != nil {
		lrs.Register(g)
	}
	return xdstest.ServeGRPC(t, g)
}

type loadMetrics struct {
	NopMetrics
	mu   sync.Mutex
	sent map[string]int
}

func (m *loadMetrics) LoadReportSent(class string) { count(&m.mu, &m.sent, class) }

func (m *loadMetrics) sentFor(class string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sent[class]
}

func waitLRS(t *testing.T, lrs *xdstest.LRSServer, what string, cond func([]xdstest.LRSStream) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := lrs.WaitFor(ctx, cond); err != nil {
		t.Fatalf("timed out waiting for %s; the LRS server saw %+v", what, lrs.Streams())
	}
}

// A class's load-report stream presents the class's upstream node (the
// relay's id, the first node's identifying fields, send_all_clusters
// when asked), passes the control plane's answer to the feed, sends each
// due report, and on stop sends the last one and half-closes.
func TestReportLoadStreamOfAClass(t *testing.T) {
	resp := &lrsv3.LoadStatsResponse{Clusters: []string{"c1"}, LoadReportingInterval: durationpb.New(time.Second)}
	lrs := xdstest.NewLRSServer(resp)
	m := &loadMetrics{}
	c := lrsClient(t, serveLRS(t, lrs), m)
	first := &corev3.Node{Id: "downstream-1", Cluster: "class-a", Locality: &corev3.Locality{Region: "r1"}, ClientFeatures: []string{"f1"}}
	class := lrsClass(t, first)
	feed := newTestFeed()
	stop := c.ReportLoad(class, true, feed)
	if got := feed.response(t); got.GetClusters()[0] != "c1" {
		t.Fatalf("feed got %v, want the control plane's answer", got)
	}
	waitLRS(t, lrs, "the first request", func(s []xdstest.LRSStream) bool { return len(s) == 1 })
	node := lrs.Streams()[0].Node
	want := c.classNode(class)
	if node.GetId() != "relay-under-test" || node.GetId() != want.GetId() || node.GetCluster() != "class-a" || node.GetLocality().GetRegion() != "r1" ||
		!slices.Contains(node.GetClientFeatures(), "f1") || !slices.Contains(node.GetClientFeatures(), FeatureLRSSendAllClusters) {
		t.Errorf("upstream LRS node = %v, want the class's upstream node %v announcing %s", node, want, FeatureLRSSendAllClusters)
	}

	feed.hold(&endpointv3.ClusterStats{ClusterName: "c1", TotalDroppedRequests: 3})
	waitLRS(t, lrs, "the report", func([]xdstest.LRSStream) bool { return lrs.Totals("c1").Drop == 3 })
	feed.mu.Lock()
	feed.stats = []*endpointv3.ClusterStats{{ClusterName: "c1", TotalDroppedRequests: 4}} // the last window
	feed.mu.Unlock()
	stop(false)
	s := lrs.Streams()
	if len(s) != 1 || s[0].Open || !errors.Is(s[0].End, io.EOF) {
		t.Fatalf("after stop the LRS server has %+v, want the stream half-closed", s)
	}
	if got := lrs.Totals("c1"); got.Drop != 7 || got.Reports != 2 {
		t.Errorf("load at the control plane = %+v, want both reports (7 drops)", got)
	}
	if n := m.sentFor("class-a"); n != 2 {
		t.Errorf("LoadReportSent counted %d, want 2", n)
	}
}

// Stopped with abort (the class's last client cancelled), the stream is
// cancelled; a report due before the control plane answered is sent once
// it has.
func TestReportLoadAbortAndOwedReport(t *testing.T) {
	lrs := xdstest.NewLRSServer(nil) // no answer until SetResponse
	c := lrsClient(t, serveLRS(t, lrs), NopMetrics{})
	feed := newTestFeed()
	stop := c.ReportLoad(lrsClass(t, &corev3.Node{Id: "n", Cluster: "class-a"}), false, feed)
	waitLRS(t, lrs, "the first request", func(s []xdstest.LRSStream) bool { return len(s) == 1 })
	if slices.Contains(lrs.Streams()[0].Node.GetClientFeatures(), FeatureLRSSendAllClusters) {
		t.Error("the node announces send_all_clusters, which its clients do not")
	}
	feed.hold(&endpointv3.ClusterStats{ClusterName: "c1", TotalDroppedRequests: 1})
	time.Sleep(50 * time.Millisecond)
	if n := len(lrs.Streams()[0].Requests); n != 1 {
		t.Fatalf("%d requests before the control plane answered, want the first alone", n)
	}
	lrs.SetResponse(&lrsv3.LoadStatsResponse{SendAllClusters: true, LoadReportingInterval: durationpb.New(time.Second)})
	feed.response(t)
	waitLRS(t, lrs, "the owed report", func([]xdstest.LRSStream) bool { return lrs.Totals("c1").Drop == 1 })
	stop(true)
	waitLRS(t, lrs, "the stream's end", func(s []xdstest.LRSStream) bool { return !s[0].Open })
	if end := lrs.Streams()[0].End; status.Code(end) != codes.Canceled {
		t.Errorf("the stream ended with %v, want CANCELLED", end)
	}
}

// A control plane without LoadReportingService: the feed is told, with
// UNIMPLEMENTED saying so, and the stream is not tried again.
func TestReportLoadControlPlaneWithoutLRS(t *testing.T) {
	addr := serveLRS(t, nil)
	c := lrsClient(t, addr, NopMetrics{})
	feed := newTestFeed()
	stop := c.ReportLoad(lrsClass(t, &corev3.Node{Id: "n", Cluster: "class-a"}), false, feed)
	defer stop(false)
	select {
	case err := <-feed.refused:
		if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "has no load reporting service") || !strings.Contains(err.Error(), addr) {
			t.Fatalf("refused with %v, want UNIMPLEMENTED saying the control plane at %s has no load reporting service", err, addr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the feed was not told of the refusal")
	}
}

// A failed stream is reopened with the backoff: a control plane that
// restarted gets the node again and answers again.
func TestReportLoadReconnects(t *testing.T) {
	lrs := xdstest.NewLRSServer(&lrsv3.LoadStatsResponse{SendAllClusters: true, LoadReportingInterval: durationpb.New(time.Second)})
	cp, err := xdstest.StartControlPlane(xdstest.CPOptions{Cache: xdstest.Snapshot, LRS: lrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	c := lrsClient(t, cp.Addr, NopMetrics{})
	feed := newTestFeed()
	stop := c.ReportLoad(lrsClass(t, &corev3.Node{Id: "n", Cluster: "class-a"}), false, feed)
	defer stop(false)
	feed.response(t)
	if err := cp.Restart(); err != nil {
		t.Fatal(err)
	}
	feed.response(t)
	waitLRS(t, lrs, "a second stream", func(s []xdstest.LRSStream) bool { return len(s) == 2 && s[1].Node.GetId() == "relay-under-test" })
	feed.hold(&endpointv3.ClusterStats{ClusterName: "c1", TotalDroppedRequests: 2})
	waitLRS(t, lrs, "the report on the new stream", func([]xdstest.LRSStream) bool { return lrs.Totals("c1").Drop == 2 })
}

// Stop ends a stream whose control plane is down at once, and a closed
// client opens none.
func TestReportLoadStopWhileDown(t *testing.T) {
	lrs := xdstest.NewLRSServer(nil)
	cp, err := xdstest.StartControlPlane(xdstest.CPOptions{Cache: xdstest.Snapshot, LRS: lrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	c := lrsClient(t, cp.Addr, NopMetrics{})
	cp.Down()
	stop := c.ReportLoad(lrsClass(t, &corev3.Node{Id: "n", Cluster: "class-a"}), false, newTestFeed())
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	stop(false)
	if d := time.Since(start); d > FinalReportWait/2 {
		t.Errorf("stop took %v with the control plane down, want at once", d)
	}
	_ = c.Close()
	c.ReportLoad(lrsClass(t, &corev3.Node{Id: "n", Cluster: "class-b"}), false, newTestFeed())(false)
}
