package relay

import (
	"context"
	"errors"
	"io"
	"maps"
	"math"
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
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/drop"
)

// fakeLoadUpstream is the control plane's side of the classes' load-report
// streams, driven by the test: it records each ReportLoad (the class's
// feed) and each stop.
type fakeLoadUpstream struct {
	mu      sync.Mutex
	opened  []*fakeLoadStream
	changed chan struct{}
}

type fakeLoadStream struct {
	class   *shard.Class
	sendAll bool
	feed    LoadFeed
	stopped chan bool // receives abort once stopped
}

func newFakeLoadUpstream() *fakeLoadUpstream {
	return &fakeLoadUpstream{changed: make(chan struct{}, 64)}
}

func (f *fakeLoadUpstream) ReportLoad(class *shard.Class, sendAll bool, feed LoadFeed) func(bool) {
	s := &fakeLoadStream{class: class, sendAll: sendAll, feed: feed, stopped: make(chan bool, 1)}
	f.mu.Lock()
	f.opened = append(f.opened, s)
	f.mu.Unlock()
	f.changed <- struct{}{}
	return func(abort bool) { s.stopped <- abort }
}

func (f *fakeLoadUpstream) streams() []*fakeLoadStream {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*fakeLoadStream(nil), f.opened...)
}

// next waits for the n-th stream (from 1) to be opened.
func (f *fakeLoadUpstream) next(t *testing.T, n int) *fakeLoadStream {
	t.Helper()
	deadline := time.After(recvTimeout)
	for {
		if s := f.streams(); len(s) >= n {
			return s[n-1]
		}
		select {
		case <-f.changed:
		case <-deadline:
			t.Fatalf("upstream load-report stream %d was never opened", n)
		}
	}
}

// due waits for the class's window to be due and collects it.
func (s *fakeLoadStream) due(t *testing.T) []*endpointv3.ClusterStats {
	t.Helper()
	select {
	case <-s.feed.LoadDue():
	case <-time.After(recvTimeout):
		t.Fatal("no load report fell due")
	}
	return s.feed.CollectLoad()
}

// notDue requires no window to fall due within d.
func (s *fakeLoadStream) notDue(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-s.feed.LoadDue():
		t.Fatal("a load report fell due early")
	case <-time.After(d):
	}
}

// lrsHarness is a relay serving load reports to fake's streams.
type lrsHarness struct {
	srv  *Server
	conn *grpc.ClientConn
	fake *fakeLoadUpstream
}

func newLRSHarness(t *testing.T, edit func(*Options)) *lrsHarness {
	t.Helper()
	classifier, err := shard.NewClassifier(nil)
	if err != nil {
		t.Fatal(err)
	}
	registry := shard.NewRegistryWith(classifier, nil, shard.Lifecycle{})
	fake := newFakeLoadUpstream()
	opts := Options{LoadReports: fake, Drops: &drop.Counters{}}
	if edit != nil {
		edit(&opts)
	}
	srv := NewServer(registry, zaptest.NewLogger(t), opts)
	addr := serveRelay(t, srv, func() {
		eventually(t, "streams released", func() bool { return srv.StreamCount() == 0 })
	}, grpc.WaitForHandlers(true))
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &lrsHarness{srv: srv, conn: conn, fake: fake}
}

// lrsClient is a raw load-report stream.
type lrsClient struct {
	t      *testing.T
	s      lrsv3.LoadReportingService_StreamLoadStatsClient
	cancel context.CancelFunc
}

// open starts a stream and sends the first request, with node.
func (h *lrsHarness) open(t *testing.T, node *corev3.Node) *lrsClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := lrsv3.NewLoadReportingServiceClient(h.conn).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &lrsClient{t: t, s: s, cancel: cancel}
	c.send(&lrsv3.LoadStatsRequest{Node: node})
	return c
}

// send sends req. io.EOF is no failure: the relay ended the stream (it may
// refuse one before reading its first request), and the status it ended
// with is what the next recv or ended returns.
func (c *lrsClient) send(req *lrsv3.LoadStatsRequest) {
	c.t.Helper()
	if err := c.s.Send(req); err != nil && !errors.Is(err, io.EOF) {
		c.t.Fatalf("send: %v", err)
	}
}

