package app_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
	"github.com/xds-relay/xds-relay/shard"
)

// classNames returns the names of the relay's classes.
func classNames(r *app.Relay) []string {
	var out []string
	for _, c := range r.Registry().Classes() {
		out = append(out, c.Name)
	}
	return out
}

// deltaState applies delta CDS responses to what a client holds (name ->
// connect timeout seconds) until it equals want; it fails the test if the
// deadline passes first. It returns every response applied.
func deltaState(t *testing.T, dc *deltaADS, held map[string]int64, want map[string]int64, timeout time.Duration) []*discoveryv3.DeltaDiscoveryResponse {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var seen []*discoveryv3.DeltaDiscoveryResponse
	for !mapsEqual(held, want) {
		resp, ok := dc.within(time.Until(deadline))
		if !ok {
			t.Fatalf("delta client holds %v, want %v (responses: %s)", held, want, describeDelta(seen))
		}
		seen = append(seen, resp)
		for _, r := range resp.GetResources() {
			var c clusterv3.Cluster
			if err := r.GetResource().UnmarshalTo(&c); err != nil {
				t.Fatal(err)
			}
			held[r.GetName()] = c.GetConnectTimeout().GetSeconds()
		}
		for _, n := range resp.GetRemovedResources() {
			delete(held, n)
		}
	}
	return seen
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func describeDelta(rs []*discoveryv3.DeltaDiscoveryResponse) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "[%v -%v]", deltaResNames(r), r.GetRemovedResources())
	}
	return b.String()
}

// TestE2EClassRejoinDeltaUpstream is issue 11's item 3 against
// go-control-plane over delta: the only client of a class subscribes to
// CDS wildcard and leaves; a cluster changes and one is deleted upstream; a
// new wildcard client of the class must get the current state, and a client
// reconnecting with initial_resource_versions exactly the change. Within the
// linger the lingering class answers from its cache; after it, the class is
// dropped and a fresh class (a fresh upstream stream) answers.
func TestE2EClassRejoinDeltaUpstream(t *testing.T) {
	for _, tc := range []struct {
		name    string
		linger  time.Duration
		expired bool
	}{{"within-linger", time.Minute, false}, {"after-linger", 50 * time.Millisecond, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			const class = "class-rejoin"
			m := startMgmt(t, "127.0.0.1:0")
			m.Set(t, class, "v1", map[resource.Type][]types.Resource{resource.ClusterType: cds(timedCluster("a", 1), timedCluster("b", 1), timedCluster("c", 1))})
			r := startRelay(t, m.Addr, relayAs("relay-rejoin"), withConfig(func(c *app.Config) {
				c.Upstream.Protocol = "delta"
				c.NodeClasses.Linger = tc.linger
			}))

			first := dialDelta(t, ctx, r.Addr(), "first", class)
			first.Subscribe(resource.ClusterType, "*")
			resp := first.Next(10 * time.Second)
			wantDeltaResp(t, resp, resource.ClusterType, []string{"a", "b", "c"}, nil)
			versions := map[string]string{}
			for _, res := range resp.GetResources() {
				versions[res.GetName()] = res.GetVersion()
			}
			first.Close()
			eventually(t, ctx, "the relay to end the first stream", func() bool { return r.Server().StreamCount() == 0 })
			if tc.expired {
				eventually(t, ctx, "the class to be dropped", func() bool { return !slices.Contains(classNames(r), class) })
				eventually(t, ctx, "its upstream stream to close", func() bool { return m.Stats().Open == 0 })
			}

			m.Set(t, class, "v2", map[resource.Type][]types.Resource{resource.ClusterType: cds(timedCluster("a", 1), timedCluster("b", 2))})
			want := map[string]int64{"a": 1, "b": 2}

			late := dialDelta(t, ctx, r.Addr(), "late", class)
			late.Subscribe(resource.ClusterType, "*")
			deltaState(t, late, map[string]int64{}, want, 10*time.Second)

			back := dialDelta(t, ctx, r.Addr(), "back", class)
			if err := back.SendDeltaResume(resource.ClusterType, []string{"*"}, versions); err != nil {
				t.Fatal(err)
			}
			seen := deltaState(t, back, map[string]int64{"a": 1, "b": 1, "c": 1}, want, 10*time.Second)
			for _, resp := range seen {
				if slices.Contains(deltaResNames(resp), "a") {
					t.Errorf("reconnecting client was re-sent the unchanged cluster a: %s", describeDelta(seen))
				}
			}
			if got := m.Stats().Open; got != 1 {
				t.Errorf("control plane has %d streams open, want the class's one", got)
			}
		})
	}
}

