package app_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
	"github.com/xds-relay/xds-relay/upstream"
)

// With several upstream addresses the relay uses the first, and when it goes
// away fails over to the next: clients stay connected and converge on the
// state of the control plane that serves now.
func TestE2EUpstreamFailover(t *testing.T) {
	backup := startMgmt(t, "127.0.0.1:0")
	backup.Set(t, "class-a", "b1", clusters("a", "b"))
	f := startFixture(t, "class-a", clusters("a"), withConfig(func(cfg *app.Config) { cfg.Upstream.Fallbacks = []string{backup.Addr} }))
	primary := f.cp

	c := f.sotw(t, "failover-1", "class-a")
	if got := clusterNames(t, c.Next(10*time.Second)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("from the primary: %v, want [a]", got)
	}
	if n, _ := backup.Streams(); n != 0 {
		t.Fatalf("the backup saw %d streams while the primary served", n)
	}
	primary.Stop()
	if got := clusterNames(t, c.Next(20*time.Second)); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("after failover: %v, want the backup's [a b]", got)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("the client's stream ended: %v", err)
	}
}

// The control plane is killed right after each change — in the middle of
// pushing it — and comes back, five times: no client stream drops, and
// every client converges on the final state.
func TestE2EUpstreamFlapping(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	addr := m.Addr
	m.Set(t, "class-a", "v0", clusters("c0"))
	r := startRelay(t, addr)

	const n = 20
	var clients []*adsClient
	for i := 0; i < n; i++ {
		c := dialADS(t, ctx, r.Addr(), fmt.Sprintf("flap-%d", i), "class-a")
		c.Subscribe(cdsType)
		clients = append(clients, c)
	}

	want := []string{"c0"}
	for round := 1; round <= 5; round++ {
		want = append(want, fmt.Sprintf("c%d", round))
		m.Set(t, "class-a", fmt.Sprintf("v%d", round), clusters(want...))
		m.Stop() // mid-push: the relay may or may not have the new snapshot
		m = startMgmt(t, addr)
		m.Set(t, "class-a", fmt.Sprintf("v%d", round), clusters(want...))
	}
	// Each client holds what it applied: the last CDS response's clusters.
	for i, c := range clients {
		if !c.WaitFor(ctx, func(c *xdstest.Client) bool { return slices.Equal(slices.Sorted(maps.Keys(c.Held(cdsType))), want) }) {
			t.Fatalf("client %d holds %v, want %v", i, slices.Sorted(maps.Keys(c.Held(cdsType))), want)
		}
	}
	for i, c := range clients {
		if err := c.Err(); err != nil {
			t.Errorf("client %d's stream ended: %v", i, err)
		}
	}
	if got := r.Server().StreamCount(); got != n {
		t.Errorf("relay holds %d streams, want the original %d", got, n)
	}
}

