package relay

import (
	"context"
	"net"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/shard"
)

// The relay serves LoadReportingService (envoy.service.load_stats.v3) on
// its xDS port: Envoy and gRPC clients report load to the server they get
// xDS from (a cluster's lrs_server: self). Each client stream is a
// loadStream of its node's class; the class's loadHub (lrs_hub.go) carries
// the class's reports to the control plane on one upstream stream.

// variantLRS is the variant of load-report streams, in status and metrics.
const variantLRS = "lrs"

// LoadLimits bound what a load-reporting client can make the relay hold
// and do. Zero values take the defaults.
type LoadLimits struct {
	// MaxStreams bounds the concurrent load-report streams (default
	// 100000; they count in Options.MaxStreams too).
	MaxStreams int
	// ReportsPerSecond and ReportBurst rate-limit each stream's reports
	// (defaults 1 and 10), its first request included: excess ends the
	// stream with RESOURCE_EXHAUSTED. A stream may always report twice per
	// interval the control plane asked for, if that is faster.
	ReportsPerSecond float64
	ReportBurst      int
	// MaxClustersPerReport bounds the clusters of one report (default
	// 10000); MaxStatsPerReport its entries below the clusters: localities,
	// endpoints, load metrics, drop categories (default 100000). Past
	// either the stream ends with RESOURCE_EXHAUSTED.
	MaxClustersPerReport int
	MaxStatsPerReport    int
	// MaxClassReportBytes bounds the estimated encoded size of one class's
	// upstream report (default 4 MiB, gRPC's default receive limit): an
	// entry that would take the class's window past it is not forwarded
	// (counted as the drop load_over_limit).
	MaxClassReportBytes int
	// RefusalHold is how long a control plane's refusal of load reports
	// (UNIMPLEMENTED) is given to the class's new streams before the relay
	// asks again (default 30s).
	RefusalHold time.Duration
}

// Defaults of LoadLimits.
const (
	DefaultLoadMaxStreams           = 100000
	DefaultLoadReportsPerSecond     = 1.0
	DefaultLoadReportBurst          = 10
	DefaultLoadMaxClustersPerReport = 10000
	DefaultLoadMaxStatsPerReport    = 100000
	DefaultLoadMaxClassReportBytes  = 4 << 20
	DefaultLoadRefusalHold          = 30 * time.Second
)

func (l LoadLimits) withDefaults() LoadLimits {
	for _, d := range []struct {
		v   *int
		def int
	}{{&l.MaxStreams, DefaultLoadMaxStreams}, {&l.ReportBurst, DefaultLoadReportBurst}, {&l.MaxClustersPerReport, DefaultLoadMaxClustersPerReport},
		{&l.MaxStatsPerReport, DefaultLoadMaxStatsPerReport}, {&l.MaxClassReportBytes, DefaultLoadMaxClassReportBytes}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if l.ReportsPerSecond <= 0 {
		l.ReportsPerSecond = DefaultLoadReportsPerSecond
	}
	if l.RefusalHold <= 0 {
		l.RefusalHold = DefaultLoadRefusalHold
	}
	return l
}

// DefaultNoLoadReports is why load reports are refused when the relay has
// no LoadUpstream (Options.NoLoadReports' default).
const DefaultNoLoadReports = "xds-relay has no control plane to forward load reports to: no load reporting service"

type lrsServerStream = grpc.GenericServerStream[lrsv3.LoadStatsRequest, lrsv3.LoadStatsResponse]

// loadHandler is the HandlerType of the relay's LoadReportingService.
type loadHandler interface {
	serveLoadStats(t *lrsServerStream) error
}

var _ loadHandler = (*Server)(nil)

// loadServiceDesc is LoadReportingService, served by serveLoadStats.
var loadServiceDesc = &grpc.ServiceDesc{
	ServiceName: lrsv3.LoadReportingService_ServiceDesc.ServiceName,
	HandlerType: (*loadHandler)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName: lrsv3.LoadReportingService_ServiceDesc.Streams[0].StreamName,
		Handler: func(srv any, ss grpc.ServerStream) error {
			return srv.(loadHandler).serveLoadStats(&lrsServerStream{ServerStream: ss})
		},
		ServerStreams: true, ClientStreams: true,
	}},
	Metadata: lrsv3.LoadReportingService_ServiceDesc.Metadata,
}