func (c *lrsClient) report(stats ...*endpointv3.ClusterStats) {
	c.t.Helper()
	c.send(&lrsv3.LoadStatsRequest{ClusterStats: stats})
}

// recv waits for a response of the relay.
func (c *lrsClient) recv() *lrsv3.LoadStatsResponse {
	c.t.Helper()
	type result struct {
		r   *lrsv3.LoadStatsResponse
		err error
	}
	ch := make(chan result, 1)
	go func() {
		r, err := c.s.Recv()
		ch <- result{r, err}
	}()
	select {
	case res := <-ch:
		if res.err != nil {
			c.t.Fatalf("recv: %v", res.err)
		}
		return res.r
	case <-time.After(recvTimeout):
		c.t.Fatal("no response")
	}
	return nil
}

// ended waits for the stream's status.
func (c *lrsClient) ended() error {
	c.t.Helper()
	ch := make(chan error, 1)
	go func() {
		for {
			if _, err := c.s.Recv(); err != nil {
				ch <- err
				return
			}
		}
	}()
	select {
	case err := <-ch:
		return err
	case <-time.After(recvTimeout):
		c.t.Fatal("the stream did not end")
	}
	return nil
}

// load is a cluster's stats: one locality with these counts, and drops.
func load(cluster string, succeeded, issued, inProgress uint64, drops map[string]uint64) *endpointv3.ClusterStats {
	cs := &endpointv3.ClusterStats{
		ClusterName:        cluster,
		ClusterServiceName: cluster + "-eds",
		UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{
			Locality:                &corev3.Locality{Region: "r1", Zone: "z1"},
			TotalSuccessfulRequests: succeeded,
			TotalIssuedRequests:     issued,
			TotalRequestsInProgress: inProgress,
		}},
	}
	for _, cat := range slices.Sorted(maps.Keys(drops)) { // in the order the relay sends
		n := drops[cat]
		cs.TotalDroppedRequests += n
		cs.DroppedRequests = append(cs.DroppedRequests, &endpointv3.ClusterStats_DroppedRequests{Category: cat, DroppedCount: n})
	}
	return cs
}

// withoutIntervals drops the load_report_interval of stats, for comparison.
func withoutIntervals(stats []*endpointv3.ClusterStats) []*endpointv3.ClusterStats {
	for _, cs := range stats {
		cs.LoadReportInterval = nil
	}
	return stats
}

func wantLoad(t *testing.T, got []*endpointv3.ClusterStats, want ...*endpointv3.ClusterStats) {
	t.Helper()
	g, w := &lrsv3.LoadStatsRequest{ClusterStats: withoutIntervals(got)}, &lrsv3.LoadStatsRequest{ClusterStats: want}
	if !proto.Equal(g, w) {
		t.Fatalf("load collected:\n%s\nwant:\n%s", prototext.Format(g), prototext.Format(w))
	}
}

var (
	nodeA = &corev3.Node{Id: "a", Cluster: "class-a", ClientFeatures: []string{featureLRSSendAllClusters}}
	nodeB = &corev3.Node{Id: "b", Cluster: "class-a"}
)

