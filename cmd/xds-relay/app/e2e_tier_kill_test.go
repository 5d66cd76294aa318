package app_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// reconnectingClient re-opens its ADS stream whenever it fails, as Envoy
// and gRPC clients do, and remembers the clusters it last received.
type reconnectingClient struct {
	mu    sync.Mutex
	names []string
	opens int
}

func (c *reconnectingClient) run(ctx context.Context, conn *grpc.ClientConn, id string) {
	for attempt := 0; attempt < 200 && ctx.Err() == nil; attempt++ {
		c.mu.Lock()
		c.opens++
		c.mu.Unlock()
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx, grpc.WaitForReady(true))
		if err == nil {
			err = stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: id, Cluster: "class-a"}, TypeUrl: cdsType})
		}
		for err == nil {
			var resp *discoveryv3.DiscoveryResponse
			if resp, err = stream.Recv(); err != nil {
				break
			}
			c.mu.Lock()
			c.names = clusterNamesOf(resp)
			c.mu.Unlock()
			err = stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: cdsType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond): // reconnect pace
		}
	}
}

// clusterNamesOf returns the sorted cluster names of a response (nil if one
// does not decode); usable off the test goroutine.
func clusterNamesOf(resp *discoveryv3.DiscoveryResponse) []string {
	var out []string
	for _, a := range resp.GetResources() {
		var cl clusterv3.Cluster
		if err := a.UnmarshalTo(&cl); err != nil {
			return nil
		}
		out = append(out, cl.GetName())
	}
	slices.Sort(out)
	return out
}

func (c *reconnectingClient) state() ([]string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.names), c.opens
}

// Three relays behind one address list: killing one moves its clients to
// the others, and after the next update no client is left on a stale state.
func TestE2ERelayTierKillOne(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "class-a", "v1", clusters("a"))
	relays := []*app.Relay{startRelay(t, m.Addr), startRelay(t, m.Addr), startRelay(t, m.Addr)}

	var clients []*reconnectingClient
	var wg sync.WaitGroup
	cctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		wg.Wait()
	}()
	for i := 0; i < 30; i++ {
		r := manual.NewBuilderWithScheme("relays")
		state := resolver.State{}
		for _, rl := range relays {
			state.Addresses = append(state.Addresses, resolver.Address{Addr: rl.Addr()})
		}
		r.InitialState(state)
		conn, err := grpc.NewClient(r.Scheme()+":///tier", grpc.WithResolvers(r),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		c := &reconnectingClient{}
		clients = append(clients, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.run(cctx, conn, "tier-client")
		}()
	}
	all := func(want []string) func() bool {
		return func() bool {
			for _, c := range clients {
				if got, _ := c.state(); !slices.Equal(got, want) {
					return false
				}
			}
			return true
		}
	}
	eventually(t, ctx, "every client to hold v1", all([]string{"a"}))

	// Kill the relay serving the most clients: round_robin spreads the
	// streams, but which relay got how many is chance.
	victim := slices.MaxFunc(relays, func(a, b *app.Relay) int { return a.Server().StreamCount() - b.Server().StreamCount() })
	if victim.Server().StreamCount() == 0 {
		t.Fatal("no relay serves a client")
	}
	victim.Close()
	m.Set(t, "class-a", "v2", clusters("a", "b"))
	eventually(t, ctx, "every client to hold v2 after one relay died", all([]string{"a", "b"}))
	reopened := 0
	for _, c := range clients {
		if _, opens := c.state(); opens > 1 {
			reopened++
		}
	}
	if reopened == 0 {
		t.Fatal("no client had been on the killed relay: the test proves nothing")
	}
	t.Logf("%d of %d clients moved off the killed relay", reopened, len(clients))
}
