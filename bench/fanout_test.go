package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/xds-relay/xds-relay/bench/xdstest"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bench-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildErr  error
)

// binaries builds xds-relay and xds-bench once for the package's tests.
func binaries(t *testing.T) (relay, benchBin string) {
	t.Helper()
	relay, benchBin = filepath.Join(binDir, "xds-relay"), filepath.Join(binDir, "xds-bench")
	buildOnce.Do(func() {
		for bin, pkg := range map[string]string{relay: "../cmd/xds-relay", benchBin: "./cmd/xds-bench"} {
			if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return relay, benchBin
}

// Smoke runs of every target (small N, seconds) so the tool never rots: the
// servers are child processes built and measured as in a real run. RunFanout
// itself fails unless every client received v1 and then v2, once each, with
// the expected number of resources.
func TestFanoutTargets(t *testing.T) {
	const clients, classes, clusters = 30, 2, 40
	for _, tc := range []struct {
		name string
		cfg  FanoutConfig
		// upstream streams: one per class through the relay, one per
		// client stream on every other server.
		wantStreams int
	}{
		{"relay-ads-sotw", FanoutConfig{Target: TargetRelay, StreamsPerConn: 4}, classes},
		{"relay-ads-sotw-envoy-window", FanoutConfig{Target: TargetRelay, ClientWindow: EnvoyWindow}, classes},
		{"relay-cds-sotw", FanoutConfig{Target: TargetRelay, Service: ServiceCDS, StreamsPerConn: 3}, classes},
		{"relay-ads-delta", FanoutConfig{Target: TargetRelay, Delta: true, StreamsPerConn: 4}, classes},
		{"relay-cds-delta", FanoutConfig{Target: TargetRelay, Service: ServiceCDS, Delta: true}, classes},
		{"relay-sotw-upstream-delta", FanoutConfig{Target: TargetRelay, UpstreamDelta: true}, classes},
		{"relay-delta-upstream-delta", FanoutConfig{Target: TargetRelay, Delta: true, UpstreamDelta: true, StreamsPerConn: 2}, classes},
		{"relay-control-plane-child", FanoutConfig{Target: TargetRelay, ControlPlaneChild: true, StreamsPerConn: 4}, classes},
		{"relay-control-plane-child-delta", FanoutConfig{Target: TargetRelay, ControlPlaneChild: true, Delta: true, UpstreamDelta: true}, classes},
		{"limit-ads-sotw", FanoutConfig{Target: TargetLimit, StreamsPerConn: 4}, clients},
		{"limit-cds-sotw", FanoutConfig{Target: TargetLimit, Service: ServiceCDS, StreamsPerConn: 3}, clients},
		{"limit-ads-delta", FanoutConfig{Target: TargetLimit, Delta: true, StreamsPerConn: 5}, clients},
		{"limit-cds-delta", FanoutConfig{Target: TargetLimit, Service: ServiceCDS, Delta: true}, clients},
		{"tcp-sotw", FanoutConfig{Target: TargetTCP}, clients},
		{"tcp-delta", FanoutConfig{Target: TargetTCP, Delta: true}, clients},
		{"direct-snapshot-sotw", FanoutConfig{Target: TargetDirect, Cache: "snapshot", StreamsPerConn: 4}, clients},
		{"direct-snapshot-sotw-envoy-window", FanoutConfig{Target: TargetDirect, Cache: "snapshot", ClientWindow: EnvoyWindow}, clients},
		{"direct-snapshot-delta", FanoutConfig{Target: TargetDirect, Cache: "snapshot", Delta: true}, clients},
		{"direct-linear-sotw", FanoutConfig{Target: TargetDirect, Cache: "linear", StreamsPerConn: 3}, clients},
		{"direct-linear-delta", FanoutConfig{Target: TargetDirect, Cache: "linear", Delta: true}, clients},
	} {
		t.Run(tc.name, func(t *testing.T) {
			relay, benchBin := binaries(t)
			var serverLog xdstest.SyncBuffer
			cfg := tc.cfg
			cfg.RelayBin, cfg.BenchBin = relay, benchBin
			cfg.Clients, cfg.Classes, cfg.Clusters = clients, classes, clusters
			cfg.Timeout, cfg.Log, cfg.ServerStderr = 30*time.Second, t.Logf, &serverLog
			res, err := RunFanout(context.Background(), cfg)
			if err != nil {
				t.Fatalf("%v\nserver log:\n%s", err, serverLog.String())
			}
			if len(res.Latencies) != clients {
				t.Errorf("%d latencies, want one per client (%d)", len(res.Latencies), clients)
			}
			if res.ServerCPU <= 0 || res.ServerRSSBase <= 0 || res.ServerRSSIdle <= 0 || res.ServerRSSAfter <= 0 {
				t.Errorf("server not measured: CPU %v, RSS base %d idle %d after %d", res.ServerCPU, res.ServerRSSBase, res.ServerRSSIdle, res.ServerRSSAfter)
			}
			if res.UpstreamStreams != tc.wantStreams {
				t.Errorf("streams on the control plane or server = %d, want %d", res.UpstreamStreams, tc.wantStreams)
			}
			// Every client received the update: at least its envelope and
			// resources (nonces differ in length).
			if res.BytesTotal < int64(clients*(res.ResponseBytes-8)) {
				t.Errorf("bytes in all = %d, want about %d × %d", res.BytesTotal, clients, res.ResponseBytes)
			}
			if res.ServerConnectCPU <= 0 {
				t.Errorf("server's connection wave not measured: CPU %v", res.ServerConnectCPU)
			}
			// The control plane is measured where it is a process of its
			// own: direct's server, the relay's child.
			measured := tc.cfg.Target == TargetDirect || tc.cfg.ControlPlaneChild
			switch cp := res.ControlPlane; {
			case measured && cp == nil:
				t.Errorf("control plane not measured")
			case !measured && cp != nil:
				t.Errorf("control plane %+v measured, want none (not a process of its own)", cp)
			case measured && (cp.ConnectCPU <= 0 || cp.UpdateCPU <= 0 || cp.RSSBase <= 0 || cp.RSSIdle <= 0 || cp.RSSAfter <= 0):
				t.Errorf("control plane not measured: %+v", cp)
			case measured && cp.Child != (tc.cfg.Target == TargetRelay):
				t.Errorf("control plane child %v for target %s", cp.Child, tc.cfg.Target)
			case tc.cfg.Target == TargetDirect && (cp.UpdateCPU != res.ServerCPU || cp.ConnectCPU != res.ServerConnectCPU):
				t.Errorf("direct: control plane CPU %v/%v, server's %v/%v: the same process", cp.ConnectCPU, cp.UpdateCPU, res.ServerConnectCPU, res.ServerCPU)
			}
			if res.StreamsPerConn != max(cfg.StreamsPerConn, 1) {
				t.Errorf("streams_per_conn = %d, want %d", res.StreamsPerConn, cfg.StreamsPerConn)
			}
			if tc.cfg.Target == TargetRelay {
				// Per class: the subscription and one ACK per version (v1,
				// v2); the last ACK may not have reached the control plane's
				// counter yet. Anything that grows with the clients exceeds
				// this.
				if res.UpstreamRequests < 2*classes || res.UpstreamRequests > 3*classes {
					t.Errorf("upstream requests = %d, want 4 to 6 whatever the number of clients", res.UpstreamRequests)
				}
			}
		})
	}
}

// The relay and the limit target send responses of the same size: the
// limit is a floor for the same bytes.
func TestLimitSendsTheRelaysBytes(t *testing.T) {
	relay, benchBin := binaries(t)
	size := map[string]int{}
	for _, target := range []string{TargetRelay, TargetLimit, TargetTCP} {
		res, err := RunFanout(context.Background(), FanoutConfig{
			Target: target, RelayBin: relay, BenchBin: benchBin, Clients: 3, Classes: 1, Clusters: 25,
			Timeout: 30 * time.Second, Log: t.Logf,
		})
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		size[target] = res.ResponseBytes
	}
	if size[TargetLimit] != size[TargetRelay] || size[TargetTCP] != size[TargetRelay] {
		t.Errorf("response bytes: %v, want the same for every target", size)
	}
}

func TestFanoutConfigRejects(t *testing.T) {
	for _, cfg := range []FanoutConfig{
		{Target: TargetTCP, StreamsPerConn: 2, Clients: 1, Classes: 1, Clusters: 1},
		{Target: TargetDirect, Service: ServiceCDS, Clients: 1, Classes: 1, Clusters: 1},
		{Target: TargetLimit, Service: "lds", Clients: 1, Classes: 1, Clusters: 1},
		{Target: TargetLimit, Clients: 0, Classes: 1, Clusters: 1},
		{Target: "nginx", Clients: 1, Classes: 1, Clusters: 1},
		{Target: TargetRelay, Cache: "linear", Unique: 0.5, Clients: 1, Classes: 2, Clusters: 2},
		{Target: TargetLimit, Unique: 1.5, Clients: 1, Classes: 1, Clusters: 1},
		{Target: TargetTCP, Churn: 10, ChurnDuration: time.Second, Clients: 1, Classes: 1, Clusters: 1},
		{Target: TargetRelay, Delta: true, Churn: 10, ChurnDuration: time.Second, Clients: 1, Classes: 1, Clusters: 1},
		{Target: TargetDirect, Cache: "linear", Churn: 10, ChurnDuration: time.Second, Clients: 1, Classes: 1, Clusters: 1},
		{Target: TargetLimit, Churn: 10, Clients: 1, Classes: 1, Clusters: 1},
	} {
		if _, err := RunFanout(context.Background(), cfg); err == nil {
			t.Errorf("RunFanout(%+v) succeeded, want an error", cfg)
		}
	}
}

// A repeated update delivers every round to every client once (RunFanout
// fails otherwise: a delta client must get exactly the one cluster each
// round changed), and the figures are the rounds' medians.
func TestFanoutRounds(t *testing.T) {
	const clients, classes, clusters, rounds = 12, 2, 20, 4
	for _, tc := range []struct {
		name string
		cfg  FanoutConfig
	}{
		{"relay-sotw", FanoutConfig{Target: TargetRelay}},
		{"relay-delta-upstream-delta", FanoutConfig{Target: TargetRelay, Delta: true, UpstreamDelta: true}},
		{"limit-delta", FanoutConfig{Target: TargetLimit, Delta: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			relay, benchBin := binaries(t)
			var serverLog xdstest.SyncBuffer
			cfg := tc.cfg
			cfg.RelayBin, cfg.BenchBin, cfg.Rounds = relay, benchBin, rounds
			cfg.Clients, cfg.Classes, cfg.Clusters = clients, classes, clusters
			cfg.Timeout, cfg.Log, cfg.ServerStderr = 30*time.Second, t.Logf, &serverLog
			res, err := RunFanout(context.Background(), cfg)
			if err != nil {
				t.Fatalf("%v\nserver log:\n%s", err, serverLog.String())
			}
			if len(res.RoundsCPU) != rounds || len(res.RoundsLast) != rounds {
				t.Fatalf("%d CPU and %d last figures, want one per round (%d)", len(res.RoundsCPU), len(res.RoundsLast), rounds)
			}
			cpu := slices.Clone(res.RoundsCPU)
			slices.Sort(cpu)
			if res.ServerCPU != cpu[(rounds-1)/2] {
				t.Errorf("server CPU %v, want the rounds' median of %v", res.ServerCPU, res.RoundsCPU)
			}
			last := slices.Clone(res.RoundsLast)
			slices.Sort(last)
			if res.Last != last[(rounds-1)/2] {
				t.Errorf("last %v, want the rounds' median of %v", res.Last, res.RoundsLast)
			}
			if len(res.Latencies) != clients {
				t.Errorf("%d latencies, want the first round's, one per client (%d)", len(res.Latencies), clients)
			}
		})
	}
}

// A paced update installs the classes in turn, pace apart, for every
// target: the last class's instant is at least (classes − 1) × pace after
// the start, and each client's time after its own class's instant is
// measured from that class's, not from the end of the update.
func TestFanoutPace(t *testing.T) {
	const clients, classes, clusters, pace = 8, 4, 10, 40 * time.Millisecond
	for _, target := range []string{TargetRelay, TargetLimit, TargetDirect} {
		t.Run(target, func(t *testing.T) {
			relay, benchBin := binaries(t)
			var serverLog xdstest.SyncBuffer
			res, err := RunFanout(context.Background(), FanoutConfig{
				Target: target, RelayBin: relay, BenchBin: benchBin, Clients: clients, Classes: classes, Clusters: clusters,
				Pace: pace, Timeout: 30 * time.Second, Log: t.Logf, ServerStderr: &serverLog,
			})
			if err != nil {
				t.Fatalf("%v\nserver log:\n%s", err, serverLog.String())
			}
			if res.UpstreamSent < (classes-1)*pace {
				t.Errorf("the last class sent %v after the start, want at least %v", res.UpstreamSent, (classes-1)*pace)
			}
			if first := res.Latencies[0]; res.AfterSentP50 <= 0 || res.AfterSentLast <= 0 || res.AfterSentLast > res.Last {
				t.Errorf("after sent: p50 %v, last %v (first receipt %v, last %v): want each client's from its own class's instant", res.AfterSentP50, res.AfterSentLast, first, res.Last)
			}
		})
	}
}