// loadStream is one client's load-report stream. Its handler goroutine
// reads (run); a writer goroutine runs only while a response of the
// control plane is waiting to be written (offer).
type loadStream struct {
	// Read-only after creation.
	id        uint64
	srv       *Server
	transport *lrsServerStream
	ctx       context.Context
	peer      string
	started   time.Time
	ender     statusWriter

	// Owned by the reader goroutine; set at the first request, before the
	// stream joins its hub.
	limiter *rate.Limiter
	class   *shard.Class
	nodeID  string
	hub     *loadHub

	// Guarded by the hub's mu.
	reportedGen uint64                     // the window it last reported in
	last        time.Time                  // its last report, or its joining
	gauges      []*endpointv3.ClusterStats // its latest report's gauges

	writers sync.WaitGroup // the running writer (zero or one)

	mu        sync.Mutex // guards below
	requested bool       // a request arrived (the first-request timer)
	reports   int        // reports merged
	pending   *lrsv3.LoadStatsResponse
	writing   bool
	stopped   bool  // no writer may start
	endErr    error // why the stream ended; the first reason wins
	classed   bool  // class and nodeID are set (status readers)
}

// serveLoadStats serves one client's load-report stream.
func (s *Server) serveLoadStats(t *lrsServerStream) error {
	if s.opts.LoadReports == nil {
		return status.Error(codes.Unimplemented, s.opts.NoLoadReports)
	}
	ctx := t.Context()
	st := &loadStream{id: s.nextID.Add(1), srv: s, transport: t, ctx: ctx, peer: peerAddr(ctx), started: time.Now(), ender: streamEnder(ctx)}
	if st.ender == nil {
		return errNoEnder
	}
	lim := s.opts.LoadLimits
	if n := s.loadStreams.Add(1); n > int64(lim.MaxStreams) {
		s.loadStreams.Add(-1)
		s.metrics.StreamClosed(variantLRS, ReasonLimit)
		return status.Errorf(codes.ResourceExhausted, "load_reporting.max_streams: xds-relay serves its limit of %d load-report streams: try another relay", lim.MaxStreams)
	}
	defer s.loadStreams.Add(-1)
	var addr net.Addr
	if p, ok := peer.FromContext(ctx); ok {
		addr = p.Addr
	}
	if err := s.register(st, variantLRS, addr); err != nil {
		return err
	}
	st.limiter = rate.NewLimiter(rate.Limit(lim.ReportsPerSecond), lim.ReportBurst)
	s.metrics.StreamOpened(variantLRS)
	err := st.run()
	reason := disconnectReason(err)
	s.metrics.StreamClosed(variantLRS, reason)
	s.logStreamEnd(st.logger, err, reason)
	return err
}

// run reads until the stream ends, then waits for the writer and leaves
// the class. It returns why the stream ended.
func (st *loadStream) run() error {
	timer := time.AfterFunc(st.srv.opts.FirstRequestTimeout, st.firstRequestMissed)
	err := st.read()
	timer.Stop()
	st.mu.Lock()
	st.stopped = true
	st.endLocked(err)
	err = st.endErr
	st.mu.Unlock()
	st.writers.Wait()
	if st.hub != nil {
		// A client that cancelled its stream has the class's stream
		// cancelled if it was the last; one that half-closed, or one
		// the relay ended, has it half-closed.
		st.hub.leave(st, status.Code(err) == codes.Canceled)
	}
	if st.class != nil {
		st.srv.registry.Release(st.class)
	}
	st.srv.forget(st)
	return err
}

