package app_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// A client's NACK stays with the relay: the control plane never sees a
// request with error_detail, and the client is not sent the rejected
// version again; the next version reaches it.
func TestE2EClientNACKIsNotForwarded(t *testing.T) {
	f := startFixture(t, "class-a", clusters("a"))
	ctx, m, r := f.ctx, f.cp, f.relay

	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const cds = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "c1", Cluster: "class-a"}, TypeUrl: cds}); err != nil {
		t.Fatal(err)
	}
	v1, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: cds, ResponseNonce: v1.GetNonce(),
		ErrorDetail: &rpcstatus.Status{Code: 3, Message: "client rejects cluster a"}}); err != nil {
		t.Fatal(err)
	}
	// The relay counts the NACK before anything else happens: a NACK that
	// arrived after a newer response would be stale, and rightly ignored.
	eventually(t, ctx, "the client's one NACK counted in /debug/streams", func() bool {
		var streams struct {
			Streams []struct {
				Types []struct {
					NACKs int `json:"nacks"`
				} `json:"types"`
			} `json:"streams"`
		}
		getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/streams", &streams)
		return len(streams.Streams) == 1 && len(streams.Streams[0].Types) == 1 && streams.Streams[0].Types[0].NACKs == 1
	})
	// A new version upstream: the next response must be it, not the
	// rejected v1 again.
	m.Set(t, "class-a", "v2", clusters("a", "b"))
	next, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := clusterNames(t, next); len(got) != 2 || next.GetVersionInfo() == v1.GetVersionInfo() {
		t.Fatalf("after the NACK the client got %v at %s, want [a b] at a new version", got, next.GetVersionInfo())
	}
	if n := m.Stats().NACKs; n != 0 {
		t.Fatalf("the control plane saw %d NACKs; a client's NACK must not be forwarded", n)
	}
}

// TestE2EEmptyNameUnsubscribes: a SotW ADS client of a relay in front of
// go-control-plane sends CDS resource_names [""] (a name that matches
// nothing: how some clients and conformance suites unsubscribe from
// everything). The stream is not ended: its EDS subscription keeps being
// served, and "" never reaches the class's upstream interest.
func TestE2EEmptyNameUnsubscribes(t *testing.T) {
	snap := func(weight uint32) map[resource.Type][]types.Resource {
		res := clusters("a", "b")
		cla := &endpointv3.ClusterLoadAssignment{ClusterName: "a",
			Policy: &endpointv3.ClusterLoadAssignment_Policy{OverprovisioningFactor: wrapperspb.UInt32(weight)}}
		res[resource.EndpointType] = []types.Resource{cla}
		return res
	}
	f := startFixture(t, "class-a", snap(140))
	ctx, m, r := f.ctx, f.cp, f.relay

	c := dialADS(t, ctx, r.Addr(), "client-1", "class-a")
	c.Subscribe(resource.ClusterType, "a")
	cdsResp := c.Next(10 * time.Second)
	if got := clusterNames(t, cdsResp); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("CDS [a]: got %v", got)
	}
	c.Subscribe(resource.EndpointType, "a")
	eds1 := c.Next(10 * time.Second)
	if eds1.GetTypeUrl() != resource.EndpointType || len(eds1.GetResources()) != 1 {
		t.Fatalf("EDS [a]: got %s with %d resources", eds1.GetTypeUrl(), len(eds1.GetResources()))
	}

	if err := c.SendSotW(resource.ClusterType, []string{""}); err != nil {
		t.Fatalf("send CDS [\"\"]: %v", err)
	}
	class := r.Registry().Classes()[0]
	eventually(t, ctx, `CDS interest without "a" and without ""`, func() bool {
		return class.Interest(resource.ClusterType).Empty()
	})

	// The control plane changes the endpoints and drops cluster b: the
	// stream, unsubscribed from CDS, is sent the EDS change only.
	next := snap(150)
	next[resource.ClusterType] = next[resource.ClusterType][:1]
	m.Set(t, "class-a", "v2", next)
	resp := c.Next(10 * time.Second)
	if resp.GetTypeUrl() != resource.EndpointType || resp.GetVersionInfo() == eds1.GetVersionInfo() {
		t.Fatalf("after the change: got %s version %s, want the new EDS version", resp.GetTypeUrl(), resp.GetVersionInfo())
	}
	if err := c.Err(); err != nil {
		t.Fatalf("stream ended after CDS [\"\"]: %v", err)
	}
}

