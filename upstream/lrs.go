package upstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/shard"
)

// A class's load reports go upstream on one LoadReportingService stream of
// the class (relay/lrs.go aggregates its clients' reports into it): opened
// on a connection of the pool like the class's ADS stream, with the class's
// upstream node, and closed when the class's last reporting client leaves.

const lrsMethod = "/envoy.service.load_stats.v3.LoadReportingService/StreamLoadStats"

// FeatureLRSSendAllClusters is the client feature by which a node says it
// honours LoadStatsResponse.send_all_clusters.
const FeatureLRSSendAllClusters = "envoy.lrs.supports_send_all_clusters"

// FinalReportWait bounds how long a load-report stream being stopped waits
// for its last report to be sent and the control plane to end the stream.
const FinalReportWait = time.Second

// LoadFeed is the relay's side of a class's upstream load-report stream.
// The stream calls it from its own goroutine.
type LoadFeed interface {
	// LoadResponse is each LoadStatsResponse the control plane sends (the
	// clusters it wants, the interval), to be passed to the clients.
	LoadResponse(*lrsv3.LoadStatsResponse)
	// LoadDue is signalled when a report is due; the stream then takes it
	// with CollectLoad and sends it (once the control plane has answered
	// the stream's first request).
	LoadDue() <-chan struct{}
	// CollectLoad returns the load aggregated since the last call, and
	// starts a new window.
	CollectLoad() []*endpointv3.ClusterStats
	// LoadRefused says the control plane cannot take load reports (err is
	// UNIMPLEMENTED, its message says why): the stream has ended and is
	// not tried again.
	LoadRefused(err error)
}

// NoLRSError is the status clients get when the control plane does not
// serve LoadReportingService.
func NoLRSError(addr string, upstreamErr error) error {
	return status.Errorf(codes.Unimplemented,
		"the control plane (%s) has no load reporting service: it answered %s with %v; xds-relay cannot forward load reports",
		addr, lrsMethod, status.Convert(upstreamErr).Message())
}

// ReportLoad opens the class's upstream load-report stream: the class's
// upstream node (its node id and the identifying fields of its first
// node, as its ADS stream presents), with FeatureLRSSendAllClusters added
// when sendAll. The stream reconnects with the backoff until stop, and
// ends for good when the control plane answers UNIMPLEMENTED (feed's
// LoadRefused). stop sends the last report, then half-closes the stream
// or, with abort, cancels it (as the class's last client ended its own),
// within FinalReportWait, and returns once the stream's goroutine has.
func (c *Client) ReportLoad(class *shard.Class, sendAll bool, feed LoadFeed) (stop func(abort bool)) {
	node := c.classNode(class)
	if sendAll && !slices.Contains(node.ClientFeatures, FeatureLRSSendAllClusters) {
		node.ClientFeatures = append(node.ClientFeatures, FeatureLRSSendAllClusters)
	}
	stopCtx, stopNow := context.WithCancel(context.Background())
	ls := &loadStream{c: c, class: class, node: node, feed: feed, stopping: stopCtx,
		log: c.log.With(zap.String("class", class.Name), zap.String("stream", "lrs"))}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		stopNow()
		return func(bool) {}
	}
	ctx, cancel := context.WithCancel(c.ctx)
	done := make(chan struct{})
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		defer close(done)
		defer cancel()
		ls.run(ctx)
	}()
	var once sync.Once
	return func(abort bool) {
		once.Do(func() {
			ls.abort.Store(abort)
			stopNow()
			<-done
		})
	}
}

// classNode is the node the class's upstream streams present.
func (c *Client) classNode(class *shard.Class) *corev3.Node {
	id := c.cfg.RelayID
	if id == "" {
		id = c.self.relayID(class.Node)
	}
	return upstreamNode(class.Node, id)
}

// loadStream is one class's upstream load-report stream, run by one
// goroutine (run).
type loadStream struct {
	// Read-only after creation.
	c        *Client
	class    *shard.Class
	node     *corev3.Node
	feed     LoadFeed
	stopping context.Context // ended by stop
	log      *zap.Logger

	abort atomic.Bool // stop cancels the stream instead of half-closing it (set before stopping ends)
}

// errStopped ends a session that was stopped.
var errStopped = errors.New("load reporting stopped")

