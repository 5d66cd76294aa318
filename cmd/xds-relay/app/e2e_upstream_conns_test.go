package app_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
	"github.com/xds-relay/xds-relay/upstream"
)

// chainedClasses starts a relay chained to a tier relay allowing perConn
// streams a connection, with maxConns upstream connections, and n live
// classes on it, each with a client: it returns the edge relay and the
// clients.
func chainedClasses(t *testing.T, perConn, maxConns, n int, edgeOpts ...relayOption) (*app.Relay, []*adsClient) {
	t.Helper()
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	tier := startRelay(t, m.Addr, relayAs("relay-tier"), withConfig(func(c *app.Config) { c.Limits.MaxStreamsPerConnection = perConn }))
	edgeOpts = append([]relayOption{relayAs("relay-edge"), withConfig(func(c *app.Config) { c.Upstream.MaxConnections = maxConns })}, edgeOpts...)
	edge := startRelay(t, tier.Addr(), edgeOpts...)
	var clients []*adsClient
	for i := range n {
		class := fmt.Sprintf("class-%d", i)
		m.Set(t, class, "v1", clusters("c-"+class))
		c := dialADS(t, ctx, edge.Addr(), "node-"+class, class)
		c.Subscribe(resource.ClusterType)
		clients = append(clients, c)
	}
	return edge, clients
}

// TestE2EUpstreamStreamsBeyondOneConnection: an edge relay with more live
// classes than its upstream relay allows streams a connection opens more
// connections, and every class gets its state (issue 22 S2).
func TestE2EUpstreamStreamsBeyondOneConnection(t *testing.T) {
	const perConn, classes = 3, 8
	_, clients := chainedClasses(t, perConn, upstream.DefaultMaxConnections, classes)
	for i, c := range clients {
		want := []string{fmt.Sprintf("c-class-%d", i)}
		if got := clusterNames(t, c.Next(20*time.Second)); !slices.Equal(got, want) {
			t.Fatalf("class-%d got %v, want %v", i, got, want)
		}
	}
}

// TestE2EUpstreamStreamWaitIsShown: with upstream.max_connections full, a
// class that cannot get a stream is shown waiting at /debug/upstream and
// counted, not left silent. Waiting for a stream slot on a healthy
// connection is no failure (issue 27, F2 and F3): no reconnect, no
// connection failure, the class is not marked unreachable past
// upstream.unavailable_after, and its client, which has nothing yet, keeps
// its stream.
func TestE2EUpstreamStreamWaitIsShown(t *testing.T) {
	const perConn, maxConns, classes = 2, 1, 3
	const unavailableAfter = 300 * time.Millisecond
	edge, clients := chainedClasses(t, perConn, maxConns, classes, withConfig(func(c *app.Config) { c.Upstream.UnavailableAfter = unavailableAfter }))
	ctx := testContext(t)
	var waiting []int
	eventually(t, ctx, "a class shown waiting for a stream, and counted", func() bool {
		waiting = nil
		for i := range classes {
			class := fmt.Sprintf("class-%d", i)
			if upstreamStatus(t, ctx, edge, class).State != upstream.StateWaiting {
				continue
			}
			if v, ok := scrape(t, ctx, edge, `xds_relay_upstream_stream_waits_total{class="`+class+`"}`); ok && v == 1 {
				waiting = append(waiting, i)
			}
		}
		return len(waiting) == classes-perConn
	})
	time.Sleep(3 * unavailableAfter)
	for _, i := range waiting {
		st := upstreamStatus(t, ctx, edge, fmt.Sprintf("class-%d", i))
		if st.State != upstream.StateWaiting || st.Reconnects != 0 || st.ConnectionFailures != 0 || st.UnavailableSince != nil || st.LastError != "" {
			t.Errorf("class-%d waiting for a stream slot: %+v, want waiting and no failure", i, st)
		}
		if err := clients[i].Err(); err != nil {
			t.Errorf("class-%d's client lost its stream while the class waits for a slot: %v", i, err)
		}
	}
}
