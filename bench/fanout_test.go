package bench

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer collects the relay's log for a failure report.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// Smoke run of the fan-out bench (small N, seconds) so the tool never rots:
// the relay binary is built and measured as in a real run.
func TestFanoutSmoke(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		delta, upstreamDelta bool
	}{{"sotw", false, false}, {"delta", true, false}, {"delta-upstream-delta", true, true}, {"sotw-upstream-delta", false, true}} {
		t.Run(tc.name, func(t *testing.T) { fanoutSmoke(t, tc.delta, tc.upstreamDelta) })
	}
}

func fanoutSmoke(t *testing.T, delta, upstreamDelta bool) {
	bin := filepath.Join(t.TempDir(), "xds-relay")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/xds-relay").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var relayLog syncBuffer
	res, err := RunFanout(context.Background(), FanoutConfig{
		RelayBin: bin, Clients: 40, Classes: 2, Clusters: 50, Delta: delta, UpstreamDelta: upstreamDelta, Timeout: 30 * time.Second,
		Log: t.Logf, RelayStderr: &relayLog,
	})
	if err != nil {
		t.Fatalf("%v\nrelay log:\n%s", err, relayLog.b.String())
	}
	if res.ServerRSSAfter <= 0 {
		t.Errorf("no relay memory measured: %+v", res)
	}
	if res.UpstreamStreams != 2 {
		t.Errorf("upstream streams = %d, want one per class (2)", res.UpstreamStreams)
	}
	// Per class: the subscription and one ACK per version (v1, v2); the last
	// ACK may not have reached the control plane's counter yet. Anything
	// that grows with the 40 clients exceeds this.
	if res.UpstreamRequests < 2*2 || res.UpstreamRequests > 2*3 {
		t.Errorf("upstream requests = %d, want 4 to 6 whatever the number of clients", res.UpstreamRequests)
	}
	if res.Last < res.First {
		t.Errorf("implausible result %+v", res)
	}
}

// The direct target (clients on the control plane itself) over both caches.
func TestFanoutDirectSmoke(t *testing.T) {
	for _, c := range []string{"snapshot", "linear"} {
		for _, delta := range []bool{false, true} {
			res, err := RunFanout(context.Background(), FanoutConfig{
				Target: "direct", Cache: c, Clients: 10, Classes: 1, Clusters: 20, Delta: delta, Timeout: 30 * time.Second, Log: t.Logf,
			})
			if err != nil {
				t.Fatalf("cache %s delta %v: %v", c, delta, err)
			}
			if res.UpstreamStreams != 10 {
				t.Errorf("cache %s delta %v: %d streams on the control plane, want one per client (10)", c, delta, res.UpstreamStreams)
			}
		}
	}
}