// The clients of one class share one upstream stream: the control plane's
// answer reaches each of them, their reports are summed into one window
// (counts added; each client's latest requests in progress, kept across
// windows), the window falls due once every client reported in it, and
// load of a cluster the control plane did not ask for is not forwarded.
func TestLoadReportsOfAClassShareOneStream(t *testing.T) {
	h := newLRSHarness(t, nil)
	a := h.open(t, nodeA)
	up := h.fake.next(t, 1)
	b := h.open(t, nodeB)
	if up.class.Name != "class-a" || !up.sendAll {
		t.Fatalf("upstream stream of class %q (send_all %v), want class-a announcing send_all_clusters (its first client does)", up.class.Name, up.sendAll)
	}
	resp := &lrsv3.LoadStatsResponse{Clusters: []string{"c1"}, LoadReportingInterval: durationpb.New(time.Hour)}
	up.feed.LoadResponse(resp)
	for _, c := range []*lrsClient{a, b} {
		if got := c.recv(); !proto.Equal(got, resp) {
			t.Fatalf("client got %v, want the control plane's %v", got, resp)
		}
	}

	a.report(load("c1", 3, 4, 2, map[string]uint64{"overload": 1}), load("c2", 9, 9, 0, nil))
	up.notDue(t, 100*time.Millisecond) // b has not reported
	b.report(load("c1", 5, 5, 1, map[string]uint64{"overload": 2, "lb": 1}))
	wantLoad(t, up.due(t), load("c1", 8, 9, 3, map[string]uint64{"lb": 1, "overload": 3}))
	if n := dropCount(h.srv.drops, drop.LoadNotRequested); n != 2 { // c2 and its locality
		t.Errorf("load_not_requested drops = %d, want 2", n)
	}

	// Only a reports before the window is taken (as at its deadline):
	// b's latest requests in progress still count.
	a.report(load("c1", 1, 1, 0, nil))
	h.waitReports(t, 3)
	wantLoad(t, up.feed.CollectLoad(), load("c1", 1, 1, 1, nil))
	// b's empty report says it has nothing in progress any more.
	a.report()
	b.report()
	wantLoad(t, up.due(t))

	// The control plane asks for every cluster from now on.
	up.feed.LoadResponse(&lrsv3.LoadStatsResponse{SendAllClusters: true, LoadReportingInterval: durationpb.New(time.Hour)})
	a.recv()
	b.recv()
	a.report(load("c2", 2, 2, 0, nil))
	b.report(load("c3", 1, 1, 0, nil))
	wantLoad(t, up.due(t), load("c2", 2, 2, 0, nil), load("c3", 1, 1, 0, nil))
	if n := len(h.fake.streams()); n != 1 {
		t.Fatalf("%d upstream streams for one class, want 1", n)
	}
}

// waitReports waits until the relay merged n reports, over all streams.
func (h *lrsHarness) waitReports(t *testing.T, n int) {
	t.Helper()
	eventually(t, "reports merged", func() bool {
		got := 0
		for _, st := range h.srv.Streams(0) {
			got += st.LoadReports
		}
		return got >= n
	})
}

func dropCount(c *drop.Counters, r drop.Reason) uint64 {
	for _, n := range c.Snapshot() {
		if n.Reason == r {
			return n.N
		}
	}
	return 0
}

// A window falls due one interval after its first report even when a
// client of the class does not report in it.
func TestLoadWindowDueAtTheIntervalWithoutEveryClient(t *testing.T) {
	h := newLRSHarness(t, nil)
	a := h.open(t, nodeA)
	up := h.fake.next(t, 1)
	b := h.open(t, nodeB)
	up.feed.LoadResponse(&lrsv3.LoadStatsResponse{SendAllClusters: true, LoadReportingInterval: durationpb.New(200 * time.Millisecond)})
	a.recv()
	b.recv()
	start := time.Now()
	a.report(load("c1", 1, 1, 0, nil))
	wantLoad(t, up.due(t), load("c1", 1, 1, 0, nil))
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("the window fell due %v after its first report, want the interval (200ms): b never reported", d)
	}
}

// The report rate: past reports_per_second (and its burst) a stream is
// ended naming the key; a control plane asking for a shorter interval
// raises each stream's rate to twice per interval.
func TestLoadReportRate(t *testing.T) {
	h := newLRSHarness(t, func(o *Options) { o.LoadLimits.ReportsPerSecond, o.LoadLimits.ReportBurst = 0.001, 3 })
	a := h.open(t, nodeA) // 1 of the burst
	up := h.fake.next(t, 1)
	up.feed.LoadResponse(&lrsv3.LoadStatsResponse{SendAllClusters: true, LoadReportingInterval: durationpb.New(time.Hour)})
	a.recv()
	for range 3 {
		_ = a.s.Send(&lrsv3.LoadStatsRequest{}) // the third is one too many; a later send may find the stream closed
	}
	wantStatus(t, a.ended(), codes.ResourceExhausted, "load_reporting.reports_per_second")

	b := h.open(t, nodeB)
	up = h.fake.next(t, 2) // a's leaving ended the class's first stream
	up.feed.LoadResponse(&lrsv3.LoadStatsResponse{SendAllClusters: true, LoadReportingInterval: durationpb.New(10 * time.Millisecond)})
	b.recv()
	for range 20 { // a report every 10 ms, as asked
		b.report(load("c1", 1, 1, 0, nil))
		time.Sleep(10 * time.Millisecond)
	}
	h.waitReports(t, 20)
}

