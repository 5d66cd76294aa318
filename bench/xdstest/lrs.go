package xdstest

import (
	"context"
	"errors"
	"io"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// LRSServer is a load reporting server (envoy.service.load_stats.v3
// LoadReportingService) over go-control-plane's protos, which has none of
// its own: it answers each stream's first request with its response (none
// while that is nil), sends a new response to every open stream on
// SetResponse, and records every stream it served and every request it
// received. Register it beside a ControlPlane (CPOptions.LRS) or on any
// gRPC server.
type LRSServer struct {
	lrsv3.UnimplementedLoadReportingServiceServer

	mu      sync.Mutex
	resp    *lrsv3.LoadStatsResponse // sent after a stream's first request; nil: nothing
	streams []*lrsStream
	changed chan struct{} // closed and replaced on every record
}

// lrsStream is one served stream: its record and where new responses go.
type lrsStream struct {
	rec  LRSStream
	send chan *lrsv3.LoadStatsResponse // buffered; guarded by LRSServer.mu for sends
}

// LRSStream is what one stream of an LRSServer received.
type LRSStream struct {
	Node     *corev3.Node              // of the first request
	Requests []*lrsv3.LoadStatsRequest // every request, the first included, in order
	Open     bool                      // the stream is still being served
	// End is why the stream ended, once it has: io.EOF when the client
	// half-closed, a CANCELLED status when it cancelled.
	End error
}

// NewLRSServer returns a server answering each stream's first request with
// resp (nil: no answer until SetResponse).
func NewLRSServer(resp *lrsv3.LoadStatsResponse) *LRSServer {
	return &LRSServer{resp: resp, changed: make(chan struct{})}
}

// Register installs the service on g.
func (s *LRSServer) Register(g grpc.ServiceRegistrar) {
	lrsv3.RegisterLoadReportingServiceServer(g, s)
}

// SetResponse makes resp the response of new streams and sends it to every
// open one that has sent its first request.
func (s *LRSServer) SetResponse(resp *lrsv3.LoadStatsResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resp = resp
	for _, st := range s.streams {
		if st.rec.Open {
			select {
			case st.send <- resp:
			default: // a stream not reading: it keeps its last
			}
		}
	}
}

// StreamLoadStats implements lrsv3.LoadReportingServiceServer.
func (s *LRSServer) StreamLoadStats(stream lrsv3.LoadReportingService_StreamLoadStatsServer) error {
	st := &lrsStream{send: make(chan *lrsv3.LoadStatsResponse, 16)}
	var end error
	defer func() {
		s.mu.Lock()
		st.rec.Open, st.rec.End = false, end
		s.notifyLocked()
		s.mu.Unlock()
	}()
	reqs := make(chan *lrsv3.LoadStatsRequest)
	errc := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case reqs <- req:
			case <-stream.Context().Done():
				return
			}
		}
	}()
	for {
		select {
		case end = <-errc:
			if errors.Is(end, io.EOF) {
				return nil
			}
			return end
		case <-stream.Context().Done():
			end = status.FromContextError(stream.Context().Err()).Err()
			return end
		case req := <-reqs:
			s.mu.Lock()
			first := len(st.rec.Requests) == 0
			st.rec.Requests = append(st.rec.Requests, proto.Clone(req).(*lrsv3.LoadStatsRequest))
			if first {
				st.rec.Node = proto.Clone(req.GetNode()).(*corev3.Node)
				st.rec.Open = true
				s.streams = append(s.streams, st)
				if s.resp != nil {
					st.send <- s.resp
				}
			}
			s.notifyLocked()
			s.mu.Unlock()
		case resp := <-st.send:
			if end = stream.Send(resp); end != nil {
				return end
			}
		}
	}
}

func (s *LRSServer) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Streams returns a copy of every stream served so far, in the order of
// their first requests.
func (s *LRSServer) Streams() []LRSStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]LRSStream, len(s.streams))
	for i, st := range s.streams {
		out[i] = LRSStream{Node: st.rec.Node, Requests: append([]*lrsv3.LoadStatsRequest(nil), st.rec.Requests...), Open: st.rec.Open, End: st.rec.End}
	}
	return out
}

// ClusterStats returns every ClusterStats of every request received, in
// the order received.
func (s *LRSServer) ClusterStats() []*endpointv3.ClusterStats {
	var out []*endpointv3.ClusterStats
	for _, st := range s.Streams() {
		for _, r := range st.Requests {
			out = append(out, r.GetClusterStats()...)
		}
	}
	return out
}

// LoadTotals sums what the server was told of a cluster over every report.
type LoadTotals struct {
	Reports                         int // ClusterStats received for the cluster
	Succeeded, Errors, Issued, Drop uint64
}

// Totals sums the load reported for cluster over every stream.
func (s *LRSServer) Totals(cluster string) LoadTotals {
	var t LoadTotals
	for _, cs := range s.ClusterStats() {
		if cs.GetClusterName() != cluster {
			continue
		}
		t.Reports++
		t.Drop += cs.GetTotalDroppedRequests()
		for _, l := range cs.GetUpstreamLocalityStats() {
			t.Succeeded += l.GetTotalSuccessfulRequests()
			t.Errors += l.GetTotalErrorRequests()
			t.Issued += l.GetTotalIssuedRequests()
		}
	}
	return t
}

// WaitFor waits until cond holds of the streams served (it is checked on
// every change), or ctx ends.
func (s *LRSServer) WaitFor(ctx context.Context, cond func([]LRSStream) bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond(s.Streams()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}
