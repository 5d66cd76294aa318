package relay

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
)

// limitedClass returns the node of a class created with limits l.
func limitedClass(t *testing.T, h *harness, l shard.Limits) (*corev3.Node, *shard.Class) {
	t.Helper()
	h.registry.SetClassLimits(l)
	node := &corev3.Node{Id: "limited-1", Cluster: "limited"}
	class, err := h.registry.Acquire(node)
	if err != nil {
		t.Fatal(err)
	}
	return node, class
}

// A client whose subscription would push its class's union past a class
// limit is refused with RESOURCE_EXHAUSTED naming the limit; the class's
// union and its other client are untouched, and that client is still
// served.
func TestClassLimitEndsOnlyTheOffender(t *testing.T) {
	h := newHarness(t)
	node, class := limitedClass(t, h, shard.Limits{MaxNamesPerType: 4})
	class.Apply(EndpointType, []*shard.Resource{resource(t, EndpointType, "a", 1), resource(t, EndpointType, "b", 1)}, false)

	first := h.ads(t)
	first.node = node
	first.subscribe(EndpointType, "a", "b", "c")
	first.ack(first.nextOf(EndpointType))

	second := h.ads(t)
	second.node = &corev3.Node{Id: "limited-2", Cluster: "limited"}
	second.subscribe(EndpointType, "d", "e")
	wantStatus(t, second.recvError(), codes.ResourceExhausted, shard.LimitNamesPerType)

	if got := class.Interest(EndpointType).Names; !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("class union after the refusal = %v, want [a b c]", got)
	}
	class.Apply(EndpointType, []*shard.Resource{resource(t, EndpointType, "a", 2)}, false)
	wantResources(t, first.nextOf(EndpointType), resource(t, EndpointType, "a", 2), resource(t, EndpointType, "b", 1))
}

// The same through REST: 429 naming the limit.
func TestClassLimitREST(t *testing.T) {
	h := newHarness(t)
	_, class := limitedClass(t, h, shard.Limits{MaxTypes: 1})
	w := &restWatcher{sig: dedup.NewSignal()}
	s, err := class.TrySubscribe(ClusterType, shard.NewSubscription(nil, true), w)
	if err != nil {
		t.Fatal(err)
	}
	defer class.Unsubscribe(s, w)
	ts := httptest.NewServer(h.srv.RESTHandler(0))
	defer ts.Close()
	body := `{"node":{"id":"limited-2","cluster":"limited"},"resource_names":["x"]}`
	resp, err := http.Post(ts.URL+"/v3/discovery:endpoints", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	msg := make([]byte, 512)
	n, _ := resp.Body.Read(msg)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(msg[:n]), shard.LimitTypes) {
		t.Fatalf("status %d %q, want 429 naming %s", resp.StatusCode, msg[:n], shard.LimitTypes)
	}
}

// A delta stream's subscription is the sum of its requests: each is within
// limits.max_resource_names, their sum over the stream's types is bounded
// by it too.
func TestDeltaStreamNamesLimit(t *testing.T) {
	h := newHarness(t)
	h.srv.opts.MaxResourceNames = 10
	c := h.deltaADS(t)
	c.subscribe(EndpointType, "e1", "e2", "e3", "e4", "e5", "e6")
	c.fence()
	c.subscribe(RouteType, "r1", "r2", "r3", "r4") // 6 + the fence + 4 = 11
	wantStatus(t, c.recvError(), codes.ResourceExhausted, "limits.max_resource_names")
}

// A SotW stream's names are bounded over its types as a delta stream's
// are: each request is within limits.max_resource_names, and so is the sum
// of the types' latest lists. A request replacing a type's names counts
// once, not on top of the names it replaces.
func TestSotWStreamNamesLimit(t *testing.T) {
	h := newHarness(t)
	h.srv.opts.MaxResourceNames = 10
	c := h.ads(t)
	c.subscribe(EndpointType, "e1", "e2", "e3", "e4", "e5", "e6")
	c.fence()
	c.subscribe(EndpointType, "e2", "e3", "e4", "e5", "e6", "e7") // still 6 + the fence
	c.fence()
	c.subscribe(RouteType, "r1", "r2", "r3", "r4") // 6 + the fence + 4 = 11
	wantStatus(t, c.recvError(), codes.ResourceExhausted, "limits.max_resource_names")
}

