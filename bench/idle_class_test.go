package bench

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/bench/xdstest"
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
			var log xdstest.SyncBuffer
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
			// The class lingers (node_classes.linger): it keeps its shards,
			// unwatched, and its upstream subscriptions.
			waitAdmin(t, relay.Admin+"/debug/shards", "the class's shards to have no stream", func(shards map[string][]struct {
				Shards []struct {
					Streams int `json:"streams"`
				} `json:"shards"`
			}) bool {
				for _, ts := range shards["c0"] {
					for _, sh := range ts.Shards {
						if sh.Streams > 0 {
							return false
						}
					}
				}
				return true
			})
			if err := up.Change(Churn{Pattern: "all"}); err != nil {
				t.Fatal(err)
			}
			if !tc.upstreamDelta {
				// The lingering class keeps its subscriptions, so the change
				// reaches it: wait until it has taken it. (A delta upstream's
				// versions are not the snapshot's: the late clients' wait
				// covers it.)
				up.mu.Lock()
				version := up.configs["c0"].Version()
				up.mu.Unlock()
				waitAdmin(t, relay.Admin+"/debug/upstream", "the relay to take the change", func(st struct {
					Streams []struct {
						Versions map[string]string `json:"versions"`
					} `json:"streams"`
				}) bool {
					return len(st.Streams) == 1 && st.Streams[0].Versions[ListenerType] == version
				})
			}
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

// waitAdmin polls the relay's admin endpoint url (host:port/path), decoded
// into a T, until cond holds; it fails the test after 10 s.
func waitAdmin[T any](t *testing.T, url, what string, cond func(T) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var v T
		resp, err := http.Get("http://" + url)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
		}
		if err == nil && cond(v) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (last error: %v)", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
