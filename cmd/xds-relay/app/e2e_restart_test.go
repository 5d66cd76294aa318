package app_test

import (
	"slices"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/upstream"
)

// TestE2EUpstreamRestartKeepsClientStreams stops the go-control-plane server
// under clients connected through the relay, then starts a new one on the
// same address with new configuration: the clients' streams stay open and
// quiet throughout, and the new configuration reaches them on those same
// streams.
func TestE2EUpstreamRestartKeepsClientStreams(t *testing.T) {
	ctx := testContext(t)
	const class = "class-restart"
	m1 := startMgmt(t, "127.0.0.1:0")
	m1.Set(t, class, "v1", clusters("one"))
	r := startRelay(t, m1.Addr)

	clients := make([]*adsClient, 5)
	for i := range clients {
		clients[i] = dialADS(t, ctx, r.Addr(), "client-"+string(rune('a'+i)), class)
		clients[i].Subscribe(resource.ClusterType)
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
