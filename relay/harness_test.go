package relay

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	runtimeservice "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	secretservice "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xds-relay/xds-relay/shard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type (
	request  = discoverygrpc.DiscoveryRequest
	response = discoverygrpc.DiscoveryResponse
)

// discoveryStream is the client side of every SotW method.
type discoveryStream = grpc.BidiStreamingClient[request, response]

const (
	recvTimeout   = 5 * time.Second
	quietWindow   = 300 * time.Millisecond
	eventuallyFor = 5 * time.Second
)

// harness is one relay: a registry fed directly through Class.Apply (the
// "upstream"), the downstream server on a loopback listener, and a client
// connection to it.
type harness struct {
	t        *testing.T
	registry *shard.Registry
	srv      *Server
	addr     string
	conn     *grpc.ClientConn
	node     *corev3.Node
	class    *shard.Class
}

func newHarness(t *testing.T) *harness { t.Helper(); return newHarnessWith(t, nil) }

// newHarnessWith starts a relay whose registry calls start for each class
// (nil: no upstream; the test applies resources itself).
func newHarnessWith(t *testing.T, start func(*shard.Class) func(string)) *harness {
	t.Helper()
	classifier, err := shard.NewClassifier(nil)
	if err != nil {
		t.Fatal(err)
	}
	registry := shard.NewRegistryWith(classifier, start, shard.Lifecycle{})
	srv := NewServer(registry, zaptest.NewLogger(t), Options{})
	g := grpc.NewServer(append(ServerOptions(), grpc.WaitForHandlers(true))...)
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = g.Serve(srv.TrackConnections(lis))
	}()
	t.Cleanup(func() {
		g.Stop()
		<-served
		// Stream readers release their shards after the handler returns;
		// wait for them so nothing logs after the test ends.
		eventually(t, "streams released", func() bool { return srv.StreamCount() == 0 })
	})
	h := &harness{t: t, registry: registry, srv: srv, addr: lis.Addr().String(),
		node: &corev3.Node{Id: "node-1", Cluster: "class-a"}}
	h.conn = h.dial(t)
	if h.class, err = registry.Acquire(h.node); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) dial(t *testing.T, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(h.addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// slowADS opens an ADS stream on a connection of its own with a small
// flow-control window (which also disables BDP growth): the relay's writer
// blocks on a large response until the test reads. The stream ends with the
// test.
func (h *harness) slowADS(t *testing.T) discoveryStream {
	t.Helper()
	conn := h.dial(t, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := openStream(ctx, conn, "")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// apply is the upstream: it installs resources into the harness's class.
func (h *harness) apply(typeURL string, replace bool, rs ...*shard.Resource) {
	h.class.Apply(typeURL, rs, replace)
}

// openStream opens the SotW method of typeURL ("" for ADS) on conn.
func openStream(ctx context.Context, conn *grpc.ClientConn, typeURL string) (discoveryStream, error) {
	switch typeURL {
	case "":
		return discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	case ClusterType:
		return clusterservice.NewClusterDiscoveryServiceClient(conn).StreamClusters(ctx)
	case EndpointType:
		return endpointservice.NewEndpointDiscoveryServiceClient(conn).StreamEndpoints(ctx)
	case ListenerType:
		return listenerservice.NewListenerDiscoveryServiceClient(conn).StreamListeners(ctx)
	case RouteType:
		return routeservice.NewRouteDiscoveryServiceClient(conn).StreamRoutes(ctx)
	case ScopedRouteType:
		return routeservice.NewScopedRoutesDiscoveryServiceClient(conn).StreamScopedRoutes(ctx)
	case SecretType:
		return secretservice.NewSecretDiscoveryServiceClient(conn).StreamSecrets(ctx)
	case RuntimeType:
		return runtimeservice.NewRuntimeDiscoveryServiceClient(conn).StreamRuntime(ctx)
	}
	return nil, fmt.Errorf("no service for %q", typeURL)
}

type recvResult struct {
	resp *response
	err  error
}

// client is a raw xDS client stream. A goroutine reads responses into ch;
// the helpers check every response's envelope as it is taken.
type client struct {
	t      *testing.T
	h      *harness
	s      discoveryStream
	node   *corev3.Node
	cancel context.CancelFunc
	ch     chan recvResult
	done   chan struct{}

	nonces map[string]bool
	last   map[string]*response // last response per type URL
	names  map[string][]string  // last requested names per type URL
	fences int
}

func (h *harness) ads(t *testing.T) *client { return h.open(t, h.conn, "") }

func (h *harness) perType(t *testing.T, typeURL string) *client { return h.open(t, h.conn, typeURL) }

func (h *harness) open(t *testing.T, conn *grpc.ClientConn, typeURL string) *client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := openStream(ctx, conn, typeURL)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c := &client{t: t, h: h, s: s, node: h.node, cancel: cancel, ch: make(chan recvResult, 64), done: make(chan struct{}),
		nonces: map[string]bool{}, last: map[string]*response{}, names: map[string][]string{}}
	go func() {
		defer close(c.done)
		for {
			r, err := s.Recv()
			select {
			case c.ch <- recvResult{r, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(c.close)
	return c
}

// close cancels the stream and waits for its reader.
func (c *client) close() {
	c.cancel()
	<-c.done
}

func (c *client) send(req *request) {
	c.t.Helper()
	if err := c.s.Send(req); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// subscribe sends a request for names of typeURL the way a client does: with
// the last version and nonce it received for the type.
func (c *client) subscribe(typeURL string, names ...string) {
	c.t.Helper()
	req := &request{Node: c.node, TypeUrl: typeURL, ResourceNames: names}
	if last := c.last[typeURL]; last != nil {
		req.VersionInfo, req.ResponseNonce = last.VersionInfo, last.Nonce
	}
	c.names[typeURL] = names
	c.send(req)
}

// ack ACKs resp, keeping the type's resource names.
func (c *client) ack(resp *response) {
	c.t.Helper()
	c.send(&request{Node: c.node, TypeUrl: resp.TypeUrl, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce,
		ResourceNames: c.names[resp.TypeUrl]})
}

// nack rejects resp; version is the last version the client accepted.
func (c *client) nack(resp *response, version, msg string) {
	c.t.Helper()
	c.send(&request{Node: c.node, TypeUrl: resp.TypeUrl, VersionInfo: version, ResponseNonce: resp.Nonce,
		ResourceNames: c.names[resp.TypeUrl], ErrorDetail: statusProto(msg)})
}

// recv returns the next response, failing the test if none arrives within
// timeout. It checks the envelope: a nonce unique on the stream, a type URL
// that every resource has, and no resource name twice.
func recv(t *testing.T, c *client, timeout time.Duration) *response {
	t.Helper()
	select {
	case r := <-c.ch:
		if r.err != nil {
			t.Fatalf("stream failed: %v", r.err)
		}
		checkEnvelope(t, c, r.resp)
		return r.resp
	case <-time.After(timeout):
		t.Fatalf("no response within %v", timeout)
	}
	return nil
}

func checkEnvelope(t *testing.T, c *client, resp *response) {
	t.Helper()
	if resp.Nonce == "" {
		t.Fatalf("response without nonce: %v", resp)
	}
	if c.nonces[resp.Nonce] {
		t.Fatalf("nonce %q reused on the stream", resp.Nonce)
	}
	c.nonces[resp.Nonce] = true
	if resp.TypeUrl == "" || resp.VersionInfo == "" {
		t.Fatalf("response without type_url or version_info: %v", resp)
	}
	seen := map[string]bool{}
	for _, a := range resp.Resources {
		if a.TypeUrl != resp.TypeUrl {
			t.Fatalf("resource of type %q in a %q response", a.TypeUrl, resp.TypeUrl)
		}
		n := resourceName(t, a)
		if seen[n] {
			t.Fatalf("resource %q twice in one response (%v)", n, names(t, resp))
		}
		seen[n] = true
	}
	c.last[resp.TypeUrl] = resp
}

// next is recv with the default timeout.
func (c *client) next() *response {
	c.t.Helper()
	return recv(c.t, c, recvTimeout)
}

// nextOf receives the next response and requires it to be of typeURL.
func (c *client) nextOf(typeURL string) *response {
	c.t.Helper()
	r := c.next()
	if r.TypeUrl != typeURL {
		c.t.Fatalf("got a %s response %v (version %s), want %s", short(r.TypeUrl), names(c.t, r), r.VersionInfo, short(typeURL))
	}
	return r
}

// recvError waits for the stream to fail and returns the error.
func (c *client) recvError() error {
	c.t.Helper()
	select {
	case r := <-c.ch:
		if r.err == nil {
			c.t.Fatalf("got a response, want the stream to fail: %v", r.resp)
		}
		return r.err
	case <-time.After(recvTimeout):
		c.t.Fatalf("stream did not fail within %v", recvTimeout)
	}
	return nil
}

// expectNothing asserts that no response arrives within d.
func expectNothing(t *testing.T, c *client, d time.Duration) {
	t.Helper()
	select {
	case r := <-c.ch:
		if r.err != nil {
			t.Fatalf("stream failed: %v", r.err)
		}
		t.Fatalf("unexpected %s response %v (version %s)", short(r.resp.TypeUrl), names(t, r.resp), r.resp.VersionInfo)
	case <-time.After(d):
	}
}

// fence is a request barrier on an ADS stream: it subscribes the Runtime type
// to a fresh, existing name, which the relay must answer. The stream's
// requests are handled in order and a type made dirty earlier is written
// earlier, so any response provoked by an earlier request (or Apply) arrives
// before the fence's, and the fence's being next proves there was none.
func (c *client) fence() {
	c.t.Helper()
	c.fences++
	name := fmt.Sprintf("fence-%d", c.fences)
	r := resource(c.t, RuntimeType, name, 0)
	c.h.class.Apply(RuntimeType, []*shard.Resource{r}, false)
	c.subscribe(RuntimeType, name)
	got := c.next()
	if got.TypeUrl != RuntimeType || !slices.Equal(names(c.t, got), []string{name}) {
		c.t.Fatalf("barrier: got a %s response %v (version %s) before the fence %s", short(got.TypeUrl), names(c.t, got), got.VersionInfo, name)
	}
}

// eventually polls cond until it holds, failing the test after a deadline.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(eventuallyFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// typeStatus returns the relay's view of typeURL on the only open stream.
func (h *harness) typeStatus(t testing.TB, typeURL string) DownstreamTypeStatus {
	t.Helper()
	streams := h.srv.Streams(0)
	if len(streams) != 1 {
		t.Fatalf("%d streams open, want 1", len(streams))
	}
	for _, ts := range streams[0].Types {
		if ts.TypeURL == typeURL {
			return ts
		}
	}
	t.Fatalf("stream has no state for %s", typeURL)
	return DownstreamTypeStatus{}
}

// shards returns the class's shards of typeURL.
func (h *harness) shards(typeURL string) []shard.ShardStatus {
	for _, ts := range h.class.Status() {
		if ts.TypeURL == typeURL {
			return ts.Shards
		}
	}
	return nil
}
