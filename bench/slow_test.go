package bench

import (
	"context"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/bench/xdstest"
)

// Stalled clients are disconnected as slow_client; clients that keep up
// take every change and none of their streams ends.
func TestSlowClientsSmoke(t *testing.T) {
	config := shortDrainConfig(t, "limits:\n  max_collapses: 2\n")
	var relayLog xdstest.SyncBuffer
	res, err := RunSlow(context.Background(), SlowConfig{
		RelayBin: buildRelayBinary(t), ConfigFile: config,
		Clients: 10, Stalled: 4, Classes: 2, DeltaShare: 0.5,
		Topology: Topology{Listeners: 4, Routes: 4, VirtualHosts: 2, Clusters: 20, Endpoints: 20},
		Churn:    Churn{Pattern: "fraction", Fraction: 0.3},
		Rate:     10, Duration: 6 * time.Second, UntilStalledGone: true, Idle: 500 * time.Millisecond, Timeout: 30 * time.Second,
		Log: t.Logf, RelayStderr: &relayLog,
	})
	if err != nil {
		t.Fatalf("%v\nrelay log:\n%s", err, relayLog.String())
	}
	t.Logf("changes %d, stalled disconnected %d, slow_client %v, collapses %v, RSS %d/%d/%d, drops %d",
		res.Changes, res.StalledDisconnected, res.SlowDisconnects, res.Collapses, res.RSSBefore, res.RSSPeak, res.RSSAfter, res.ClientDrops)
	if res.StalledDisconnected != res.Stalled || res.SlowDisconnects != float64(res.Stalled) {
		t.Errorf("stalled clients disconnected: %d (metric slow_client %v), want all %d", res.StalledDisconnected, res.SlowDisconnects, res.Stalled)
	}
	if res.NotConverged != 0 || res.ClientDrops != 0 {
		t.Errorf("clients that keep up: %d changes not converged, %d streams ended", res.NotConverged, res.ClientDrops)
	}
	if got, want := len(res.Latencies), res.Changes*res.Clients; got != want {
		t.Errorf("%d latencies, want one per change and client (%d)", got, want)
	}
	if len(res.RSS) == 0 || res.RSSPeak <= 0 {
		t.Errorf("relay memory not sampled")
	}
}