// throwaway opens a SotW client of each class, waits for its CDS answer and
// closes it.
func throwaway(t *testing.T, ctx context.Context, addr string, classes []string) {
	t.Helper()
	clients := make([]*adsClient, len(classes))
	for i, class := range classes {
		clients[i] = dialADS(t, ctx, addr, "tmp-node", class)
		clients[i].Subscribe(resource.ClusterType)
	}
	for i, c := range clients {
		if got := clusterNames(t, c.Next(10*time.Second)); !slices.Equal(got, []string{classes[i]}) {
			t.Fatalf("throwaway client of %s got %v", classes[i], got)
		}
		c.Close()
	}
}

// TestE2EThrowawayClassesFreed opens and closes clients of many distinct
// classes (issue 12 B1): once their linger has passed, every such class is
// gone — registry, shards, upstream streams (at the control plane too),
// status and the per-class gauge — and the class that stayed still works.
func TestE2EThrowawayClassesFreed(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "real", "v1", clusters("r1"))
	r := startRelay(t, m.Addr, relayAs("relay-throwaway"), withConfig(func(c *app.Config) { c.NodeClasses.Linger = 50 * time.Millisecond }))
	real := dialADS(t, ctx, r.Addr(), "real-node", "real")
	real.Subscribe(resource.ClusterType)
	if got := clusterNames(t, real.Next(10*time.Second)); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("real client got %v", got)
	}
	baseClasses, baseShards := r.Registry().Counts()

	var tmp []string
	for i := range 40 {
		name := fmt.Sprintf("tmp-%02d", i)
		tmp = append(tmp, name)
		m.Set(t, name, "v1", clusters(name))
	}
	throwaway(t, ctx, r.Addr(), tmp)
	eventually(t, ctx, "the throwaway classes to be dropped", func() bool {
		classes, shards := r.Registry().Counts()
		return classes == baseClasses && shards == baseShards
	})
	if got := classNames(r); !slices.Equal(got, []string{"real"}) {
		t.Fatalf("classes %v, want [real]", got)
	}
	eventually(t, ctx, "the control plane to see only the real class's stream", func() bool { return m.Stats().Open == 1 })
	var up struct {
		Streams []upstreamState `json:"streams"`
	}
	getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/upstream", &up)
	if len(up.Streams) != 1 || up.Streams[0].Class != "real" {
		t.Errorf("/debug/upstream streams %+v, want the real class's only", up.Streams)
	}
	metrics, _ := get(t, ctx, "http://"+r.AdminAddr()+"/metrics")
	if strings.Contains(string(metrics), `xds_relay_upstream_connected{class="tmp-`) {
		t.Errorf("/metrics still reports dropped classes' upstream streams")
	}

	m.Set(t, "real", "v2", clusters("r1", "r2"))
	if got := clusterNames(t, real.Next(10*time.Second)); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Fatalf("real client after the drops got %v", got)
	}
}