// Each bound of a report ends the stream naming its key, before anything
// of the report is kept.
func TestLoadReportLimits(t *testing.T) {
	locality := func(region string) *endpointv3.UpstreamLocalityStats {
		return &endpointv3.UpstreamLocalityStats{Locality: &corev3.Locality{Region: region}, TotalIssuedRequests: 1}
	}
	cases := []struct {
		name   string
		limits func(*Options)
		report []*endpointv3.ClusterStats
		code   codes.Code
		says   string
	}{
		{"clusters", func(o *Options) { o.LoadLimits.MaxClustersPerReport = 2 },
			[]*endpointv3.ClusterStats{{ClusterName: "c1"}, {ClusterName: "c2"}, {ClusterName: "c3"}},
			codes.ResourceExhausted, "load_reporting.max_clusters_per_report"},
		{"stats", func(o *Options) { o.LoadLimits.MaxStatsPerReport = 3 },
			[]*endpointv3.ClusterStats{{ClusterName: "c1", UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{locality("r1"), locality("r2")},
				DroppedRequests: []*endpointv3.ClusterStats_DroppedRequests{{Category: "x"}, {Category: "y"}}}},
			codes.ResourceExhausted, "load_reporting.max_stats_per_report"},
		{"cluster name", func(o *Options) { o.MaxResourceNameBytes = 16 },
			[]*endpointv3.ClusterStats{{ClusterName: strings.Repeat("c", 17)}},
			codes.InvalidArgument, "limits.max_resource_name_bytes"},
		{"locality", func(o *Options) { o.MaxResourceNameBytes = 16 },
			[]*endpointv3.ClusterStats{{ClusterName: "c1", UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{locality(strings.Repeat("r", 17))}}},
			codes.InvalidArgument, "upstream_locality_stats.locality"},
		{"metric name", func(o *Options) { o.MaxResourceNameBytes = 16 },
			[]*endpointv3.ClusterStats{{ClusterName: "c1", UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{
				LoadMetricStats: []*endpointv3.EndpointLoadMetricStats{{MetricName: strings.Repeat("m", 17)}}}}}},
			codes.InvalidArgument, "load_metric_stats.metric_name"},
		{"drop category", func(o *Options) { o.MaxResourceNameBytes = 16 },
			[]*endpointv3.ClusterStats{{ClusterName: "c1", DroppedRequests: []*endpointv3.ClusterStats_DroppedRequests{{Category: strings.Repeat("d", 17)}}}},
			codes.InvalidArgument, "dropped_requests.category"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newLRSHarness(t, tc.limits)
			a := h.open(t, nodeA)
			up := h.fake.next(t, 1)
			up.feed.LoadResponse(&lrsv3.LoadStatsResponse{SendAllClusters: true, LoadReportingInterval: durationpb.New(time.Hour)})
			a.recv()
			a.report(tc.report...)
			wantStatus(t, a.ended(), tc.code, tc.says)
			if got := up.feed.CollectLoad(); len(got) != 0 {
				t.Errorf("the refused report was kept: %v", got)
			}
		})
	}
}

// The first request must carry the node; load-report streams are bounded
// by load_reporting.max_streams (and count in limits.max_streams).
func TestLoadStreamLimits(t *testing.T) {
	h := newLRSHarness(t, func(o *Options) { o.LoadLimits.MaxStreams = 1 })
	wantStatus(t, h.open(t, nil).ended(), codes.InvalidArgument, "node")
	a := h.open(t, nodeA)
	h.fake.next(t, 1)
	wantStatus(t, h.open(t, nodeB).ended(), codes.ResourceExhausted, "load_reporting.max_streams")
	a.report()
	h.waitReports(t, 1) // a is still served

	h = newLRSHarness(t, func(o *Options) { o.MaxStreams = 1 })
	h.open(t, nodeA)
	h.fake.next(t, 1)
	wantStatus(t, h.open(t, nodeB).ended(), codes.ResourceExhausted, "limit of 1 streams")
}

