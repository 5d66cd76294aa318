package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// restPath is the REST endpoint of each type.
var restPath = map[string]string{
	ClusterType:     "/v3/discovery:clusters",
	EndpointType:    "/v3/discovery:endpoints",
	ListenerType:    "/v3/discovery:listeners",
	RouteType:       "/v3/discovery:routes",
	SecretType:      "/v3/discovery:secrets",
	RuntimeType:     "/v3/discovery:runtime",
	ScopedRouteType: "/v3/discovery:scoped-routes",
}

// restServer serves h's relay over REST-JSON with maxHold.
func restServer(t *testing.T, h *harness, maxHold time.Duration) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(h.srv.RESTHandler(maxHold))
	t.Cleanup(ts.Close)
	return ts
}

type restResult struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// do sends one HTTP request; it does not fail the test, so it may run in a
// goroutine.
func do(ctx context.Context, ts *httptest.Server, method, path string, body []byte) restResult {
	req, err := http.NewRequestWithContext(ctx, method, ts.URL+path, bytes.NewReader(body))
	if err != nil {
		return restResult{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ts.Client().Do(req)
	if err != nil {
		return restResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return restResult{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

// restJSONRequest encodes req in the proto3 JSON mapping.
func restJSONRequest(t *testing.T, req *request) []byte {
	t.Helper()
	b, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// poll POSTs req to typeURL's endpoint and returns the result.
func poll(t *testing.T, ts *httptest.Server, typeURL string, req *request) restResult {
	t.Helper()
	res := do(context.Background(), ts, http.MethodPost, restPath[typeURL], restJSONRequest(t, req))
	if res.err != nil {
		t.Fatal(res.err)
	}
	return res
}

// wantOK asserts a 200 carrying a JSON DiscoveryResponse of typeURL, and
// returns it.
func wantOK(t *testing.T, res restResult, typeURL string) *response {
	t.Helper()
	if res.status != http.StatusOK {
		t.Fatalf("status %d (%s), want 200", res.status, res.body)
	}
	if ct := res.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	resp := &response{}
	if err := protojson.Unmarshal(res.body, resp); err != nil {
		t.Fatalf("response is not a DiscoveryResponse in JSON: %v\n%s", err, res.body)
	}
	if resp.TypeUrl != typeURL || resp.VersionInfo == "" {
		t.Fatalf("response type %q version %q, want type %q and a version", resp.TypeUrl, resp.VersionInfo, typeURL)
	}
	if resp.Nonce != "" {
		t.Fatalf("REST response carries nonce %q", resp.Nonce)
	}
	return resp
}

// wantNotModified asserts a 304 with an empty body.
func wantNotModified(t *testing.T, res restResult) {
	t.Helper()
	if res.status != http.StatusNotModified || len(res.body) != 0 {
		t.Fatalf("status %d body %q, want 304 with an empty body", res.status, res.body)
	}
}

// wantError asserts an error status whose message contains want.
func wantError(t *testing.T, res restResult, status int, want string) {
	t.Helper()
	if res.status != status || !strings.Contains(string(res.body), want) {
		t.Fatalf("status %d body %q, want %d mentioning %q", res.status, res.body, status, want)
	}
}

// noRESTShards asserts the class holds no shard of typeURL: every REST
// request released its subscription.
func noRESTShards(t *testing.T, h *harness, typeURL string) {
	t.Helper()
	if s := h.shards(typeURL); len(s) != 0 {
		t.Fatalf("%s shards left after the requests: %+v", short(typeURL), s)
	}
}

func TestRESTClusters(t *testing.T) {
	h := newHarness(t)
	ts := restServer(t, h, 200*time.Millisecond)
	a, b := resource(t, ClusterType, "A", 1), resource(t, ClusterType, "B", 1)
	h.apply(ClusterType, true, a, b)

	got := wantOK(t, poll(t, ts, ClusterType, &request{Node: h.node}), ClusterType)
	wantResources(t, got, a, b)
	noRESTShards(t, h, ClusterType)

	// The type_url is optional on a per-type endpoint, and may be given.
	again := wantOK(t, poll(t, ts, ClusterType, &request{Node: h.node, TypeUrl: ClusterType}), ClusterType)
	if again.VersionInfo != got.VersionInfo {
		t.Fatalf("same content, versions %q and %q", got.VersionInfo, again.VersionInfo)
	}

	// Current version: held for maxHold, then 304.
	wantNotModified(t, poll(t, ts, ClusterType, &request{Node: h.node, VersionInfo: got.VersionInfo}))
	noRESTShards(t, h, ClusterType)

	// A stale version gets the state at once.
	h.apply(ClusterType, true, a)
	next := wantOK(t, poll(t, ts, ClusterType, &request{Node: h.node, VersionInfo: got.VersionInfo}), ClusterType)
	wantResources(t, next, a)
	if next.VersionInfo == got.VersionInfo {
		t.Fatal("new content, same version")
	}

	// Cluster has full-state semantics: deleting them all is news.
	h.apply(ClusterType, true)
	empty := wantOK(t, poll(t, ts, ClusterType, &request{Node: h.node, VersionInfo: next.VersionInfo}), ClusterType)
	wantResources(t, empty)
	noRESTShards(t, h, ClusterType)
}

// maxHold 0 answers a current version at once.
func TestRESTNoHold(t *testing.T) {
	h := newHarness(t)
	ts := restServer(t, h, 0)
	h.apply(ClusterType, true, resource(t, ClusterType, "A", 1))
	got := wantOK(t, poll(t, ts, ClusterType, &request{Node: h.node}), ClusterType)
	wantNotModified(t, poll(t, ts, ClusterType, &request{Node: h.node, VersionInfo: got.VersionInfo}))
	noRESTShards(t, h, ClusterType)
}

// heldShard waits until the class has a shard of typeURL with one watcher
// (the held REST request) and returns it.
func heldShard(t *testing.T, h *harness, typeURL string) shard.ShardStatus {
	t.Helper()
	var held shard.ShardStatus
	eventually(t, "the REST request's shard", func() bool {
		for _, s := range h.shards(typeURL) {
			if s.Streams == 1 {
				held = s
				return true
			}
		}
		return false
	})
	return held
}

// A long poll with the current version is answered by the change, not the
// hold (10s: the test would time out first).
func TestRESTLongPollAnsweredByChange(t *testing.T) {
	h := newHarness(t)
	ts := restServer(t, h, 10*time.Second)
	a1 := resource(t, ClusterType, "A", 1)
	h.apply(ClusterType, true, a1)
	first := wantOK(t, poll(t, ts, ClusterType, &request{Node: h.node}), ClusterType)

	body := restJSONRequest(t, &request{Node: h.node, VersionInfo: first.VersionInfo})
	done := make(chan restResult, 1)
	go func() { done <- do(context.Background(), ts, http.MethodPost, restPath[ClusterType], body) }()
	held := heldShard(t, h, ClusterType)
	if !held.Wildcard || held.Version != first.VersionInfo {
		t.Fatalf("held shard %+v, want the wildcard at %s", held, first.VersionInfo)
	}
	select {
	case res := <-done:
		t.Fatalf("answered before any change: %d %s", res.status, res.body)
	default:
	}

	// A re-apply of the same content changes nothing: still held.
	h.apply(ClusterType, true, a1)
	a2, b2 := resource(t, ClusterType, "A", 2), resource(t, ClusterType, "B", 2)
	h.apply(ClusterType, true, a2, b2)
	var res restResult
	select {
	case res = <-done:
	case <-time.After(eventuallyFor):
		t.Fatal("the change did not answer the long poll")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	got := wantOK(t, res, ClusterType)
	wantResources(t, got, a2, b2)
	if got.VersionInfo == first.VersionInfo {
		t.Fatal("answered with the version the client holds")
	}
	noRESTShards(t, h, ClusterType)
}

// The first request for names the class has not got yet waits for the
// upstream, like a current version.
func TestRESTLongPollWaitsForUpstream(t *testing.T) {
	h := newHarness(t)
	ts := restServer(t, h, 10*time.Second)
	body := restJSONRequest(t, &request{Node: h.node, ResourceNames: []string{"A"}})
	done := make(chan restResult, 1)
	go func() { done <- do(context.Background(), ts, http.MethodPost, restPath[EndpointType], body) }()
	heldShard(t, h, EndpointType)
	if got := h.class.Interest(EndpointType); !got.Has("A") {
		t.Fatalf("class interest %+v does not ask the upstream for A", got)
	}
	a := resource(t, EndpointType, "A", 1)
	h.apply(EndpointType, false, a, resource(t, EndpointType, "B", 1))
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	wantResources(t, wantOK(t, res, EndpointType), a)
	noRESTShards(t, h, EndpointType)
	if got := h.class.Interest(EndpointType); !got.Empty() {
		t.Fatalf("class interest %+v after the request", got)
	}
}

// The client going away ends a held request and releases its subscription.
func TestRESTClientGone(t *testing.T) {
	h := newHarness(t)
	ts := restServer(t, h, time.Minute)
	h.apply(ClusterType, true, resource(t, ClusterType, "A", 1))
	first := wantOK(t, poll(t, ts, ClusterType, &request{Node: h.node}), ClusterType)

	ctx, cancel := context.WithCancel(context.Background())
	body := restJSONRequest(t, &request{Node: h.node, VersionInfo: first.VersionInfo})
	done := make(chan restResult, 1)
	go func() { done <- do(ctx, ts, http.MethodPost, restPath[ClusterType], body) }()
	heldShard(t, h, ClusterType)
	cancel()
	if res := <-done; !errors.Is(res.err, context.Canceled) {
		t.Fatalf("got %d %v, want the request canceled", res.status, res.err)
	}
	eventually(t, "the REST subscription released", func() bool { return len(h.shards(ClusterType)) == 0 })
}

func TestRESTEndpoints(t *testing.T) {
	h := newHarness(t)
	ts := restServer(t, h, 200*time.Millisecond)
	a, b := resource(t, EndpointType, "A", 1), resource(t, EndpointType, "B", 1)
	h.apply(EndpointType, false, a, b)

	got := wantOK(t, poll(t, ts, EndpointType, &request{Node: h.node, ResourceNames: []string{"A"}}), EndpointType)
	wantResources(t, got, a)
	both := wantOK(t, poll(t, ts, EndpointType, &request{Node: h.node, ResourceNames: []string{"B", "A"}}), EndpointType)
	wantResources(t, both, a, b)
	wantNotModified(t, poll(t, ts, EndpointType, &request{Node: h.node, ResourceNames: []string{"A"}, VersionInfo: got.VersionInfo}))

	// Unknown name: nothing exists (a merging upstream: absence unknown), so
	// nothing is sent; the request is held, then 304.
	wantNotModified(t, poll(t, ts, EndpointType, &request{Node: h.node, ResourceNames: []string{"Z"}}))
	// Nor once the upstream's state is complete: an empty EDS response is
	// never sent.
	h.apply(EndpointType, true, a, b)
	wantNotModified(t, poll(t, ts, EndpointType, &request{Node: h.node, ResourceNames: []string{"Z"}}))
	noRESTShards(t, h, EndpointType)
}

// Every REST endpoint answers its type, with resources protojson can render.
func TestRESTAllTypes(t *testing.T) {
	h := newHarness(t)
	ts := restServer(t, h, 0)
	for typeURL := range restPath {
		t.Run(short(typeURL), func(t *testing.T) {
			r := resource(t, typeURL, "r", 1)
			h.apply(typeURL, true, r)
			var names []string
			if !xdstype.FullState(typeURL) {
				names = []string{"r"}
			}
			got := wantOK(t, poll(t, ts, typeURL, &request{Node: h.node, ResourceNames: names}), typeURL)
			wantResources(t, got, r)
			noRESTShards(t, h, typeURL)
		})
	}
}

// A REST request shares the shard of a gRPC stream with the same
// subscription and leaves it to the stream.
func TestRESTSharesShard(t *testing.T) {
	h := newHarness(t)
	ts := restServer(t, h, 0)
	a := resource(t, ClusterType, "A", 1)
	h.apply(ClusterType, true, a)
	c := h.perType(t, ClusterType)
	c.subscribe(ClusterType)
	grpcResp := c.nextOf(ClusterType)

	got := wantOK(t, poll(t, ts, ClusterType, &request{Node: h.node}), ClusterType)
	if got.VersionInfo != grpcResp.VersionInfo {
		t.Fatalf("REST version %q, gRPC %q", got.VersionInfo, grpcResp.VersionInfo)
	}
	if s := h.shards(ClusterType); len(s) != 1 || s[0].Streams != 1 {
		t.Fatalf("shards %+v, want the stream's only", s)
	}
	a2 := resource(t, ClusterType, "A", 2)
	h.apply(ClusterType, true, a2)
	wantResources(t, c.nextOf(ClusterType), a2)
}

// A resource whose type the relay cannot render as JSON answers 500.
func TestRESTUnknownResourceType(t *testing.T) {
	h := newHarness(t)
	ts := restServer(t, h, 0)
	v, err := proto.Marshal(wrapperspb.String("x"))
	if err != nil {
		t.Fatal(err)
	}
	const unknown = "type.googleapis.com/example.NotRegistered"
	b, err := proto.Marshal(&anypb.Any{TypeUrl: unknown, Value: v})
	if err != nil {
		t.Fatal(err)
	}
	h.apply(RuntimeType, true, &shard.Resource{Name: "r", Any: b, Hash: dedup.ResourceHash(b)})
	wantError(t, poll(t, ts, RuntimeType, &request{Node: h.node, ResourceNames: []string{"r"}}), http.StatusInternalServerError, unknown)
	noRESTShards(t, h, RuntimeType)
}

func TestRESTErrors(t *testing.T) {
	h := newHarness(t)
	ts := restServer(t, h, time.Minute) // nothing here may be held
	h.apply(ClusterType, true, resource(t, ClusterType, "A", 1))
	node := `"node":{"id":"n","cluster":"class-a"}`
	cases := []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"malformed", "POST", "/v3/discovery:clusters", `{` + node, 400, "malformed DiscoveryRequest JSON: "},
		{"unknown field", "POST", "/v3/discovery:clusters", `{` + node + `,"bogus":1}`, 400, "bogus"},
		{"wrong field type", "POST", "/v3/discovery:clusters", `{` + node + `,"resource_names":"A"}`, 400, `unexpected token "A"`},
		{"no node", "POST", "/v3/discovery:clusters", `{"resource_names":["A"]}`, 400, "node"},
		{"empty body", "POST", "/v3/discovery:clusters", ``, 400, ""},
		{"type_url", "POST", "/v3/discovery:clusters", `{` + node + `,"type_url":"` + EndpointType + `"}`, 400, "type_url"},
		{"empty name", "POST", "/v3/discovery:endpoints", `{` + node + `,"resource_names":["A",""]}`, 400, "resource_names[1]"},
		{"GET", "GET", "/v3/discovery:clusters", ``, 405, "POST"},
		{"PUT", "PUT", "/v3/discovery:routes", `{` + node + `}`, 405, "POST"},
		{"unknown path", "POST", "/v3/discovery:nonsense", `{` + node + `}`, 404, ""},
		{"root", "POST", "/", `{` + node + `}`, 404, ""},
		{"gRPC path", "POST", "/envoy.service.cluster.v3.ClusterDiscoveryService/StreamClusters", `{` + node + `}`, 404, ""},
		{"v2", "POST", "/v2/discovery:clusters", `{` + node + `}`, 404, "V3"},
		{"v2 endpoints", "POST", "/v2/discovery:endpoints", `{` + node + `}`, 404, "/v3/discovery:endpoints"},
		{"too large", "POST", "/v3/discovery:clusters", `{` + node + `,"resource_names":["` + strings.Repeat("x", MaxRESTBody) + `"]}`, 413, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := do(context.Background(), ts, tc.method, tc.path, []byte(tc.body))
			if res.err != nil {
				t.Fatal(res.err)
			}
			wantError(t, res, tc.status, tc.want)
			if tc.status == 405 && res.header.Get("Allow") != "POST" {
				t.Fatalf("405 with Allow %q", res.header.Get("Allow"))
			}
		})
	}
	for _, typeURL := range []string{ClusterType, EndpointType, RouteType} {
		noRESTShards(t, h, typeURL)
	}
	if got := len(h.registry.Classes()); got != 1 {
		t.Fatalf("%d classes, want only the harness's: a rejected request classifies nothing", got)
	}
}

// The node picks the class.
func TestRESTNodeClass(t *testing.T) {
	h := newHarness(t)
	ts := restServer(t, h, 0)
	h.apply(ClusterType, true, resource(t, ClusterType, "A", 1))
	other := &corev3.Node{Id: "n2", Cluster: "class-b"}
	b, err := h.registry.Acquire(other)
	if err != nil {
		t.Fatal(err)
	}
	rb := resource(t, ClusterType, "B", 1)
	b.Apply(ClusterType, []*shard.Resource{rb}, true)
	wantResources(t, wantOK(t, poll(t, ts, ClusterType, &request{Node: other}), ClusterType), rb)
	classes := h.registry.Classes()
	if !slices.ContainsFunc(classes, func(c *shard.Class) bool { return c == b }) || len(classes) != 2 {
		t.Fatalf("classes %d, want 2", len(classes))
	}
}