// Names a delta client unsubscribes before it answered the response sending
// them are remembered (it may hold them after all, see deltaTypeSub.maybe),
// and count against limits.max_resource_names: a client churning names
// without answering is refused once they pass it. A client that answers
// leaves nothing to remember.
func TestDeltaMaybeHeldNamesLimit(t *testing.T) {
	h := newHarness(t)
	h.srv.opts.MaxResourceNames = 10
	var eps []*shard.Resource
	for i := range 11 {
		eps = append(eps, resource(t, EndpointType, fmt.Sprintf("e%d", i), 1))
	}
	h.apply(EndpointType, true, eps...)
	c := h.deltaADS(t)
	round := func(names []string, answer bool) {
		t.Helper()
		c.send(&deltaRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: names})
		r := c.nextOf(EndpointType)
		req := &deltaRequest{TypeUrl: EndpointType, ResourceNamesUnsubscribe: names}
		if answer {
			req.ResponseNonce = r.Nonce
		}
		c.send(req)
	}
	round([]string{"e0", "e1", "e2", "e3"}, true) // nothing to remember
	round([]string{"e4", "e5", "e6", "e7", "e8", "e9", "e10"}, false)
	round([]string{"e0", "e1", "e2", "e3"}, false) // 11 maybe held: one is forgotten
	c.fence()
	maybe := 0
	h.srv.mu.Lock()
	for st := range h.srv.streams {
		ds := st.(*deltaStream)
		ds.mu.Lock()
		for _, d := range ds.types.all() {
			maybe += len(d.maybe)
		}
		ds.mu.Unlock()
	}
	h.srv.mu.Unlock()
	if maybe != 10 {
		t.Fatalf("%d names remembered as maybe held, want the limit, 10", maybe)
	}
	// The client, within its subscription (9 names and the fence's one), is
	// still served: the names it may hold do not count against it.
	c.send(&deltaRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"e0", "e1", "e2", "e3", "e8", "e9", "e10", "e4", "e5"}})
	c.nextOf(EndpointType)
}

// Names a delta client subscribes and unsubscribes in turn leave nothing in
// the stream's state while nothing was sent under them.
func TestDeltaUnsubscribedNamesForgotten(t *testing.T) {
	h := newHarness(t)
	c := h.deltaADS(t)
	for round := 0; round < 20; round++ {
		names := make([]string, 5)
		for i := range names {
			names[i] = fmt.Sprintf("r%d-%d", round, i)
		}
		c.subscribe(EndpointType, names...)
		c.unsubscribe(EndpointType, names...)
	}
	c.fence() // every request above was handled
	var over, subscribed int
	h.srv.mu.Lock()
	for st := range h.srv.streams {
		ds := st.(*deltaStream)
		ds.mu.Lock()
		if d := ds.types.at(EndpointType); d != nil {
			over, subscribed = len(d.over), len(d.names)
		}
		ds.mu.Unlock()
	}
	h.srv.mu.Unlock()
	if over != 0 || subscribed != 0 {
		t.Fatalf("after 100 names subscribed and unsubscribed, the stream keeps %d overrides and %d names, want none", over, subscribed)
	}
}

// A client that subscribes to made-up type URLs (as long as
// limits.max_type_url_bytes lets them be; 4 MB in the attack, which that
// limit now refuses) and leaves takes its tables with it.
func TestBogusTypeTablesFreed(t *testing.T) {
	h := newHarness(t)
	c := h.ads(t)
	pad := strings.Repeat("x", 200)
	for i := 0; i < 64; i++ {
		c.subscribe(fmt.Sprintf("type.googleapis.com/bogus.%s.T%d", pad, i), "name")
	}
	eventually(t, "64 bogus tables", func() bool { return len(h.class.TypeURLs()) == 64 })
	c.close()
	eventually(t, "the bogus tables freed", func() bool { return len(h.class.TypeURLs()) == 0 })
}