// A class's window is bounded by load_reporting.max_class_report_bytes:
// entries past it are not forwarded, and counted.
func TestLoadClassReportBytes(t *testing.T) {
	const maxBytes = 1000
	h := newLRSHarness(t, func(o *Options) { o.LoadLimits.MaxClassReportBytes = maxBytes })
	a := h.open(t, nodeA)
	up := h.fake.next(t, 1)
	up.feed.LoadResponse(&lrsv3.LoadStatsResponse{SendAllClusters: true, LoadReportingInterval: durationpb.New(time.Hour)})
	a.recv()
	var report []*endpointv3.ClusterStats
	for i := range 40 {
		report = append(report, load(strings.Repeat("c", 20)+string(rune('a'+i%26))+string(rune('a'+i/26)), 1, 1, 1, nil))
	}
	a.report(report...)
	got := up.due(t)
	if len(got) == 0 || len(got) >= 40 {
		t.Fatalf("%d of 40 clusters forwarded, want some, within %d bytes", len(got), maxBytes)
	}
	if n := proto.Size(&lrsv3.LoadStatsRequest{ClusterStats: got}); n > maxBytes {
		t.Errorf("the class's report is %d bytes, over the bound of %d", n, maxBytes)
	}
	if n := dropCount(h.srv.drops, drop.LoadOverLimit); n == 0 {
		t.Error("no load_over_limit drops counted")
	}
}

// A control plane that refuses load reports: every client of the class
// ends with its status; a new client within the hold is refused at once,
// without a new upstream stream; after the hold the relay asks again.
func TestLoadRefusalEndsClientsAndIsHeld(t *testing.T) {
	h := newLRSHarness(t, func(o *Options) { o.LoadLimits.RefusalHold = 300 * time.Millisecond })
	a := h.open(t, nodeA)
	up := h.fake.next(t, 1)
	refusal := status.Error(codes.Unimplemented, "the control plane has no load reporting service")
	up.feed.LoadRefused(refusal)
	wantStatus(t, a.ended(), codes.Unimplemented, "has no load reporting service")
	wantStatus(t, h.open(t, nodeB).ended(), codes.Unimplemented, "has no load reporting service")
	if n := len(h.fake.streams()); n != 1 {
		t.Fatalf("%d upstream streams opened during the hold, want 1", n)
	}
	time.Sleep(400 * time.Millisecond)
	h.open(t, nodeB)
	h.fake.next(t, 2)
}

// The class's stream stays while a client reports and is stopped by the
// last one's leaving: half-closed when it half-closed, cancelled when it
// cancelled.
func TestLoadLastClientStopsTheStream(t *testing.T) {
	h := newLRSHarness(t, nil)
	a := h.open(t, nodeA)
	up := h.fake.next(t, 1)
	b := h.open(t, nodeB)
	b.report()
	h.waitReports(t, 1)
	b.cancel()
	select {
	case <-up.stopped:
		t.Fatal("the class's stream was stopped while a client still reports")
	case <-time.After(100 * time.Millisecond):
	}
	if err := a.s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	select {
	case abort := <-up.stopped:
		if abort {
			t.Error("the stream was cancelled; its last client half-closed")
		}
	case <-time.After(recvTimeout):
		t.Fatal("the class's stream was not stopped after its last client left")
	}

	c := h.open(t, &corev3.Node{Id: "c", Cluster: "class-c"})
	up = h.fake.next(t, 2)
	c.report()
	h.waitReports(t, 1) // a and b are gone
	c.cancel()
	select {
	case abort := <-up.stopped:
		if !abort {
			t.Error("the stream was half-closed; its last client cancelled")
		}
	case <-time.After(recvTimeout):
		t.Fatal("the class's stream was not stopped after its last client left")
	}
}