// run keeps a session open until stop or ctx ends, backing off between
// failures; a control plane without LRS ends it for good.
func (ls *loadStream) run(ctx context.Context) {
	failures := 0
	for {
		answered, err := ls.session(ctx)
		if ctx.Err() != nil || ls.stopping.Err() != nil {
			return
		}
		if status.Code(err) == codes.Unimplemented {
			ls.warn("the control plane has no load reporting service: load reports are refused", zap.Error(err))
			ls.feed.LoadRefused(NoLRSError(ls.c.cfg.Address, err))
			return
		}
		if answered {
			failures = 0
		}
		delay := ls.c.cfg.Backoff.Delay(failures)
		failures++
		ls.warn("upstream load-report stream failed; retrying", ls.c.cfg.LogGate.String("error", err.Error()), zap.Duration("backoff", delay))
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
		case <-ls.stopping.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

func (ls *loadStream) warn(msg string, fields ...zap.Field) {
	ok, suppressed := ls.c.cfg.LogGate.Allow()
	if ok {
		ls.log.Warn(msg, append(fields, suppressed)...)
	}
}

// loadReceived is one message of the control plane.
type loadReceived struct {
	resp *lrsv3.LoadStatsResponse
	err  error
}

// session runs one stream: the node first, then a report whenever the feed
// says one is due, once the control plane has answered. answered reports
// whether it did.
func (ls *loadStream) session(ctx context.Context) (answered bool, err error) {
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	// Until the stream is open, stop ends it at once (a control plane that
	// is down must not hold stop); once open, stop sends the last report.
	disarm := context.AfterFunc(ls.stopping, scancel)
	// With affinity, to the member the class's ADS stream goes to.
	m := ls.c.members.pick(ls.class.Name)
	if m == nil {
		disarm()
		return false, errNoMember
	}
	pc, err := m.pool.acquire(sctx, func() {})
	if err != nil {
		disarm()
		return false, fmt.Errorf("get a connection: %w", err)
	}
	defer m.pool.release(pc)
	st, err := pc.cc.NewStream(sctx, &lrsv3.LoadReportingService_ServiceDesc.Streams[0], lrsMethod, grpc.WaitForReady(true))
	if err == nil {
		err = st.SendMsg(&lrsv3.LoadStatsRequest{Node: ls.node})
	}
	if !disarm() {
		return false, errStopped
	}
	if err != nil {
		return false, fmt.Errorf("open the load-report stream: %w", err)
	}
	recv := make(chan loadReceived)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer scancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			r := loadReceived{resp: &lrsv3.LoadStatsResponse{}}
			r.err = st.RecvMsg(r.resp)
			select {
			case recv <- r:
			case <-sctx.Done():
				return
			}
			if r.err != nil {
				return
			}
		}
	}()
	send := func() error { return ls.sendReport(st, ls.feed.CollectLoad()) }
	owed := false // a report fell due before the control plane answered
	for {
		select {
		case <-sctx.Done():
			return answered, sctx.Err()
		case r := <-recv:
			if r.err != nil {
				return answered, r.err
			}
			answered = true
			ls.feed.LoadResponse(r.resp)
			if owed {
				owed = false
				if err := send(); err != nil {
					return answered, err
				}
			}
		case <-ls.feed.LoadDue():
			if !answered {
				owed = true
				continue
			}
			if err := send(); err != nil {
				return answered, err
			}
		case <-ls.stopping.Done():
			if answered {
				ls.finish(sctx, st, recv, scancel)
			}
			return answered, errStopped
		}
	}
}

// finish sends the last report, if there is load in it, and half-closes
// the stream, then waits for the control plane to end it, all within
// FinalReportWait (past it the stream is cancelled: a send blocked on flow
// control returns). With abort the stream is cancelled once the report is
// sent (grpc-go writes a message it has taken before the cancellation's
// RST_STREAM).
func (ls *loadStream) finish(ctx context.Context, st grpc.ClientStream, recv <-chan loadReceived, cancel context.CancelFunc) {
	t := time.AfterFunc(FinalReportWait, cancel)
	defer t.Stop()
	if stats := ls.feed.CollectLoad(); len(stats) > 0 {
		if err := ls.sendReport(st, stats); err != nil {
			return
		}
	}
	if ls.abort.Load() || st.CloseSend() != nil {
		return // the session's cancel ends the stream
	}
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-recv:
			if r.err != nil {
				return
			}
		}
	}
}

// sendReport sends one report of the class's load.
func (ls *loadStream) sendReport(st grpc.ClientStream, stats []*endpointv3.ClusterStats) error {
	if err := st.SendMsg(&lrsv3.LoadStatsRequest{ClusterStats: stats}); err != nil {
		return fmt.Errorf("send a load report: %w", err)
	}
	ls.c.cfg.Metrics.LoadReportSent(ls.class.Name)
	return nil
}
