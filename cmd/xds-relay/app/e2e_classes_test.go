package app_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestE2EClassesShareOneUpstreamStream connects 100 raw ADS clients of two
// node classes through the relay to go-control-plane: every client gets
// exactly its class's clusters, and the control plane serves exactly one ADS
// stream per class, presenting the relay's node id and the class's cluster.
func TestE2EClassesShareOneUpstreamStream(t *testing.T) {
	ctx := testContext(t)
	want := map[string][]string{
		"class-a": {"a-backend", "a-frontend"},
		"class-b": {"b-backend", "b-cache", "b-frontend"},
	}
	m := startMgmt(t, "127.0.0.1:0")
	for class, names := range want {
		m.Set(t, class, "v1-"+class, clusters(names...))
	}
	r := startRelay(t, m.Addr)

	const n = 100
	clients := make([]*adsClient, n)
	for i := range clients {
		class := "class-a"
		if i%2 == 1 {
			class = "class-b"
		}
		clients[i] = dialADS(t, ctx, r.Addr(), fmt.Sprintf("client-%d", i), class)
	}
	// Subscribe concurrently, so that the first nodes of both classes race
	// to create the class and its upstream stream.
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.SendSotW(resource.ClusterType, nil); err != nil {
				t.Errorf("%s: subscribe: %v", c.node.GetId(), err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	for _, c := range clients {
		resp := c.Next(10 * time.Second)
		if got := clusterNames(t, resp); !slices.Equal(got, want[c.node.GetCluster()]) {
			t.Errorf("%s (%s) got clusters %v, want %v", c.node.GetId(), c.node.GetCluster(), got, want[c.node.GetCluster()])
		}
		if resp.GetVersionInfo() == "" || resp.GetNonce() == "" {
			t.Errorf("%s: response without version or nonce: %q %q", c.node.GetId(), resp.GetVersionInfo(), resp.GetNonce())
		}
	}

	if got := r.Server().StreamCount(); got != n {
		t.Errorf("relay serves %d downstream streams, want %d", got, n)
	}
	var classes []string
	for _, c := range r.Registry().Classes() {
		classes = append(classes, c.Name)
	}
	if !slices.Equal(classes, []string{"class-a", "class-b"}) {
		t.Errorf("relay classes %v, want [class-a class-b]", classes)
	}

	// The relay ACKs what it applied, so both upstream streams have sent
	// their first request by now.
	eventually(t, ctx, "the relay to ACK both classes", func() bool {
		return upstreamStatus(t, ctx, r, "class-a").ACKs > 0 && upstreamStatus(t, ctx, r, "class-b").ACKs > 0
	})
	opened, nodes := m.Streams()
	if opened != 2 || len(nodes) != 2 {
		t.Fatalf("control plane saw %d ADS streams (%d with requests), want 2", opened, len(nodes))
	}
	seen := map[string]bool{}
	for _, node := range nodes {
		if node.GetId() != relayID {
			t.Errorf("upstream stream node id %q, want the relay's %q", node.GetId(), relayID)
		}
		cl := node.GetCluster()
		if _, ok := want[cl]; !ok || seen[cl] {
			t.Errorf("upstream stream node cluster %q: want one stream each for class-a and class-b", cl)
		}
		seen[cl] = true
		if got, want := node.GetLocality().GetRegion(), "r-"+cl; got != want {
			t.Errorf("upstream node of %s has locality region %q, want %q (copied from the class's first node)", cl, got, want)
		}
	}

	// Every client still has its stream, and nothing else arrived.
	for _, c := range clients {
		if err := c.Err(); err != nil {
			t.Errorf("%s: stream ended: %v", c.node.GetId(), err)
		}
		if n, _ := c.Counts(resource.ClusterType); n != 1 {
			t.Errorf("%s: %d responses, want 1: %+v", c.node.GetId(), n, c.Log())
		}
	}
}