func (st *loadStream) read() error {
	for {
		req := new(lrsv3.LoadStatsRequest)
		if err := st.transport.RecvMsg(req); err != nil {
			return err
		}
		if err := st.handle(req); err != nil {
			return err
		}
	}
}

// handle takes one request: the first classifies the stream and joins its
// class's hub; each report is checked against the limits, then merged.
func (st *loadStream) handle(req *lrsv3.LoadStatsRequest) error {
	st.mu.Lock()
	st.requested = true
	st.mu.Unlock()
	if !st.limiter.Allow() {
		return status.Errorf(codes.ResourceExhausted, "load_reporting.reports_per_second: more than %v reports a second (burst %d) on this stream",
			float64(st.limiter.Limit()), st.limiter.Burst())
	}
	if err := st.srv.checkLoadReport(req.GetClusterStats()); err != nil {
		return err
	}
	if st.hub == nil {
		if err := st.join(req.GetNode()); err != nil {
			return err
		}
		if len(req.GetClusterStats()) == 0 {
			return nil // the first request: the node, no report
		}
	}
	st.hub.report(st, req.GetClusterStats())
	st.mu.Lock()
	st.reports++
	st.mu.Unlock()
	st.srv.metrics.LoadReportReceived(st.class.Name)
	return nil
}

// join classifies the stream by node and joins its class's hub.
func (st *loadStream) join(node *corev3.Node) error {
	class, err := st.srv.acquireClass(st.ctx, node)
	if err != nil {
		return err
	}
	st.class, st.nodeID = class, node.GetId()
	st.mu.Lock()
	st.classed = true
	st.mu.Unlock()
	hub, err := st.srv.joinLoad(st, slices.Contains(node.GetClientFeatures(), featureLRSSendAllClusters))
	if err != nil {
		return err
	}
	st.hub = hub
	return nil
}

// featureLRSSendAllClusters is the client feature by which a node says it
// honours send_all_clusters (upstream.FeatureLRSSendAllClusters).
const featureLRSSendAllClusters = "envoy.lrs.supports_send_all_clusters"

