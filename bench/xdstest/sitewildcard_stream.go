package xdstest

import (
	"io"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The streams of a SiteWildcard: each gRPC handler owns its stream. It
// starts one reader, which applies each request to the stream's state under
// SiteWildcard.mu, and is the stream's only writer: woken through a
// buffer-1 channel (by its reader or by a change), it takes what is ready
// under the lock and sends it outside. Either ending ends the stream.

// swADS is the AggregatedDiscoveryService of a SiteWildcard.
type swADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	s *SiteWildcard
}

func (a swADS) StreamAggregatedResources(st grpc.BidiStreamingServer[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]) error {
	return serveSW(a.s, st, &swSotw{s: a.s, types: map[string]*swSotwType{}}, false)
}

func (a swADS) DeltaAggregatedResources(st grpc.BidiStreamingServer[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]) error {
	return serveSW(a.s, st, &swDelta{s: a.s, types: map[string]*swDeltaType{}}, true)
}

// swState is what a change needs of a stream's protocol state.
type swState interface {
	// changed marks what the change of name from before to after (nil:
	// absent) concerns, and reports whether the stream has to be woken.
	changed(typeURL, name string, before, after *swEntry) bool
}

// swProtocol is one stream's protocol state, guarded by SiteWildcard.mu.
type swProtocol[Req, Resp any] interface {
	swState
	request(*Req)   // records and applies a request
	flush() []*Resp // takes the responses ready to send, recorded as sent
}

// swConn is an open stream, as the server's changes reach it.
type swConn struct {
	wake  chan struct{} // buffer 1: something may be ready to send
	state swState       // guarded by SiteWildcard.mu
}

// wakeUp signals the stream's writer; signals collapse.
func (c *swConn) wakeUp() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// serveSW serves one stream until the client ends it, it fails or the
// server closes.
func serveSW[Req, Resp any](s *SiteWildcard, st grpc.BidiStreamingServer[Req, Resp], p swProtocol[Req, Resp], delta bool) error {
	c := &swConn{wake: make(chan struct{}, 1), state: p}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return status.Error(codes.Unavailable, "xdstest: site wildcard server closed")
	}
	s.handlers.Add(2) // this handler and its reader: under mu, so never after Close's Wait began
	s.streams[c] = struct{}{}
	s.stats.Open++
	if delta {
		s.stats.DeltaStreams++
	} else {
		s.stats.Streams++
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.streams, c)
		s.stats.Open--
		s.mu.Unlock()
		s.handlers.Done()
	}()

	recvErr := make(chan error, 1)
	go func() { // ends when Recv fails: the client ended, or the handler returned
		defer s.handlers.Done()
		for {
			r, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			s.mu.Lock()
			p.request(r)
			s.mu.Unlock()
			c.wakeUp()
		}
	}()
	ctx := st.Context()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-recvErr:
			if err == io.EOF {
				return nil
			}
			return err
		case <-c.wake:
		}
		s.mu.Lock()
		out := p.flush()
		s.mu.Unlock()
		for _, r := range out {
			if err := st.Send(r); err != nil {
				return err
			}
		}
	}
}