// TestE2EMaxClasses caps the classes at two (issue 12 B1): a client of a
// third class is refused with RESOURCE_EXHAUSTED naming limits.max_classes
// while the existing classes keep working; once one of them only lingers,
// it is evicted for the newcomer.
func TestE2EMaxClasses(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	for _, c := range []string{"one", "two", "three"} {
		m.Set(t, c, "v1", clusters(c))
	}
	r := startRelay(t, m.Addr, relayAs("relay-max"), withConfig(func(c *app.Config) {
		c.Limits.MaxClasses = 2
		c.Limits.NewClassesPerPeer = -1 // every client is 127.0.0.1: the global limit is under test
		c.NodeClasses.Linger = time.Hour
	}))
	one := dialADS(t, ctx, r.Addr(), "n1", "one")
	one.Subscribe(resource.ClusterType)
	two := dialADS(t, ctx, r.Addr(), "n2", "two")
	two.Subscribe(resource.ClusterType)
	for _, c := range []*adsClient{one, two} {
		c.Next(10 * time.Second)
	}

	three := dialADS(t, ctx, r.Addr(), "n3", "three")
	three.Subscribe(resource.ClusterType)
	_, err := three.next(10 * time.Second)
	if st, _ := status.FromError(three.Err()); three.Err() == nil || st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "limits.max_classes") {
		t.Fatalf("third class: %v, stream error %v; want RESOURCE_EXHAUSTED naming limits.max_classes", err, three.Err())
	}
	m.Set(t, "one", "v2", clusters("one", "one-b"))
	if got := clusterNames(t, one.Next(10*time.Second)); !slices.Equal(got, []string{"one", "one-b"}) {
		t.Fatalf("existing class after the refusal got %v", got)
	}
	if got := classNames(r); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("classes %v, want [one two]", got)
	}

	two.Close()
	eventually(t, ctx, "the relay to end two's stream", func() bool { return r.Server().StreamCount() == 1 })
	again := dialADS(t, ctx, r.Addr(), "n3", "three")
	again.Subscribe(resource.ClusterType)
	if got := clusterNames(t, again.Next(10*time.Second)); !slices.Equal(got, []string{"three"}) {
		t.Fatalf("third class after eviction got %v", got)
	}
	if got := classNames(r); !slices.Equal(got, []string{"one", "three"}) {
		t.Fatalf("classes %v, want [one three] (two evicted)", got)
	}
	eventually(t, ctx, "the evicted class's upstream stream to close", func() bool { return m.Stats().Open == 2 })
}

// TestE2EChainedThrowawayClasses sends throwaway classes through a relay
// chained to another relay whose streams per connection are capped (issue
// 12 B2): more throwaway classes than the cap, in batches, each batch served
// and freed on both relays, and a real class served at the end.
func TestE2EChainedThrowawayClasses(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	const perConn = 8
	tier := startRelay(t, m.Addr, relayAs("relay-tier"), withConfig(func(c *app.Config) {
		c.NodeClasses.Linger = 50 * time.Millisecond
		c.Limits.MaxStreamsPerConnection = perConn
	}))
	edge := startRelay(t, tier.Addr(), relayAs("relay-edge"), withConfig(func(c *app.Config) { c.NodeClasses.Linger = 50 * time.Millisecond }))
	for batch := range 3 {
		var tmp []string
		for i := range perConn - 2 {
			name := fmt.Sprintf("tmp-%d-%d", batch, i)
			tmp = append(tmp, name)
			m.Set(t, name, "v1", clusters(name))
		}
		throwaway(t, ctx, edge.Addr(), tmp)
		eventually(t, ctx, fmt.Sprintf("batch %d's classes to be dropped on both relays", batch), func() bool {
			a, _ := edge.Registry().Counts()
			b, _ := tier.Registry().Counts()
			return a == 0 && b == 0 && m.Stats().Open == 0
		})
	}
	m.Set(t, "real", "v1", clusters("r1"))
	real := dialADS(t, ctx, edge.Addr(), "real-node", "real")
	real.Subscribe(resource.ClusterType)
	if got := clusterNames(t, real.Next(10*time.Second)); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("real client through the chain got %v", got)
	}
}

