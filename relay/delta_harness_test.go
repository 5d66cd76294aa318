package relay

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	runtimeservice "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	secretservice "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/shard"
)

type (
	deltaRequest  = discoverygrpc.DeltaDiscoveryRequest
	deltaResponse = discoverygrpc.DeltaDiscoveryResponse
	// deltaClientStream is the client side of every delta method.
	deltaClientStream = grpc.BidiStreamingClient[deltaRequest, deltaResponse]
)

// openDelta opens the delta method of typeURL ("" for ADS) on conn.
func openDelta(ctx context.Context, conn *grpc.ClientConn, typeURL string) (deltaClientStream, error) {
	switch typeURL {
	case "":
		return discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	case ClusterType:
		return clusterservice.NewClusterDiscoveryServiceClient(conn).DeltaClusters(ctx)
	case EndpointType:
		return endpointservice.NewEndpointDiscoveryServiceClient(conn).DeltaEndpoints(ctx)
	case ListenerType:
		return listenerservice.NewListenerDiscoveryServiceClient(conn).DeltaListeners(ctx)
	case RouteType:
		return routeservice.NewRouteDiscoveryServiceClient(conn).DeltaRoutes(ctx)
	case ScopedRouteType:
		return routeservice.NewScopedRoutesDiscoveryServiceClient(conn).DeltaScopedRoutes(ctx)
	case SecretType:
		return secretservice.NewSecretDiscoveryServiceClient(conn).DeltaSecrets(ctx)
	case RuntimeType:
		return runtimeservice.NewRuntimeDiscoveryServiceClient(conn).DeltaRuntime(ctx)
	case VirtualHostType:
		return routeservice.NewVirtualHostDiscoveryServiceClient(conn).DeltaVirtualHosts(ctx)
	}
	return nil, fmt.Errorf("no delta service for %q", typeURL)
}

// deltaResource is resource, plus VirtualHost (only served by delta VHDS).
func deltaResource(t testing.TB, typeURL, name string, v int) *shard.Resource {
	t.Helper()
	if typeURL == VirtualHostType {
		return encode(t, name, &routev3.VirtualHost{Name: name, Domains: []string{fmt.Sprintf("v%d.example.com", v)}})
	}
	return resource(t, typeURL, name, v)
}

type deltaResult struct {
	resp *deltaResponse
	err  error
}

// deltaClient is a raw delta xDS client stream. A goroutine reads responses
// into ch; the helpers check every response's envelope as it is taken.
type deltaClient struct {
	t        *testing.T
	h        *harness
	s        deltaClientStream
	service  string // the per-type service's type URL; "" for ADS
	node     *corev3.Node
	nodeSent bool
	cancel   context.CancelFunc
	ch       chan deltaResult
	done     chan struct{}

	nonces    map[string]bool
	last      map[string]*deltaResponse // last response per type URL
	fences    int
	fenceType string // type of ADS fences (RuntimeType unless the test uses it)
}

func (h *harness) deltaADS(t *testing.T) *deltaClient { return h.openDeltaClient(t, h.conn, "") }

func (h *harness) deltaPerType(t *testing.T, typeURL string) *deltaClient {
	return h.openDeltaClient(t, h.conn, typeURL)
}