// checkLoadReport applies the per-report limits, before anything of the
// report is kept: its clusters and their entries, and the length of every
// string the relay keeps as a key (names, categories, localities,
// endpoint addresses).
func (s *Server) checkLoadReport(stats []*endpointv3.ClusterStats) error {
	lim := s.opts.LoadLimits
	if len(stats) > lim.MaxClustersPerReport {
		return status.Errorf(codes.ResourceExhausted, "load_reporting.max_clusters_per_report: a report of %d clusters exceeds the limit of %d", len(stats), lim.MaxClustersPerReport)
	}
	entries := 0
	maxBytes := s.opts.MaxResourceNameBytes
	long := func(field string, n int) error {
		return status.Errorf(codes.InvalidArgument, "%s: %d bytes exceed limits.max_resource_name_bytes (%d)", field, n, maxBytes)
	}
	for _, cs := range stats {
		entries += statsEntries(cs)
		if entries > lim.MaxStatsPerReport {
			return status.Errorf(codes.ResourceExhausted, "load_reporting.max_stats_per_report: a report of more than %d localities, endpoints, load metrics and drop categories exceeds the limit", lim.MaxStatsPerReport)
		}
		for _, f := range []struct {
			field, v string
		}{{"cluster_stats.cluster_name", cs.GetClusterName()}, {"cluster_stats.cluster_service_name", cs.GetClusterServiceName()}} {
			if len(f.v) > maxBytes {
				return long(f.field, len(f.v))
			}
		}
		for _, d := range cs.GetDroppedRequests() {
			if len(d.GetCategory()) > maxBytes {
				return long("dropped_requests.category", len(d.GetCategory()))
			}
		}
		for _, ls := range cs.GetUpstreamLocalityStats() {
			l := ls.GetLocality()
			if n := len(l.GetRegion()) + len(l.GetZone()) + len(l.GetSubZone()); n > maxBytes {
				return long("upstream_locality_stats.locality", n)
			}
			if err := checkMetricNames(ls.GetLoadMetricStats(), maxBytes, long); err != nil {
				return err
			}
			for _, es := range ls.GetUpstreamEndpointStats() {
				if n := proto.Size(es.GetAddress()); n > maxBytes {
					return long("upstream_endpoint_stats.address", n)
				}
				if err := checkMetricNames(es.GetLoadMetricStats(), maxBytes, long); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func checkMetricNames(ms []*endpointv3.EndpointLoadMetricStats, maxBytes int, long func(string, int) error) error {
	for _, m := range ms {
		if len(m.GetMetricName()) > maxBytes {
			return long("load_metric_stats.metric_name", len(m.GetMetricName()))
		}
	}
	return nil
}

// setRate sets the stream's report rate for a control plane asking for
// interval: twice per interval, or LoadLimits.ReportsPerSecond if higher
// (any goroutine: a rate.Limiter is safe for concurrent use).
func (st *loadStream) setRate(interval time.Duration) {
	r := max(st.srv.opts.LoadLimits.ReportsPerSecond, 2/interval.Seconds())
	if st.limiter != nil {
		st.limiter.SetLimit(rate.Limit(r))
	}
}

// offer has resp written to the client, replacing one not written yet
// (any goroutine; the hub's mu may be held).
func (st *loadStream) offer(resp *lrsv3.LoadStatsResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.stopped {
		return
	}
	st.pending = resp
	if !st.writing {
		st.writing = true
		st.writers.Add(1)
		go st.write()
	}
}

// write writes the pending responses until none is left (the writer
// goroutine).
func (st *loadStream) write() {
	defer st.writers.Done()
	for {
		st.mu.Lock()
		resp := st.pending
		st.pending = nil
		if resp == nil || st.stopped {
			st.writing = false
			st.mu.Unlock()
			return
		}
		st.mu.Unlock()
		if err := st.transport.Send(resp); err != nil {
			st.end(err)
		}
	}
}

// firstRequestMissed ends the stream unless it has sent a request.
func (st *loadStream) firstRequestMissed() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.requested {
		st.endLocked(firstRequestTimeout{st.srv.opts.FirstRequestTimeout})
	}
}

func (st *loadStream) streamID() uint64 { return st.id }

// closeStream ends the stream with ErrDraining (any goroutine).
func (st *loadStream) closeStream() { st.end(ErrDraining) }

// endUnserved implements downstream: a load-report stream is kept through
// an outage of its class's upstream. It asks the relay for no state, so
// the relay owes it nothing it could fall back for; its reports wait in the
// class's window (within its bound) until the upstream stream is back.
func (st *loadStream) endUnserved(*shard.Class) {}

// end ends the stream with err (any goroutine; the first reason wins).
func (st *loadStream) end(err error) {
	st.mu.Lock()
	st.endLocked(err)
	st.mu.Unlock()
}

func (st *loadStream) endLocked(err error) {
	if st.endErr != nil {
		return
	}
	st.endErr = err
	if st.ender != nil {
		_ = st.ender.WriteStatus(status.Convert(err))
	}
}

// status describes the stream, for the admin endpoints.
func (st *loadStream) status() DownstreamStatus {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := DownstreamStatus{ID: st.id, Variant: variantLRS, Peer: st.peer, Started: st.started, LoadReports: st.reports}
	if st.classed {
		out.Node, out.Class = st.nodeID, st.class.Name
	}
	return out
}

func (st *loadStream) logger() *zap.Logger {
	l := st.srv.log.With(zap.Uint64("stream", st.id), zap.String("peer", st.peer), zap.String("kind", variantLRS))
	if st.class != nil {
		l = l.With(st.srv.clog.String("node", st.nodeID), st.srv.clog.String("class", st.class.Name))
	}
	return l
}