// Without a LoadUpstream (a relay serving files) a client is told why.
func TestLoadWithoutUpstreamUnimplemented(t *testing.T) {
	h := newLRSHarness(t, func(o *Options) { o.LoadReports, o.NoLoadReports = nil, "no control plane here" })
	wantStatus(t, h.open(t, nodeA).ended(), codes.Unimplemented, "no control plane here")
	h = newLRSHarness(t, func(o *Options) { o.LoadReports = nil })
	wantStatus(t, h.open(t, nodeA).ended(), codes.Unimplemented, DefaultNoLoadReports)
}

// A draining relay ends load-report streams as it ends xDS streams.
func TestLoadStreamDrained(t *testing.T) {
	h := newLRSHarness(t, nil)
	a := h.open(t, nodeA)
	h.fake.next(t, 1)
	a.report()
	h.waitReports(t, 1)
	h.srv.Drain(context.Background(), 0)
	err := a.ended()
	if !errors.Is(err, ErrDraining) && status.Code(err) != codes.Unavailable {
		t.Fatalf("drained stream ended with %v, want UNAVAILABLE", err)
	}
}

// A window's clusters carry the period their reports cover: from the
// earliest start (a report's time less its load_report_interval, or the
// client's previous report without one) to the latest report.
func TestLoadWindowIntervals(t *testing.T) {
	w := newLoadWindow(1 << 20)
	t0 := time.Unix(1000, 0)
	w.add(load("c1", 1, 1, 0, nil), t0.Add(-5*time.Second), t0, mergeCounts)
	w.add(load("c1", 1, 1, 0, nil), t0.Add(-2*time.Second), t0.Add(time.Second), mergeCounts)
	w.add(load("c2", 0, 0, 3, nil), time.Time{}, time.Time{}, mergeGauges)
	got, refused := w.take(t0.Add(2*time.Second), t0.Add(-time.Second))
	if refused != 0 || len(got) != 2 {
		t.Fatalf("took %v (refused %d), want c1 and c2", got, refused)
	}
	if d := got[0].GetLoadReportInterval().AsDuration(); d != 6*time.Second {
		t.Errorf("c1's interval = %v, want 6s (from 5s before its first report to its last)", d)
	}
	if d := got[1].GetLoadReportInterval().AsDuration(); d != 3*time.Second {
		t.Errorf("c2's interval = %v, want 3s (gauges only: since the last take)", d)
	}
	if got[0].GetUpstreamLocalityStats()[0].GetTotalIssuedRequests() != 2 || got[1].GetUpstreamLocalityStats()[0].GetTotalRequestsInProgress() != 3 {
		t.Errorf("took %v", got)
	}
	if again, _ := w.take(t0, t0); len(again) != 0 {
		t.Errorf("a window taken is empty, got %v", again)
	}
}