// TestE2EReconnectHonoursBackoffMax keeps the control plane's address
// unusable (connections accepted and closed at once, as a load balancer in
// front of a dead control plane does) for a few of the relay's connection
// attempts, then brings go-control-plane back there. The relay is configured
// with upstream.backoff 50ms..500ms, so it must be back (and its clients
// updated) within about backoff.max of the control plane's return.
func TestE2EReconnectHonoursBackoffMax(t *testing.T) {
	const class = "class-backoff"
	const backoffMax = 500 * time.Millisecond // startRelay's upstream.backoff.max
	f := startFixture(t, class, clusters("one"))
	ctx, m1 := f.ctx, f.cp
	c := f.sotw(t, "client-1", class)
	if got := clusterNames(t, c.Next(10*time.Second)); !slices.Equal(got, []string{"one"}) {
		t.Fatalf("v1 clusters %v, want [one]", got)
	}

	m1.Stop()
	// Take the address over with a listener that drops every connection, and
	// count the relay's connection attempts.
	dead, err := net.Listen("tcp", m1.Addr)
	if err != nil {
		t.Fatalf("listen %s: %v", m1.Addr, err)
	}
	attempts := make(chan time.Time, 64)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := dead.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
			select {
			case attempts <- time.Now():
			default:
			}
		}
	}()
	closeDead := sync.OnceFunc(func() {
		_ = dead.Close()
		wg.Wait()
	})
	t.Cleanup(closeDead)

	const failedAttempts = 4
	var times []time.Time
	for len(times) < failedAttempts {
		select {
		case at := <-attempts:
			times = append(times, at)
		case <-ctx.Done():
			t.Fatalf("only %d connection attempts to the dead control plane: %v", len(times), times)
		}
	}
	var gaps []time.Duration
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i].Sub(times[i-1]).Round(time.Millisecond))
	}
	if err := c.Err(); err != nil {
		t.Fatalf("client stream ended during the outage: %v", err)
	}

	// The control plane is back.
	closeDead()
	m2 := startMgmt(t, m1.Addr)
	m2.Set(t, class, "v2", clusters("one", "two"))
	back := time.Now()
	resp, err := c.next(20 * time.Second)
	if err != nil {
		t.Fatalf("no update after the control plane came back (gaps between failed attempts %v): %v", gaps, err)
	}
	took := time.Since(back)
	if got := clusterNames(t, resp); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("after the return got clusters %v, want [one two]", got)
	}
	// backoff.max, plus slack for connecting and the race detector.
	if limit := backoffMax + 1500*time.Millisecond; took > limit {
		t.Errorf("clients were updated %v after the control plane came back, want within %v: with upstream.backoff.max %v "+
			"the relay's connection attempts were %v apart", took.Round(time.Millisecond), limit, backoffMax, gaps)
	}
	if err := c.Err(); err != nil && !errors.Is(err, ctx.Err()) {
		t.Errorf("client stream ended: %v", err)
	}
}

// TestE2EUpstreamRestartKeepsClientStreams stops the go-control-plane server
// under clients connected through the relay, then starts a new one on the
// same address with new configuration: the clients' streams stay open and
// quiet throughout, and the new configuration reaches them on those same
// streams.
func TestE2EUpstreamRestartKeepsClientStreams(t *testing.T) {
	const class = "class-restart"
	f := startFixture(t, class, clusters("one"))
	ctx, m1, r := f.ctx, f.cp, f.relay

	clients := make([]*adsClient, 5)
	for i := range clients {
		clients[i] = f.sotw(t, "client-"+string(rune('a'+i)), class)
	}
	var v1 string
	for _, c := range clients {
		resp := c.Next(10 * time.Second)
		if got := clusterNames(t, resp); !slices.Equal(got, []string{"one"}) {
			t.Fatalf("%s: v1 clusters %v, want [one]", c.node.GetId(), got)
		}
		v1 = resp.GetVersionInfo()
	}
	ids := func() []uint64 {
		var out []uint64
		for _, s := range r.Server().Streams(0) {
			out = append(out, s.ID)
		}
		return out
	}
	before := ids()
	if len(before) != len(clients) {
		t.Fatalf("relay has %d downstream streams, want %d", len(before), len(clients))
	}
	eventually(t, ctx, "the upstream stream to be connected", func() bool {
		return upstreamStatus(t, ctx, r, class).State == upstream.StateConnected
	})

	m1.Stop()
	eventually(t, ctx, "the relay to notice the upstream is gone", func() bool {
		st := upstreamStatus(t, ctx, r, class)
		return (st.State == upstream.StateBackoff || st.State == upstream.StateConnecting) && st.Reconnects > 0
	})
	if got := ids(); !slices.Equal(got, before) {
		t.Fatalf("downstream streams changed while the upstream was down: %v, want %v", got, before)
	}
	for _, c := range clients {
		if err := c.Err(); err != nil {
			t.Fatalf("%s: stream ended while the upstream was down: %v", c.node.GetId(), err)
		}
	}

	m2 := startMgmt(t, m1.Addr)
	m2.Set(t, class, "v2", clusters("one", "two"))
	for _, c := range clients {
		resp := c.Next(20 * time.Second)
		if got := clusterNames(t, resp); !slices.Equal(got, []string{"one", "two"}) {
			t.Fatalf("%s: after the restart got clusters %v, want [one two]", c.node.GetId(), got)
		}
		if resp.GetVersionInfo() == v1 {
			t.Errorf("%s: new content under the old version %q", c.node.GetId(), v1)
		}
	}
	if got := ids(); !slices.Equal(got, before) {
		t.Errorf("downstream streams after the restart: %v, want the same %v", got, before)
	}
	for _, c := range clients {
		if err := c.Err(); err != nil {
			t.Errorf("%s: stream ended: %v", c.node.GetId(), err)
		}
	}
	st := upstreamStatus(t, ctx, r, class)
	if st.State != upstream.StateConnected || st.Versions[resource.ClusterType] != "v2" {
		t.Errorf("/debug/upstream after the restart: state %q version %q, want connected and v2", st.State, st.Versions[resource.ClusterType])
	}
	opened, nodes := m2.Streams()
	if opened != 1 || len(nodes) != 1 || nodes[0].GetId() != relayID || nodes[0].GetCluster() != class {
		t.Errorf("new control plane saw %d streams with nodes %v, want one from %q for %q", opened, nodes, relayID, class)
	}
}