// TestE2EDeltaUpstreamResubscribeExact: while a class lives (a client of
// it stays), its CDS clients leave and come back after a change upstream.
// go-control-plane does not resend, on the same delta stream, what it
// believes the stream holds: a wildcard or a name subscribed again after
// the relay unsubscribed it. The returning client must still get the
// current state.
func TestE2EDeltaUpstreamResubscribeExact(t *testing.T) {
	for _, tc := range []struct {
		name  string
		names []string
		want  map[string]int64
	}{
		{"wildcard", []string{"*"}, map[string]int64{"a": 1, "b": 2}},
		{"changed-name", []string{"b"}, map[string]int64{"b": 2}},
		{"unchanged-name", []string{"a"}, map[string]int64{"a": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			const class = "class-resub"
			m := startMgmt(t, "127.0.0.1:0")
			m.Set(t, class, "v1", map[resource.Type][]types.Resource{
				resource.ClusterType:  cds(timedCluster("a", 1), timedCluster("b", 1), timedCluster("c", 1)),
				resource.EndpointType: loadAssignments("k"),
			})
			// The first client's shard lingers only briefly after it leaves.
			r := startRelay(t, m.Addr, relayAs("relay-resub"), withConfig(func(c *app.Config) { c.Upstream.Protocol = "delta" }), shortLinger())
			keeper := dialDelta(t, ctx, r.Addr(), "keeper", class)
			keeper.Subscribe(resource.EndpointType, "k")
			wantDeltaResp(t, keeper.Next(10*time.Second), resource.EndpointType, []string{"k"}, nil)

			first := dialDelta(t, ctx, r.Addr(), "first", class)
			first.Subscribe(resource.ClusterType, tc.names...)
			first.Next(10 * time.Second)
			first.Close()
			eventually(t, ctx, "the class's CDS shards to go", func() bool {
				for _, ts := range r.Registry().Classes()[0].Status() {
					if ts.TypeURL == resource.ClusterType {
						return len(ts.Shards) == 0
					}
				}
				return true // the type's table was freed
			})

			m.Set(t, class, "v2", map[resource.Type][]types.Resource{
				resource.ClusterType:  cds(timedCluster("a", 1), timedCluster("b", 2)),
				resource.EndpointType: loadAssignments("k"),
			})
			late := dialDelta(t, ctx, r.Addr(), "late", class)
			late.Subscribe(resource.ClusterType, tc.names...)
			deltaState(t, late, map[string]int64{}, tc.want, shard.PendingGrace+5*time.Second)
		})
	}
}

// TestE2EDeltaUpstreamReconnectForgetsUnsubscribedTypes: a class's only
// CDS client left (the class lives on for another client), then the
// control plane restarted with a changed and a deleted cluster. The new
// upstream stream does not subscribe CDS, so the class must not serve what
// the old stream left: the next CDS client gets exactly the current state.
func TestE2EDeltaUpstreamReconnectForgetsUnsubscribedTypes(t *testing.T) {
	ctx := testContext(t)
	const class = "class-forget"
	m1 := startMgmt(t, "127.0.0.1:0")
	v1 := map[resource.Type][]types.Resource{
		resource.ClusterType:  cds(timedCluster("a", 1), timedCluster("b", 1), timedCluster("c", 1)),
		resource.EndpointType: loadAssignments("k"),
	}
	m1.Set(t, class, "v1", v1)
	r := startRelay(t, m1.Addr, relayAs("relay-forget"), withConfig(func(c *app.Config) { c.Upstream.Protocol = "delta" }))
	keeper := dialDelta(t, ctx, r.Addr(), "keeper", class)
	keeper.Subscribe(resource.EndpointType, "k")
	wantDeltaResp(t, keeper.Next(10*time.Second), resource.EndpointType, []string{"k"}, nil)
	first := dialDelta(t, ctx, r.Addr(), "first", class)
	first.Subscribe(resource.ClusterType, "*")
	wantDeltaResp(t, first.Next(10*time.Second), resource.ClusterType, []string{"a", "b", "c"}, nil)
	first.Close()
	eventually(t, ctx, "the relay to end the first stream", func() bool { return r.Server().StreamCount() == 1 })

	m1.Stop()
	m2 := startMgmt(t, m1.Addr)
	m2.Set(t, class, "v2", map[resource.Type][]types.Resource{
		resource.ClusterType:  cds(timedCluster("a", 1), timedCluster("b", 2)),
		resource.EndpointType: loadAssignments("k"),
	})
	eventually(t, ctx, "the relay to reconnect", func() bool {
		return m2.Stats().Open == 1 && upstreamStatus(t, ctx, r, class).State == "connected"
	})
	late := dialDelta(t, ctx, r.Addr(), "late", class)
	late.Subscribe(resource.ClusterType, "*")
	resp := late.Next(10 * time.Second)
	got := map[string]int64{}
	for _, res := range resp.GetResources() {
		var c clusterv3.Cluster
		if err := res.GetResource().UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		got[res.GetName()] = c.GetConnectTimeout().GetSeconds()
	}
	if want := map[string]int64{"a": 1, "b": 2}; !mapsEqual(got, want) {
		t.Fatalf("first CDS response after the control plane restarted holds %v, want %v", got, want)
	}
}

