package relay

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/bench/xdstest"
)

// The raw client streams of the relay's tests, SotW (client) and delta
// (deltaClient), share this: a stream of either protocol on any service, a
// goroutine reading its responses into a bounded channel, and the checks
// every response gets whatever the protocol (a nonce unique on the stream, the
// service's type URL on a per-type stream).

// methods are the SotW and delta methods of each type URL's service ("" for
// ADS): service, SotW method, delta method ("" where there is none).
var methods = map[string][3]string{
	"":              {"envoy.service.discovery.v3.AggregatedDiscoveryService", "StreamAggregatedResources", "DeltaAggregatedResources"},
	ListenerType:    {"envoy.service.listener.v3.ListenerDiscoveryService", "StreamListeners", "DeltaListeners"},
	RouteType:       {"envoy.service.route.v3.RouteDiscoveryService", "StreamRoutes", "DeltaRoutes"},
	ScopedRouteType: {"envoy.service.route.v3.ScopedRoutesDiscoveryService", "StreamScopedRoutes", "DeltaScopedRoutes"},
	VirtualHostType: {"envoy.service.route.v3.VirtualHostDiscoveryService", "", "DeltaVirtualHosts"},
	ClusterType:     {"envoy.service.cluster.v3.ClusterDiscoveryService", "StreamClusters", "DeltaClusters"},
	EndpointType:    {"envoy.service.endpoint.v3.EndpointDiscoveryService", "StreamEndpoints", "DeltaEndpoints"},
	SecretType:      {"envoy.service.secret.v3.SecretDiscoveryService", "StreamSecrets", "DeltaSecrets"},
	RuntimeType:     {"envoy.service.runtime.v3.RuntimeDiscoveryService", "StreamRuntime", "DeltaRuntime"},
}

// openMethod opens the SotW or delta method of typeURL's service ("" for
// ADS) on conn.
func openMethod[Req, Resp any](ctx context.Context, conn *grpc.ClientConn, typeURL string, delta bool) (grpc.BidiStreamingClient[Req, Resp], error) {
	m := methods[typeURL]
	name := m[1]
	if delta {
		name = m[2]
	}
	if name == "" {
		return nil, fmt.Errorf("no service for %q (delta %v)", typeURL, delta)
	}
	desc := &grpc.StreamDesc{StreamName: name, ServerStreams: true, ClientStreams: true}
	s, err := conn.NewStream(ctx, desc, "/"+m[0]+"/"+name)
	if err != nil {
		return nil, err
	}
	return &grpc.GenericClientStream[Req, Resp]{ClientStream: s}, nil
}

// openStream opens the SotW method of typeURL ("" for ADS) on conn.
func openStream(ctx context.Context, conn *grpc.ClientConn, typeURL string) (discoveryStream, error) {
	return openMethod[request, response](ctx, conn, typeURL, false)
}

// openDelta opens the delta method of typeURL ("" for ADS) on conn.
func openDelta(ctx context.Context, conn *grpc.ClientConn, typeURL string) (deltaClientStream, error) {
	return openMethod[deltaRequest, deltaResponse](ctx, conn, typeURL, true)
}

// rawResponse is a response of either protocol.
type rawResponse interface {
	proto.Message
	GetNonce() string
	GetTypeUrl() string
}

type rawResult[Resp any] struct {
	resp Resp
	err  error
}

// rawSender is the sending side of a client stream of requests Req.
type rawSender[Req any] interface {
	Send(Req) error
	CloseSend() error
}

// rawStream is one raw client stream of either protocol (Req and Resp are
// the pointer types of its messages). Its reader goroutine ends with the
// stream (close, run at the test's cleanup).
type rawStream[Req any, Resp rawResponse] struct {
	t       *testing.T
	h       *harness
	s       rawSender[Req]
	service string // the per-type service's type URL; "" for ADS
	cancel  context.CancelFunc
	ch      chan rawResult[Resp] // bounded: the reader waits for the test
	done    chan struct{}

	nonces map[string]bool
	last   map[string]Resp // last response per type URL
	fences int
	// check is the protocol's envelope check of each response next returns.
	check func(Resp)
	// describe says what a response carries, for failure messages.
	describe func(Resp) string
}

