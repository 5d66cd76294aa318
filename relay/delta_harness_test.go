package relay

import (
	"fmt"
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
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

// deltaResource is resource, plus VirtualHost (only served by delta VHDS).
func deltaResource(t testing.TB, typeURL, name string, v int) *shard.Resource {
	t.Helper()
	if typeURL == VirtualHostType {
		return encode(t, name, &routev3.VirtualHost{Name: name, Domains: []string{fmt.Sprintf("v%d.example.com", v)}})
	}
	return resource(t, typeURL, name, v)
}

// deltaClient is a raw delta xDS client stream; the helpers check every
// response's envelope as it is taken.
type deltaClient struct {
	*rawStream[*deltaRequest, *deltaResponse]
	node      *corev3.Node
	nodeSent  bool
	fenceType string // type of ADS fences (RuntimeType unless the test uses it)
}

func (h *harness) deltaADS(t *testing.T) *deltaClient { return h.openDeltaClient(t, h.conn, "") }

func (h *harness) deltaPerType(t *testing.T, typeURL string) *deltaClient {
	return h.openDeltaClient(t, h.conn, typeURL)
}

func (h *harness) openDeltaClient(t *testing.T, conn *grpc.ClientConn, typeURL string) *deltaClient {
	t.Helper()
	c := &deltaClient{rawStream: openRaw[deltaRequest, deltaResponse](t, h, conn, typeURL, true), node: h.node, fenceType: RuntimeType}
	c.check = c.checkEnvelope
	c.describe = func(r *deltaResponse) string { return fmt.Sprintf("%v removed %v", deltaNames(r), r.RemovedResources) }
	return c
}

// send sends req; the node goes on the stream's first request only, as
// Envoy does with set_node_on_first_message_only.
func (c *deltaClient) send(req *deltaRequest) {
	c.t.Helper()
	if !c.nodeSent && req.Node == nil {
		req.Node = c.node
	}
	c.nodeSent = true
	c.sendRaw(req)
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

// checkEnvelope checks what every delta response must satisfy besides its
// nonce and type URL: a system version, and well-formed resources: named,
// versioned, of the response's type, each named once and never both sent
// and removed.
func (c *deltaClient) checkEnvelope(resp *deltaResponse) {
	t := c.t
	t.Helper()
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
	name := c.fenceName()
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

// newEndpointHarness returns a harness whose class holds the endpoints named,
// at version 1, and ep, which makes endpoint resources.
func newEndpointHarness(t *testing.T, names ...string) (*harness, func(name string, v int) *shard.Resource) {
	t.Helper()
	h := newHarness(t)
	ep := func(name string, v int) *shard.Resource { return resource(t, EndpointType, name, v) }
	var rs []*shard.Resource
	for _, n := range names {
		rs = append(rs, ep(n, 1))
	}
	h.apply(EndpointType, false, rs...)
	return h, ep
}
