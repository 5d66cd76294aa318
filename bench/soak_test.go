package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/bench/xdstest"
)

// buildRelayBinary builds ./cmd/xds-relay into the test's temp directory.
func buildRelayBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "xds-relay")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/xds-relay").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// shortDrainConfig writes a relay configuration with extra lines and a
// 1 s drain period, so stopping the relay does not wait on clients the
// relay has not yet seen leave.
func shortDrainConfig(t *testing.T, extra string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(path, []byte("drain:\n  period: 1s\n"+extra), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A short soak in CI: churn (with clusters added and removed), client
// reconnections and upstream restarts together; every client must end with
// exactly the upstream's state.
func TestSoakSmoke(t *testing.T) {
	for _, tc := range []struct {
		name          string
		upstreamDelta bool
	}{{"sotw-upstream", false}, {"delta-upstream", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var relayLog xdstest.SyncBuffer
			res, err := RunSoak(context.Background(), SoakConfig{
				RelayBin: buildRelayBinary(t), UpstreamDelta: tc.upstreamDelta, ConfigFile: shortDrainConfig(t, ""),
				Duration: 4 * time.Second, Clients: 20, Classes: 2, DeltaShare: 0.5,
				Topology:  Topology{Listeners: 4, Routes: 3, VirtualHosts: 2, Clusters: 10, Endpoints: 3},
				Churn:     Churn{Pattern: "fraction", Fraction: 0.2, AddRemove: 0.5},
				ChurnRate: 10, ClientChurnRate: 5,
				RestartEvery: 1500 * time.Millisecond, MaxDown: 300 * time.Millisecond,
				ConvergeTimeout: 30 * time.Second, Log: t.Logf, RelayStderr: &relayLog,
			})
			if err != nil {
				t.Fatalf("%v\nrelay log:\n%s", err, relayLog.String())
			}
			t.Logf("result: %+v", *res)
			for _, m := range res.Mismatches {
				t.Errorf("end state: %s", m)
			}
			if res.UpstreamRestarts < 1 {
				t.Errorf("upstream restarts = %d, want at least 1", res.UpstreamRestarts)
			}
			if res.NotConverged > 0 {
				t.Errorf("%d restarts were not followed by convergence", res.NotConverged)
			}
			if got, want := len(res.UpstreamStreams), res.UpstreamRestarts+1; got != want {
				t.Errorf("%d upstream incarnations, want %d", got, want)
			}
			if p := res.StreamsProblem(); p != "" {
				t.Error(p)
			}
			if res.ClientDrops != 0 {
				t.Errorf("%d client streams ended that the clients did not end", res.ClientDrops)
			}
			if res.ClientReconnects < 1 || res.Updates <= 2*res.Classes || res.Responses < int64(res.Clients)*4 {
				t.Errorf("implausible counts: %+v", *res)
			}
			if res.RelayRSS <= 0 || res.RelayCPU <= 0 {
				t.Errorf("relay not measured: %+v", *res)
			}
			if t.Failed() {
				t.Logf("relay log:\n%s", relayLog.String())
			}
		})
	}
}