// openRaw opens typeURL's method ("" for ADS) of the protocol on conn.
func openRaw[Q, R any, Resp interface {
	*R
	rawResponse
}](t *testing.T, h *harness, conn *grpc.ClientConn, typeURL string, delta bool) *rawStream[*Q, Resp] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := openMethod[Q, R](ctx, conn, typeURL, delta)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &rawStream[*Q, Resp]{t: t, h: h, s: s, service: typeURL, cancel: cancel,
		ch: make(chan rawResult[Resp], 64), done: make(chan struct{}),
		nonces: map[string]bool{}, last: map[string]Resp{},
		check: func(Resp) {}, describe: func(r Resp) string { return fmt.Sprint(r) }}
	go func() {
		defer close(r.done)
		for {
			m, err := s.Recv()
			select {
			case r.ch <- rawResult[Resp]{Resp(m), err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(r.close)
	return r
}

// close cancels the stream and waits for its reader.
func (r *rawStream[Req, Resp]) close() {
	r.cancel()
	<-r.done
}

// sendRaw sends req as it is.
func (r *rawStream[Req, Resp]) sendRaw(req Req) {
	r.t.Helper()
	if err := r.s.Send(req); err != nil {
		r.t.Fatalf("send: %v", err)
	}
}

// nextUnchecked returns the next response within d, checking only what any
// response must satisfy (a fresh nonce, the service's type), for responses
// the protocol's envelope check refuses (heartbeats, Resource wrappers).
func (r *rawStream[Req, Resp]) nextUnchecked(d time.Duration) Resp {
	r.t.Helper()
	select {
	case res := <-r.ch:
		if res.err != nil {
			r.t.Fatalf("stream failed: %v", res.err)
		}
		resp := res.resp
		if resp.GetNonce() == "" || r.nonces[resp.GetNonce()] {
			r.t.Fatalf("response nonce %q empty or reused on the stream", resp.GetNonce())
		}
		r.nonces[resp.GetNonce()] = true
		if resp.GetTypeUrl() == "" || r.service != "" && resp.GetTypeUrl() != r.service {
			r.t.Fatalf("response type_url %q on a stream of %q", resp.GetTypeUrl(), r.service)
		}
		r.last[resp.GetTypeUrl()] = resp
		return resp
	case <-time.After(d):
		r.t.Fatalf("no response within %v", d)
	}
	var zero Resp
	return zero
}

// recvWithin returns the next response within d, checking its envelope.
func (r *rawStream[Req, Resp]) recvWithin(d time.Duration) Resp {
	r.t.Helper()
	resp := r.nextUnchecked(d)
	r.check(resp)
	return resp
}

// next returns the next response, checked, failing the test if none
// arrives in time.
func (r *rawStream[Req, Resp]) next() Resp {
	r.t.Helper()
	return r.recvWithin(recvTimeout)
}

// nextOf receives the next response and requires it to be of typeURL.
func (r *rawStream[Req, Resp]) nextOf(typeURL string) Resp {
	r.t.Helper()
	resp := r.next()
	if resp.GetTypeUrl() != typeURL {
		r.t.Fatalf("got a %s response %s, want %s", short(resp.GetTypeUrl()), r.describe(resp), short(typeURL))
	}
	return resp
}

// recvError waits for the stream to fail and returns the error.
func (r *rawStream[Req, Resp]) recvError() error {
	r.t.Helper()
	select {
	case res := <-r.ch:
		if res.err == nil {
			r.t.Fatalf("got a response, want the stream to fail: %v", res.resp)
		}
		return res.err
	case <-time.After(recvTimeout):
		r.t.Fatalf("stream did not fail within %v", recvTimeout)
	}
	return nil
}

// wantRefused sends reqs and requires the stream to end with code, the
// message naming field. A later send may already see the stream fail.
func (r *rawStream[Req, Resp]) wantRefused(reqs []Req, code codes.Code, field string) {
	r.t.Helper()
	for _, req := range reqs {
		_ = r.s.Send(req)
	}
	err := r.recvError()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), field) {
		r.t.Fatalf("got %v, want %v naming %q", err, code, field)
	}
}

// expectNothing asserts that no response arrives within d.
func (r *rawStream[Req, Resp]) expectNothing(d time.Duration) {
	r.t.Helper()
	select {
	case res := <-r.ch:
		if res.err != nil {
			r.t.Fatalf("stream failed: %v", res.err)
		}
		r.t.Fatalf("unexpected %s response %s", short(res.resp.GetTypeUrl()), r.describe(res.resp))
	case <-time.After(d):
	}
}

// fenceName is the name of the stream's next fence resource.
func (r *rawStream[Req, Resp]) fenceName() string {
	r.fences++
	return fmt.Sprintf("fence-%d", r.fences)
}

// serveRelay serves srv on a loopback listener with a gRPC server of opts
// until the test ends, and returns the address. At the end it stops the
// server, waits for Serve, then runs stopped (if not nil).
func serveRelay(t *testing.T, srv *Server, stopped func(), opts ...grpc.ServerOption) string {
	t.Helper()
	if stopped != nil {
		t.Cleanup(stopped) // registered first: runs after the server's stop
	}
	g := grpc.NewServer(append(ServerOptions(), opts...)...)
	srv.Register(g)
	return xdstest.ServeGRPC(t, g, srv.TrackConnections)
}
