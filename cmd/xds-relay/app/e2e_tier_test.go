package app_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/upstream"
)

// TestE2ERelayTierUpstreamRestart chains client → relay A → relay B →
// go-control-plane, then replaces relay B by a new process on the same
// address with the same configuration. Relay A reconnects to it and is in
// sync (B2 rightly sends nothing: A's version_info already equals its
// shard's version), so /debug/upstream must say A's stream is connected, not
// leave it "connecting" until the configuration happens to change.
func TestE2ERelayTierUpstreamRestart(t *testing.T) {
	ctx := testContext(t)
	const class = "class-tier"
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, class, "v1", clusters("one"))
	b := startRelay(t, m.Addr, listenAt("127.0.0.1:0"), relayAs("relay-b"))
	a := startRelay(t, b.Addr(), listenAt("127.0.0.1:0"), relayAs("relay-a"))
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
