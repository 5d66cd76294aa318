package relay

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
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
	addr := serveRelay(t, srv, func() {
		// Stream readers release their shards after the handler returns;
		// wait for them so nothing logs after the test ends.
		eventually(t, "streams released", func() bool { return srv.StreamCount() == 0 })
	}, grpc.WaitForHandlers(true))
	h := &harness{t: t, registry: registry, srv: srv, addr: addr,
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

// put is apply of one new resource (see deltaResource), which it returns.
func (h *harness) put(t testing.TB, typeURL string, replace bool, name string, v int) *shard.Resource {
	t.Helper()
	r := deltaResource(t, typeURL, name, v)
	h.apply(typeURL, replace, r)
	return r
}

// client is a raw SotW xDS client stream; the helpers check every
// response's envelope as it is taken.
type client struct {
	*rawStream[*request, *response]
	node  *corev3.Node
	names map[string][]string // last requested names per type URL
}

func (h *harness) ads(t *testing.T) *client { return h.open(t, h.conn, "") }

func (h *harness) perType(t *testing.T, typeURL string) *client { return h.open(t, h.conn, typeURL) }

func (h *harness) open(t *testing.T, conn *grpc.ClientConn, typeURL string) *client {
	t.Helper()
	c := &client{rawStream: openRaw[request, response](t, h, conn, typeURL, false), node: h.node, names: map[string][]string{}}
	c.check = c.checkEnvelope
	c.describe = func(r *response) string { return fmt.Sprintf("%v (version %s)", names(t, r), r.VersionInfo) }
	return c
}

func (c *client) send(req *request) {
	c.t.Helper()
	c.sendRaw(req)
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

// checkEnvelope checks what every SotW response must satisfy besides its
// nonce: a version, a type URL that every resource has, and no resource
// name twice.
func (c *client) checkEnvelope(resp *response) {
	t := c.t
	t.Helper()
	if resp.VersionInfo == "" {
		t.Fatalf("response without version_info: %v", resp)
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
}

// fence is a request barrier on an ADS stream: it subscribes the Runtime type
// to a fresh, existing name, which the relay must answer. The stream's
// requests are handled in order and a type made dirty earlier is written
// earlier, so any response provoked by an earlier request (or Apply) arrives
// before the fence's, and the fence's being next proves there was none.
func (c *client) fence() {
	c.t.Helper()
	name := c.fenceName()
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
