package bench

import (
	"context"
	"flag"
	"sync"
	"testing"
	"time"
)

// relayBugs runs the reproductions of known relay bugs (they fail until
// fixed, so CI does not run them): go test ./bench -run TestRelayBug -relay-bugs
var relayBugs = flag.Bool("relay-bugs", false, "run the reproductions of known, unfixed relay bugs")

// With a SotW upstream, a class whose clients all left, whose configuration
// then changed upstream, serves a client that joins afterwards no Listener
// and no Cluster (nor, following them, anything else) until the next
// upstream change; /debug/shards shows the Listener and Cluster tables
// "received" with 0 resources. The delta-upstream cases pass. Found by the slow-client bench (all delta clients of a class
// ended by the request rate limit at once, reconnecting stale).
func TestRelayBugIdleClassChange(t *testing.T) {
	if !*relayBugs {
		t.Skip("reproduction of an unfixed relay bug; run with -relay-bugs")
	}
	bin := buildRelayBinary(t)
	for _, tc := range []struct {
		name          string
		deltaShare    float64
		upstreamDelta bool
	}{{"sotw", 0, false}, {"delta", 1, false}, {"sotw-upstream-delta", 0, true}, {"delta-upstream-delta", 1, true}} {
		t.Run(tc.name, func(t *testing.T) {
			cp, err := StartControlPlane("snapshot")
			if err != nil {
				t.Fatal(err)
			}
			defer cp.Stop()
			up, err := NewUpstream(cp, []string{"c0"}, Topology{Listeners: 4, Routes: 4, VirtualHosts: 2, Clusters: 20, Endpoints: 3})
			if err != nil {
				t.Fatal(err)
			}
			var log syncBuffer
			relay, err := StartRelayChild(context.Background(), RelayChildConfig{Bin: bin, Upstream: cp.Addr, UpstreamDelta: tc.upstreamDelta, Stderr: &log, Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer relay.Stop()
			var wg sync.WaitGroup
			ctx, cancel := context.WithCancel(context.Background())
			defer wg.Wait()
			defer cancel()
			first := startProxyClients(ctx, &wg, 2, []string{"c0"}, tc.deltaShare, relay.Addr)
			if _, _, err := awaitConvergence(ctx, up, first, time.Now(), 10*time.Second); err != nil {
				t.Fatal(err)
			}
			cancel() // every client of the class leaves
			wg.Wait()
			time.Sleep(500 * time.Millisecond) // the relay notices
			if err := up.Change(Churn{Pattern: "all"}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(500 * time.Millisecond) // the upstream pushes the change
			lateCtx, stopLate := context.WithCancel(context.Background())
			defer stopLate()
			late := startProxyClients(lateCtx, &wg, 1, []string{"c0"}, tc.deltaShare, relay.Addr)
			if _, _, err := awaitConvergence(lateCtx, up, late, time.Now(), 10*time.Second); err != nil {
				m, _ := checkClients(up, late)
				t.Errorf("%v: %v", err, m)
			}
		})
	}
}
