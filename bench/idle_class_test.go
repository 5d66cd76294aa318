package bench

import (
	"context"
	"sync"
	"testing"
	"time"
)

// A class whose clients all left, whose configuration then changed
// upstream, serves a client that joins afterwards the current state, with
// proxy-like clients over both client protocols and both upstream
// protocols. Found by the slow-client bench (every delta client of a class
// ended by the request rate limit at once, reconnecting): with a SotW
// upstream, the relay's ACKs recorded the empty interest as what was asked
// though the legacy wildcard subscription was kept, so the class dropped
// the pushed state and served the next client no Listener and no Cluster
// until the next change (see also e2e_resubscribe_test.go).
func TestIdleClassChange(t *testing.T) {
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