// TestE2ERelayTierUpstreamRestart chains client → relay A → relay B →
// go-control-plane, then replaces relay B by a new process on the same
// address with the same configuration. Relay A reconnects to it and is in
// sync (B2 rightly sends nothing: A's version_info already equals its
// shard's version), so /debug/upstream must say A's stream is connected, not
// leave it "connecting" until the configuration happens to change.
func TestE2ERelayTierUpstreamRestart(t *testing.T) {
	const class = "class-tier"
	f := startFixture(t, class, clusters("one"), relayAs("relay-b"))
	ctx, m, b := f.ctx, f.cp, f.relay
	a := startRelay(t, b.Addr(), relayAs("relay-a"))
	c := dialADS(t, ctx, a.Addr(), "client-1", class)
	c.Subscribe(resource.ClusterType)
	if got := clusterNames(t, c.Next(10*time.Second)); !slices.Equal(got, []string{"one"}) {
		t.Fatalf("clusters through two relays %v, want [one]", got)
	}
	// Each relay presents its own id upstream: the control plane sees B.
	if _, nodes := m.Streams(); len(nodes) != 1 || nodes[0].GetId() != "relay-b" || nodes[0].GetCluster() != class {
		t.Fatalf("control plane nodes %v, want one stream from relay-b for %s", nodes, class)
	}
	if s := b.Server().Streams(0); len(s) != 1 || s[0].Node != "relay-a" || s[0].Class != class {
		t.Fatalf("relay B streams %+v, want one from relay-a in %s", s, class)
	}

	bAddr := b.Addr()
	b.Close()
	b2 := startRelay(t, m.Addr, listenAt(bAddr), relayAs("relay-b"))
	eventually(t, ctx, "relay A to resubscribe on relay B2", func() bool {
		s := b2.Server().Streams(0)
		return len(s) == 1 && len(s[0].Types) == 1 && s[0].Types[0].Wildcard
	})
	if err := c.Err(); err != nil {
		t.Fatalf("client stream ended when relay B restarted: %v", err)
	}

	// A's stream to B2 is up and in sync.
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if !poll(wctx, func() bool { return upstreamStatus(t, ctx, a, class).State == upstream.StateConnected }) {
		st := upstreamStatus(t, ctx, a, class)
		t.Errorf("relay A's upstream stream to B2 is open and in sync, but after 3s /debug/upstream still says %q (reconnects %d, last error %q)",
			st.State, st.Reconnects, st.LastError)
	}

	// The stream does work: a change reaches the client through B2 and A.
	m.Set(t, class, "v2", clusters("one", "two"))
	if got := clusterNames(t, c.Next(10*time.Second)); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("after the change got %v, want [one two]", got)
	}
	eventually(t, ctx, "relay A to be connected after a response", func() bool {
		return upstreamStatus(t, ctx, a, class).State == upstream.StateConnected
	})
}