func (h *harness) openDeltaClient(t *testing.T, conn *grpc.ClientConn, typeURL string) *deltaClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := openDelta(ctx, conn, typeURL)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c := &deltaClient{t: t, h: h, s: s, service: typeURL, node: h.node, cancel: cancel,
		ch: make(chan deltaResult, 64), done: make(chan struct{}),
		nonces: map[string]bool{}, last: map[string]*deltaResponse{}, fenceType: RuntimeType}
	go func() {
		defer close(c.done)
		for {
			r, err := s.Recv()
			select {
			case c.ch <- deltaResult{r, err}:
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
func (c *deltaClient) close() {
	c.cancel()
	<-c.done
}

// send sends req; the node goes on the stream's first request only, as
// Envoy does with set_node_on_first_message_only.
func (c *deltaClient) send(req *deltaRequest) {
	c.t.Helper()
	if !c.nodeSent && req.Node == nil {
		req.Node = c.node
	}
	c.nodeSent = true
	if err := c.s.Send(req); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// request changes the subscription of typeURL, carrying the nonce of the
// last response received for the type, as a client does.
func (c *deltaClient) request(typeURL string, sub, unsub []string) {
	c.t.Helper()
	req := &deltaRequest{TypeUrl: typeURL, ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub}
	if last := c.last[typeURL]; last != nil {
		req.ResponseNonce = last.Nonce
	}
	c.send(req)
}

func (c *deltaClient) subscribe(typeURL string, names ...string) {
	c.t.Helper()
	c.request(typeURL, names, nil)
}

func (c *deltaClient) unsubscribe(typeURL string, names ...string) {
	c.t.Helper()
	c.request(typeURL, nil, names)
}

// ack ACKs resp and changes nothing else.
func (c *deltaClient) ack(resp *deltaResponse) {
	c.t.Helper()
	c.send(&deltaRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce})
}

// nack rejects resp.
func (c *deltaClient) nack(resp *deltaResponse, msg string) {
	c.t.Helper()
	c.send(&deltaRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce, ErrorDetail: statusProto(msg)})
}

// next returns the next response, failing the test if none arrives in time.
func (c *deltaClient) next() *deltaResponse {
	c.t.Helper()
	select {
	case r := <-c.ch:
		if r.err != nil {
			c.t.Fatalf("stream failed: %v", r.err)
		}
		c.checkEnvelope(r.resp)
		return r.resp
	case <-time.After(recvTimeout):
		c.t.Fatalf("no delta response within %v", recvTimeout)
	}
	return nil
}

// checkEnvelope checks what every delta response must satisfy: a nonce
// unique on the stream, a type URL (the service's on per-type streams), a
// system version, and well-formed resources: named, versioned, of the
// response's type, each named once and never both sent and removed.
func (c *deltaClient) checkEnvelope(resp *deltaResponse) {
	t := c.t
	t.Helper()
	if resp.Nonce == "" || c.nonces[resp.Nonce] {
		t.Fatalf("response nonce %q empty or reused on the stream", resp.Nonce)
	}
	c.nonces[resp.Nonce] = true
	if resp.TypeUrl == "" || c.service != "" && resp.TypeUrl != c.service {
		t.Fatalf("response type_url %q on a stream of %q", resp.TypeUrl, c.service)
	}
	if resp.SystemVersionInfo == "" {
		t.Fatalf("response without system_version_info: %v", resp)
	}
	seen := map[string]bool{}
	for _, r := range resp.Resources {
		if r.Name == "" || r.Version == "" || r.Resource == nil {
			t.Fatalf("resource without name, version or body: %v", r)
		}
		if r.Resource.TypeUrl != resp.TypeUrl {
			t.Fatalf("resource %q of type %q in a %q response", r.Name, r.Resource.TypeUrl, resp.TypeUrl)
		}
		if n := resourceName(t, r.Resource); n != r.Name {
			t.Fatalf("resource entry %q carries resource %q", r.Name, n)
		}
		if seen[r.Name] {
			t.Fatalf("resource %q twice in one response", r.Name)
		}
		seen[r.Name] = true
	}
	for _, n := range resp.RemovedResources {
		if seen[n] {
			t.Fatalf("%q both sent and removed in one response", n)
		}
		seen[n] = true
	}
	c.last[resp.TypeUrl] = resp
}

// nextOf receives the next response and requires it to be of typeURL.
func (c *deltaClient) nextOf(typeURL string) *deltaResponse {
	c.t.Helper()
	r := c.next()
	if r.TypeUrl != typeURL {
		c.t.Fatalf("got a %s response %v removed %v, want %s", short(r.TypeUrl), deltaNames(r), r.RemovedResources, short(typeURL))
	}
	return r
}

// recvError waits for the stream to fail and returns the error.
func (c *deltaClient) recvError() error {
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
func (c *deltaClient) expectNothing(d time.Duration) {
	c.t.Helper()
	select {
	case r := <-c.ch:
		if r.err != nil {
			c.t.Fatalf("stream failed: %v", r.err)
		}
		c.t.Fatalf("unexpected %s response %v removed %v", short(r.resp.TypeUrl), deltaNames(r.resp), r.resp.RemovedResources)
	case <-time.After(d):
	}
}

// fence is a request barrier. On ADS it subscribes the fence type (Runtime
// by default) to a fresh, existing name; on a per-type stream, its own type
// (applied without replace: the type's absence is no longer known
// afterwards). The relay must answer with exactly that resource. Requests
// are handled in order and a response queued earlier is written earlier (or
// merged into the fence's own, same-type response), so the fence's response
// being next and exactly the fence proves nothing else was due.
func (c *deltaClient) fence() {
	c.t.Helper()
	c.fences++
	name := fmt.Sprintf("fence-%d", c.fences)
	typeURL := c.fenceType
	if c.service != "" {
		typeURL = c.service
	}
	r := deltaResource(c.t, typeURL, name, 0)
	c.h.class.Apply(typeURL, []*shard.Resource{r}, false)
	c.subscribe(typeURL, name)
	got := c.next()
	if got.TypeUrl != typeURL || !slices.Equal(deltaNames(got), []string{name}) || len(got.RemovedResources) > 0 {
		c.t.Fatalf("barrier: got a %s response %v removed %v before the fence %s", short(got.TypeUrl), deltaNames(got), got.RemovedResources, name)
	}
}

// deltaNames returns the names of a response's resources, sorted.
func deltaNames(resp *deltaResponse) []string {
	out := make([]string, 0, len(resp.Resources))
	for _, r := range resp.Resources {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}

// wantDelta asserts resp carries exactly rs (by name, content and the
// content-hash version) and removes exactly removed.
func wantDelta(t testing.TB, resp *deltaResponse, removed []string, rs ...*shard.Resource) {
	t.Helper()
	want := make([]string, 0, len(rs))
	for _, r := range rs {
		want = append(want, r.Name)
	}
	slices.Sort(want)
	if got := deltaNames(resp); !slices.Equal(got, want) {
		t.Fatalf("%s response %s has %v, want %v", short(resp.TypeUrl), resp.SystemVersionInfo, got, want)
	}
	gotRemoved := slices.Sorted(slices.Values(resp.RemovedResources))
	wantRemoved := slices.Sorted(slices.Values(removed))
	if !slices.Equal(gotRemoved, wantRemoved) {
		t.Fatalf("%s response %s removes %v, want %v", short(resp.TypeUrl), resp.SystemVersionInfo, gotRemoved, wantRemoved)
	}
	byName := map[string]*discoverygrpc.Resource{}
	for _, r := range resp.Resources {
		byName[r.Name] = r
	}
	for _, r := range rs {
		a := &anypb.Any{}
		if err := proto.Unmarshal(r.Any, a); err != nil {
			t.Fatal(err)
		}
		got := byName[r.Name]
		if !proto.Equal(got.Resource, a) {
			t.Fatalf("%s response: resource %q has stale or wrong content", short(resp.TypeUrl), r.Name)
		}
		if got.Version != r.Version() {
			t.Fatalf("%s response: resource %q at version %q, want its content hash %q", short(resp.TypeUrl), r.Name, got.Version, r.Version())
		}
	}
}

// versionsOf returns name -> version of a response's resources.
func versionsOf(resp *deltaResponse) map[string]string {
	out := map[string]string{}
	for _, r := range resp.Resources {
		out[r.Name] = r.Version
	}
	return out
}