// TestE2EFileSourceClassLifecycle: with the file source, a class dropped
// after its linger is forgotten by the source, and a client of it coming
// back gets a new class with the files' state.
func TestE2EFileSourceClassLifecycle(t *testing.T) {
	ctx := testContext(t)
	r := startRelay(t, "", sampleSource(), withConfig(func(cfg *app.Config) { cfg.NodeClasses.Linger = 20 * time.Millisecond }))
	for round := range 2 {
		c := dialADS(t, ctx, r.Addr(), "n", "class-files")
		c.Subscribe(resource.ClusterType)
		if got := clusterNames(t, c.Next(10*time.Second)); !slices.Equal(got, []string{"echo-cluster"}) {
			t.Fatalf("round %d: clusters %v", round, got)
		}
		c.Close()
		eventually(t, ctx, "the class to be dropped", func() bool { return len(classNames(r)) == 0 })
	}
}

// TestE2ERESTClassLifecycle: a class used only by REST polls lingers with
// its shard between polls (answered from memory), and a poll that would
// create a class beyond limits.max_classes is refused with 429 naming it.
func TestE2ERESTClassLifecycle(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "polled", "v1", clusters("p"))
	r := startRelay(t, m.Addr, relayAs("relay-rest"), withConfig(func(c *app.Config) {
		c.REST.Listen = "127.0.0.1:0"
		c.Limits.MaxClasses = 1
		c.Limits.NewClassesPerPeer = -1 // every client is 127.0.0.1: the global limit is under test
		c.NodeClasses.Linger = time.Hour
	}))
	poll := func(cluster string) (int, string) {
		body := `{"node": {"id": "rest-1", "cluster": "` + cluster + `"}}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.RESTAddr()+"/v3/discovery:clusters", bytes.NewBufferString(body))
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := poll("polled"); code != http.StatusOK || !strings.Contains(body, `"p"`) {
		t.Fatalf("poll: %d %s", code, body)
	}
	status := r.Registry().Classes()[0].Status()
	if len(status) != 1 || len(status[0].Shards) != 1 || status[0].Shards[0].Streams != 0 {
		t.Fatalf("after the poll the lingering class holds %+v, want its CDS shard, unwatched", status)
	}
	// The only class lingers (no lease): a new class evicts it.
	m.Set(t, "other", "v1", clusters("o"))
	if code, body := poll("other"); code != http.StatusOK || !strings.Contains(body, `"o"`) {
		t.Fatalf("poll of a second class: %d %s", code, body)
	}
	if got := classNames(r); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("classes %v, want [other] (polled evicted)", got)
	}
	// A class in use cannot be evicted.
	c := dialADS(t, ctx, r.Addr(), "n", "other")
	c.Subscribe(resource.ClusterType)
	c.Next(10 * time.Second)
	if code, body := poll("third"); code != http.StatusTooManyRequests || !strings.Contains(body, "limits.max_classes") {
		t.Fatalf("poll beyond limits.max_classes: %d %s", code, body)
	}
}

// awaitWatched waits until a stream of the class watches a shard of typeURL
// (its first request was processed: it holds a lease on the class).
func awaitWatched(t *testing.T, ctx context.Context, r *app.Relay, class, typeURL string) {
	t.Helper()
	eventually(t, ctx, "a stream of "+class+" to subscribe to "+typeURL, func() bool {
		for _, c := range r.Registry().Classes() {
			if c.Name != class {
				continue
			}
			for _, ts := range c.Status() {
				if ts.TypeURL == typeURL {
					for _, sh := range ts.Shards {
						if sh.Streams > 0 {
							return true
						}
					}
				}
			}
		}
		return false
	})
}
