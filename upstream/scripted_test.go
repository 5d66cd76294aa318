package upstream

import (
	"net"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
)

// scripted is one stream of a scripted server: a real ADS server whose
// responses the test writes by hand, to play control planes (misbehaving
// ones included). The relay's requests arrive on reqs (closed when the
// stream ends); a value on end ends the stream with it.
type scripted[Req, Resp any] struct {
	st   grpc.BidiStreamingServer[Req, Resp]
	reqs chan *Req
	end  chan error
}

// scriptedStream and deltaStream are the SotW and delta streams.
type (
	scriptedStream = scripted[discoverygrpc.DiscoveryRequest, discoverygrpc.DiscoveryResponse]
	deltaStream    = scripted[discoverygrpc.DeltaDiscoveryRequest, discoverygrpc.DeltaDiscoveryResponse]
)

// serveScripted hands st to the test on streams and serves it until the
// test ends it or the relay goes (the gRPC handler's goroutine; the reader
// it starts ends with the stream).
func serveScripted[Req, Resp any](streams chan<- *scripted[Req, Resp], st grpc.BidiStreamingServer[Req, Resp]) error {
	ss := &scripted[Req, Resp]{st: st, reqs: make(chan *Req, 64), end: make(chan error, 1)}
	streams <- ss
	go func() {
		defer close(ss.reqs)
		for {
			req, err := st.Recv()
			if err != nil {
				return
			}
			ss.reqs <- req
		}
	}()
	select {
	case err := <-ss.end:
		return err
	case <-st.Context().Done():
		return nil
	}
}

// scriptedServer is a scripted ADS server of one protocol: it hands each
// stream the relay opens to the test (next). scriptedADS and scriptedDelta
// serve its SotW and delta methods.
type scriptedServer[Req, Resp any] struct {
	discoverygrpc.UnimplementedAggregatedDiscoveryServiceServer
	streams chan *scripted[Req, Resp]
}

type (
	scriptedADS struct {
		*scriptedServer[discoverygrpc.DiscoveryRequest, discoverygrpc.DiscoveryResponse]
	}
	scriptedDelta struct {
		*scriptedServer[discoverygrpc.DeltaDiscoveryRequest, discoverygrpc.DeltaDiscoveryResponse]
	}
)

func (s scriptedADS) StreamAggregatedResources(st grpc.BidiStreamingServer[discoverygrpc.DiscoveryRequest, discoverygrpc.DiscoveryResponse]) error {
	return serveScripted(s.streams, st)
}

func (s scriptedDelta) DeltaAggregatedResources(st grpc.BidiStreamingServer[discoverygrpc.DeltaDiscoveryRequest, discoverygrpc.DeltaDiscoveryResponse]) error {
	return serveScripted(s.streams, st)
}

// startScripted starts a scripted SotW ADS server on loopback.
func startScripted(t *testing.T) (scriptedADS, string) {
	t.Helper()
	srv := scriptedADS{newScriptedServer[discoverygrpc.DiscoveryRequest, discoverygrpc.DiscoveryResponse]()}
	return srv, startScriptedServer(t, srv)
}

// startScriptedDelta starts a scripted delta ADS server on loopback.
func startScriptedDelta(t *testing.T) (scriptedDelta, string) {
	t.Helper()
	srv := scriptedDelta{newScriptedServer[discoverygrpc.DeltaDiscoveryRequest, discoverygrpc.DeltaDiscoveryResponse]()}
	return srv, startScriptedServer(t, srv)
}

func newScriptedServer[Req, Resp any]() *scriptedServer[Req, Resp] {
	return &scriptedServer[Req, Resp]{streams: make(chan *scripted[Req, Resp], 4)}
}

// next returns the next stream the relay opens.
func (s *scriptedServer[Req, Resp]) next(t *testing.T) *scripted[Req, Resp] {
	t.Helper()
	return nextScripted(t, s.streams)
}

// nextScripted returns the next stream the relay opens on streams.
func nextScripted[Req, Resp any](t *testing.T, streams <-chan *scripted[Req, Resp]) *scripted[Req, Resp] {
	t.Helper()
	select {
	case ss := <-streams:
		return ss
	case <-time.After(10 * time.Second):
		t.Fatal("no upstream stream opened")
		return nil
	}
}

// startScriptedServer serves srv's ADS on a loopback address until the test
// ends.
func startScriptedServer(t *testing.T, srv discoverygrpc.AggregatedDiscoveryServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, srv)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); <-done })
	return lis.Addr().String()
}

// request returns the relay's next request on the stream.
func (ss *scripted[Req, Resp]) request(t *testing.T) *Req {
	t.Helper()
	select {
	case r, ok := <-ss.reqs:
		if !ok {
			t.Fatal("stream closed while waiting for a request")
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no request from the relay")
		return nil
	}
}

// quiet asserts the relay sends nothing for d.
func (ss *scripted[Req, Resp]) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case r, ok := <-ss.reqs:
		if ok {
			t.Fatalf("unexpected request %v", r)
		}
	case <-time.After(d):
	}
}

// send writes resp on the stream.
func (ss *scripted[Req, Resp]) send(t *testing.T, resp *Resp) {
	t.Helper()
	if err := ss.st.Send(resp); err != nil {
		t.Fatal(err)
	}
}