// Every stat the protocol has is summed (counts) or taken from each
// client's latest report (gauges), and kept apart by its key.
func TestLoadWindowMergesEveryField(t *testing.T) {
	addr := func(port uint32) *corev3.Address {
		return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "10.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
	}
	one := func() *endpointv3.ClusterStats {
		return &endpointv3.ClusterStats{
			ClusterName: "c", ClusterServiceName: "s", TotalDroppedRequests: 1,
			DroppedRequests: []*endpointv3.ClusterStats_DroppedRequests{{Category: "d", DroppedCount: 1}},
			UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{
				Locality: &corev3.Locality{Region: "r", Zone: "z", SubZone: "s"}, Priority: 1,
				TotalSuccessfulRequests: 1, TotalErrorRequests: 1, TotalIssuedRequests: 2, TotalRequestsInProgress: 1,
				TotalActiveConnections: 1, TotalNewConnections: 1, TotalFailConnections: 1,
				CpuUtilization:         &endpointv3.UnnamedEndpointLoadMetricStats{NumRequestsFinishedWithMetric: 1, TotalMetricValue: 0.5},
				MemUtilization:         &endpointv3.UnnamedEndpointLoadMetricStats{NumRequestsFinishedWithMetric: 1, TotalMetricValue: 0.25},
				ApplicationUtilization: &endpointv3.UnnamedEndpointLoadMetricStats{NumRequestsFinishedWithMetric: 1, TotalMetricValue: 0.125},
				LoadMetricStats:        []*endpointv3.EndpointLoadMetricStats{{MetricName: "m", NumRequestsFinishedWithMetric: 1, TotalMetricValue: 2}},
				UpstreamEndpointStats: []*endpointv3.UpstreamEndpointStats{
					{Address: addr(1), TotalSuccessfulRequests: 1, TotalIssuedRequests: 1, TotalRequestsInProgress: 1,
						LoadMetricStats: []*endpointv3.EndpointLoadMetricStats{{MetricName: "m", NumRequestsFinishedWithMetric: 1, TotalMetricValue: 2}}},
					{Address: addr(2), TotalErrorRequests: 1, TotalIssuedRequests: 1},
				},
			}},
		}
	}
	w := newLoadWindow(1 << 20)
	t0 := time.Unix(1000, 0)
	for range 2 { // two clients' reports
		w.add(one(), t0, t0, mergeCounts)
	}
	for _, g := range gaugesOf([]*endpointv3.ClusterStats{one(), one()}) {
		w.add(g, time.Time{}, time.Time{}, mergeGauges)
	}
	got, _ := w.take(t0, t0)
	want := &endpointv3.ClusterStats{
		ClusterName: "c", ClusterServiceName: "s", TotalDroppedRequests: 2,
		DroppedRequests: []*endpointv3.ClusterStats_DroppedRequests{{Category: "d", DroppedCount: 2}},
		UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{
			Locality: &corev3.Locality{Region: "r", Zone: "z", SubZone: "s"}, Priority: 1,
			TotalSuccessfulRequests: 2, TotalErrorRequests: 2, TotalIssuedRequests: 4, TotalRequestsInProgress: 2,
			TotalActiveConnections: 2, TotalNewConnections: 2, TotalFailConnections: 2,
			CpuUtilization:         &endpointv3.UnnamedEndpointLoadMetricStats{NumRequestsFinishedWithMetric: 2, TotalMetricValue: 1},
			MemUtilization:         &endpointv3.UnnamedEndpointLoadMetricStats{NumRequestsFinishedWithMetric: 2, TotalMetricValue: 0.5},
			ApplicationUtilization: &endpointv3.UnnamedEndpointLoadMetricStats{NumRequestsFinishedWithMetric: 2, TotalMetricValue: 0.25},
			LoadMetricStats:        []*endpointv3.EndpointLoadMetricStats{{MetricName: "m", NumRequestsFinishedWithMetric: 2, TotalMetricValue: 4}},
			UpstreamEndpointStats: []*endpointv3.UpstreamEndpointStats{
				{Address: addr(1), TotalSuccessfulRequests: 2, TotalIssuedRequests: 2, TotalRequestsInProgress: 2,
					LoadMetricStats: []*endpointv3.EndpointLoadMetricStats{{MetricName: "m", NumRequestsFinishedWithMetric: 2, TotalMetricValue: 4}}},
				{Address: addr(2), TotalErrorRequests: 2, TotalIssuedRequests: 2},
			},
		}},
	}
	wantLoad(t, got, want)
}

// A class's sums saturate: counts near 2^64 do not wrap.
func TestLoadWindowSaturates(t *testing.T) {
	w := newLoadWindow(1 << 20)
	t0 := time.Unix(1000, 0)
	w.add(load("c1", math.MaxUint64-1, 1, 0, map[string]uint64{"d": math.MaxUint64}), t0, t0, mergeCounts)
	w.add(load("c1", 5, 1, 0, map[string]uint64{"d": 1}), t0, t0, mergeCounts)
	got, _ := w.take(t0, t0)
	if n := got[0].GetUpstreamLocalityStats()[0].GetTotalSuccessfulRequests(); n != math.MaxUint64 {
		t.Errorf("successful requests = %d, want saturated at 2^64-1", n)
	}
	if n := got[0].GetDroppedRequests()[0].GetDroppedCount(); n != math.MaxUint64 || got[0].GetTotalDroppedRequests() != math.MaxUint64 {
		t.Errorf("drops = %d (total %d), want saturated", n, got[0].GetTotalDroppedRequests())
	}
}
