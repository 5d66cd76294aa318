package app_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// TestE2EDeltaRelayChains chains client → relay1 → relay2 → relay3 →
// go-control-plane with each hop's upstream protocol set per case. The client
// gets the initial state and a later change of one cluster among several
// (a delta client exactly that one), and every relay has exactly one
// upstream stream for the class, which the next hop serves as its only
// downstream stream, in the protocol chosen.
func TestE2EDeltaRelayChains(t *testing.T) {
	for _, tc := range []struct {
		name        string
		protos      [3]string // upstream protocol of relay1, relay2, relay3
		deltaClient bool
	}{
		{"all-sotw", [3]string{"sotw", "sotw", "sotw"}, false},
		{"all-delta", [3]string{"delta", "delta", "delta"}, true},
		{"mixed-delta-client", [3]string{"delta", "sotw", "delta"}, true},
		{"mixed-sotw-client", [3]string{"delta", "sotw", "delta"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) { testChain(t, tc.protos, tc.deltaClient) })
	}
}

func testChain(t *testing.T, protos [3]string, deltaClient bool) {
	ctx := testContext(t)
	const class = "class-chain"
	m := startMgmt(t, "127.0.0.1:0")
	snap := func(b int) map[resource.Type][]types.Resource {
		return map[resource.Type][]types.Resource{resource.ClusterType: cds(
			timedCluster("a", 1), timedCluster("b", b), timedCluster("c", 1), timedCluster("d", 1), timedCluster("e", 1))}
	}
	m.Set(t, class, "v1", snap(1))
	relays := make([]*app.Relay, 3)
	up := m.Addr
	for i := 2; i >= 0; i-- {
		relays[i] = startRelay(t, up, relayAs(fmt.Sprintf("relay-%d", i+1)), upstreamProtocol(protos[i]))
		up = relays[i].Addr()
	}
	all := []string{"a", "b", "c", "d", "e"}
	if deltaClient {
		dc := dialDelta(t, ctx, relays[0].Addr(), "client-1", class)
		dc.Subscribe(resource.ClusterType, "*")
		wantDeltaResp(t, dc.Next(10*time.Second), resource.ClusterType, all, nil)
		m.Set(t, class, "v2", snap(2))
		resp := dc.Next(10 * time.Second)
		wantDeltaResp(t, resp, resource.ClusterType, []string{"b"}, nil)
		if len(resp.GetResources()) != 1 {
			t.Fatalf("change: %d resources, want exactly 1", len(resp.GetResources()))
		}
		dc.Quiet(300 * time.Millisecond)
	} else {
		sc := dialADS(t, ctx, relays[0].Addr(), "client-1", class)
		sc.Subscribe(resource.ClusterType)
		if got := clusterNames(t, sc.Next(10*time.Second)); !slices.Equal(got, all) {
			t.Fatalf("initial clusters %v, want %v", got, all)
		}
		m.Set(t, class, "v2", snap(2))
		want := map[string]int64{"a": 1, "b": 2, "c": 1, "d": 1, "e": 1}
		if got := connectTimeouts(t, sc.Next(10*time.Second)); !maps.Equal(got, want) {
			t.Fatalf("after the change %v, want %v", got, want)
		}
	}

	for i, r := range relays {
		oneUpstreamStream(t, ctx, r, class)
		// The next hop serves this relay's stream as its only one.
		var down []string
		if i < 2 {
			for _, s := range relays[i+1].Server().Streams(0) {
				down = append(down, s.Node+"/"+s.Class+"/"+s.Variant)
			}
			variant := "sotw-ads"
			if protos[i] == "delta" {
				variant = "delta-ads"
			}
			if want := []string{fmt.Sprintf("relay-%d/%s/%s", i+1, class, variant)}; !slices.Equal(down, want) {
				t.Errorf("relay-%d's downstream streams %v, want %v", i+2, down, want)
			}
		}
	}
	st := m.Stats()
	sotw, delta := st.Streams, st.DeltaStreams
	if protos[2] == "delta" && (sotw != 0 || delta != 1) || protos[2] == "sotw" && (sotw != 1 || delta != 0) {
		t.Errorf("control plane served %d SotW and %d delta streams to a %s relay-3, want 1 of that protocol", sotw, delta, protos[2])
	}
}