// /metrics in the Prometheus text format: the relay's counters and gauges
// move with what clients and the upstream do, and no node id is a label.
func TestE2EMetrics(t *testing.T) {
	f := startFixture(t, "class-a", clusters("a"))
	ctx, m, r := f.ctx, f.cp, f.relay
	c := f.sotw(t, "secret-node-id-1234", "class-a")
	c.Next(10 * time.Second)
	m.Set(t, "class-a", "v2", clusters("a", "b"))
	c.Next(10 * time.Second)

	url := "http://" + r.AdminAddr() + "/metrics"
	value := func(text, series string) float64 {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ([0-9.e+-]+)$`)
		m := re.FindStringSubmatch(text)
		if m == nil {
			return -1
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	var text string
	// The client's ACKs are counted by the relay's reader, concurrently with
	// the pushes the client already received: wait for them too.
	eventually(t, ctx, "the update's fan-out and the client's ACKs to be observed", func() bool {
		body, _ := get(t, ctx, url)
		text = string(body)
		return value(text, `xds_relay_fanout_duration_seconds_count{type="Cluster"}`) >= 1 &&
			value(text, `xds_relay_client_acks_total{class="class-a",type="Cluster"}`) >= 1
	})
	for series, min := range map[string]float64{
		`xds_relay_downstream_streams{variant="sotw-ads"}`:                                1,
		`xds_relay_downstream_subscriptions{type="Cluster",variant="sotw-ads"}`:           1,
		`xds_relay_pushes_total{type="Cluster",variant="sotw-ads"}`:                       2,
		`xds_relay_client_acks_total{class="class-a",type="Cluster"}`:                     1,
		`xds_relay_upstream_responses_total{class="class-a",result="ack",type="Cluster"}`: 2,
		`xds_relay_upstream_connected{class="class-a"}`:                                   1,
		`xds_relay_node_classes`: 1,
		`xds_relay_shards`:       1,
	} {
		if v := value(text, series); v < min {
			t.Errorf("%s = %v, want ≥ %v", series, v, min)
		}
	}
	if v := value(text, `xds_relay_push_bytes_total{type="Cluster",variant="sotw-ads"}`); v <= 0 {
		t.Errorf("push bytes = %v", v)
	}
	if strings.Contains(text, "secret-node-id-1234") {
		t.Error("a node id appears in /metrics: labels must stay bounded")
	}
}

// An upstream response and its fan-out are traced: a response span with the
// class, type and version, and, under it, the fan-out span ending when the
// last stream has written the update.
func TestE2ETracing(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	f := startFixture(t, "class-a", clusters("a"), withApp(app.WithTracerProvider(tp)))
	ctx, m := f.ctx, f.cp
	c := f.sotw(t, "traced-1", "class-a")
	c.Next(10 * time.Second)
	m.Set(t, "class-a", "v2", clusters("a", "b"))
	c.Next(10 * time.Second)

	eventually(t, ctx, "a fan-out span under a v2 response span", func() bool {
		responses := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			if s.Name() == "xds-relay.upstream.response" {
				responses[s.SpanContext().SpanID().String()] = s
			}
		}
		for _, s := range rec.Ended() {
			if s.Name() != "xds-relay.fanout" {
				continue
			}
			parent, ok := responses[s.Parent().SpanID().String()]
			if !ok {
				continue
			}
			attrs := map[string]string{}
			for _, kv := range parent.Attributes() {
				attrs[string(kv.Key)] = kv.Value.Emit()
			}
			if attrs["xds.class"] == "class-a" && attrs["xds.type_url"] == cdsType && attrs["xds.version"] == "v2" &&
				!s.EndTime().Before(s.StartTime()) {
				return true
			}
		}
		return false
	})
}

const cdsType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// Shutdown drains: the relay stops being ready, and every client stream
// ends with UNAVAILABLE "draining" so the client reconnects to another
// relay; Shutdown returns once all have ended.
func TestE2EDrainMovesClientsAway(t *testing.T) {
	f := startFixture(t, "class-a", clusters("a"))
	ctx, r := f.ctx, f.relay

	var clients []*adsClient
	for i := 0; i < 20; i++ {
		c := f.sotw(t, "drain-client", "class-a")
		c.Next(10 * time.Second)
		clients = append(clients, c)
	}
	done := make(chan struct{})
	go func() {
		r.Shutdown(500 * time.Millisecond)
		close(done)
	}()
	eventually(t, ctx, "/readyz to fail while draining", func() bool {
		resp, err := http.Get("http://" + r.AdminAddr() + "/readyz")
		if err != nil {
			return true // already shut down
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Shutdown did not return")
	}
	for i, c := range clients {
		eventually(t, ctx, "the client stream to end", func() bool { return c.Err() != nil })
		err := c.Err()
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "draining") {
			t.Errorf("client %d ended with %v, want UNAVAILABLE draining", i, err)
		}
	}
}

// A connection older than drain.max_connection_age is closed with GOAWAY:
// its stream ends (and the client reconnects through the Service).
func TestE2EMaxConnectionAge(t *testing.T) {
	f := startFixture(t, "class-a", clusters("a"), withConfig(func(cfg *app.Config) {
		cfg.Drain.MaxConnectionAge, cfg.Drain.MaxConnectionAgeGrace = 300*time.Millisecond, 200*time.Millisecond
	}))
	c := f.sotw(t, "aged-client", "class-a")
	c.Next(10 * time.Second)
	wait, cancel := context.WithTimeout(f.ctx, 20*time.Second)
	defer cancel()
	if !poll(wait, func() bool { return c.Err() != nil }) {
		t.Fatal("the stream of an aged connection never ended")
	}
}

// Close during a long drain (the operator's second signal) ends it: the
// streams not yet told end at once and Shutdown returns, instead of waiting
// out the drain period.
func TestE2ECloseCutsDrainShort(t *testing.T) {
	f := startFixture(t, "class-a", clusters("a"))
	ctx, r := f.ctx, f.relay
	for i := 0; i < 5; i++ {
		c := f.sotw(t, "drain-client", "class-a")
		c.Next(10 * time.Second)
	}
	done := make(chan struct{})
	go func() {
		r.Shutdown(time.Hour)
		close(done)
	}()
	eventually(t, ctx, "the drain to begin", func() bool {
		resp, err := http.Get("http://" + r.AdminAddr() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	r.Close()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Shutdown still draining after Close")
	}
}

// REST-JSON polling through the relay against a real control plane: the
// state, 304 when the client's version is current, and a long poll answered
// by a change upstream.
func TestE2ERESTPolling(t *testing.T) {
	f := startFixture(t, "class-a", clusters("a"), withConfig(func(cfg *app.Config) {
		cfg.REST.Listen, cfg.REST.MaxHold = "127.0.0.1:0", 10*time.Second
	}))
	ctx, m, r := f.ctx, f.cp, f.relay

	// poll runs in the test goroutine and in a helper goroutine: it returns
	// its errors instead of failing the test itself.
	poll := func(version string) (int, *discoveryv3.DiscoveryResponse, error) {
		body := `{"node": {"id": "rest-1", "cluster": "class-a"}, "version_info": "` + version + `"}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.RESTAddr()+"/v3/discovery:clusters", bytes.NewBufferString(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, nil, nil
		}
		var out discoveryv3.DiscoveryResponse
		if err := protojson.Unmarshal(b, &out); err != nil {
			return 0, nil, fmt.Errorf("decode %s: %w", b, err)
		}
		return resp.StatusCode, &out, nil
	}
	code, first, err := poll("")
	if err != nil || code != http.StatusOK || len(first.GetResources()) != 1 {
		t.Fatalf("first poll = %d %v %v", code, first, err)
	}
	// The long poll with the current version is answered by a change.
	got := make(chan *discoveryv3.DiscoveryResponse, 1)
	go func() {
		_, resp, err := poll(first.GetVersionInfo())
		if err != nil {
			t.Errorf("long poll: %v", err)
		}
		got <- resp
	}()
	eventually(t, ctx, "the held poll's subscription", func() bool {
		var shards map[string][]struct {
			Shards []struct {
				Streams int `json:"streams"`
			} `json:"shards"`
		}
		getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/shards", &shards)
		for _, ts := range shards["class-a"] {
			for _, s := range ts.Shards {
				if s.Streams > 0 {
					return true
				}
			}
		}
		return false
	})
	m.Set(t, "class-a", "v2", clusters("a", "b"))
	select {
	case resp := <-got:
		if resp == nil || len(resp.GetResources()) != 2 || resp.GetVersionInfo() == first.GetVersionInfo() {
			t.Fatalf("long poll answered with %v, want the two clusters at a new version", resp)
		}
	case <-ctx.Done():
		t.Fatal("the long poll was not answered")
	}
}
