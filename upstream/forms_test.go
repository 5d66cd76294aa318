package upstream

import (
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// countingMetrics counts the upstream events.
type countingMetrics struct {
	NopMetrics
	mu       sync.Mutex
	restarts map[RestartReason]int
	ignored  map[string]int // the names-ignored fallbacks, by type URL
	repeats  int
}

func (m *countingMetrics) Restarted(_ string, r RestartReason) { count(&m.mu, &m.restarts, r) }
func (m *countingMetrics) NamesIgnored(_, typeURL string)      { count(&m.mu, &m.ignored, typeURL) }

// count adds one to (*counts)[k] under mu.
func count[K comparable](mu *sync.Mutex, counts *map[K]int, k K) {
	mu.Lock()
	defer mu.Unlock()
	if *counts == nil {
		*counts = map[K]int{}
	}
	(*counts)[k]++
}

// restartsFor is how many restarts were counted for r.
func (m *countingMetrics) restartsFor(r RestartReason) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.restarts[r]
}

// ignoredFor is how many fallbacks were counted for typeURL.
func (m *countingMetrics) ignoredFor(typeURL string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ignored[typeURL]
}

func (m *countingMetrics) RepeatedResponse(string, string) {
	m.mu.Lock()
	m.repeats++
	m.mu.Unlock()
}

func (m *countingMetrics) counts() (restarts, repeats int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.restarts {
		restarts += n
	}
	return restarts, m.repeats
}

// newFormsClass starts a SotW upstream client counting into m and returns
// the class of node "downstream-1" in "class-a" (no interest yet).
func newFormsClass(t *testing.T, addr string, bo Backoff, m Metrics) *shard.Class {
	t.Helper()
	c, err := New(Config{Address: addr, RelayID: "relay-under-test", Backoff: bo, Metrics: m}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return attachClass(t, c, &corev3.Node{Id: "downstream-1", Cluster: "class-a"})
}

// TestSotWWildcardIsAskedAlone: a wildcard is asked for only as the legacy
// empty list, and alone while names are wanted too (it covers them):
// go-control-plane's snapshot cache answers ["*", "a"] with a alone, and
// the relay would serve that as the full state.
func TestSotWWildcardIsAskedAlone(t *testing.T) {
	srv, addr := startScripted(t)
	class := newFormsClass(t, addr, Backoff{Initial: time.Hour, Max: time.Hour}, NopMetrics{})
	// One client asks for ["*", "a"] itself.
	mixed := subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"*", "a"}, false), nopWatcher{})
	ss := srv.next(t)
	if r := ss.request(t); len(r.GetResourceNames()) != 0 {
		t.Fatalf("first request %v, want the legacy wildcard (no names)", r)
	}
	respondClusters(t, ss, "v1", "n1", "a", "b", "c")
	wantACK(t, ss.request(t), "v1", "n1")
	named := subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"d"}, false), nopWatcher{})
	wild := subscribe(t, class, xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, nopWatcher{})
	ss.quiet(t, 100*time.Millisecond) // the wildcard covers d
	if got := names(wild); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("wildcard shard holds %v, want [a b c]", got)
	}
	if got := names(mixed); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("[* a] shard holds %v, want [a b c]", got)
	}
	if cur := named.Current(); cur == nil || len(cur.Names) != 0 || !cur.KnownAbsent("d") {
		t.Fatalf("[d] shard = %+v, want an empty state with d known absent", cur)
	}
	// The wildcard shards leave: the legacy wildcard cannot be withdrawn
	// (a non-empty list would end it, an empty one means everything).
	class.Unsubscribe(wild, nopWatcher{})
	class.Unsubscribe(mixed, nopWatcher{})
	ss.quiet(t, 100*time.Millisecond)
	respondClusters(t, ss, "v2", "n2", "a", "d")
	wantACK(t, ss.request(t), "v2", "n2")
	if got := names(named); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("[d] shard holds %v after v2, want [d]", got)
	}
}

// TestSotWWildcardAfterNamesRestartsStream: once the stream asked for
// explicit names of a type, the legacy wildcard is no longer expressible on
// it, so a wildcard wanted then restarts the stream at once (no backoff),
// whose first request for the type is the legacy empty list at no version.
// The narrower answer is never taken for the wildcard's full state, and the
// named clients keep their state.
func TestSotWWildcardAfterNamesRestartsStream(t *testing.T) {
	srv, addr := startScripted(t)
	m := &countingMetrics{}
	// An hour's backoff: a restart that backed off would time the test out.
	c, err := New(Config{Address: addr, RelayID: "relay-under-test", Backoff: Backoff{Initial: time.Hour, Max: time.Hour}, Metrics: m}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	class := attachClass(t, c, &corev3.Node{Id: "downstream-1", Cluster: "class-a"})

	named := subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"a"}, false), nopWatcher{})
	ss := srv.next(t)
	if r := ss.request(t); !slices.Equal(r.GetResourceNames(), []string{"a"}) {
		t.Fatalf("first request %v, want CDS [a]", r)
	}
	respondClusters(t, ss, "v1", "n1", "a")
	wantACK(t, ss.request(t), "v1", "n1")

	wild := subscribe(t, class, xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, nopWatcher{})
	again := srv.next(t)
	r := again.request(t)
	if r.GetTypeUrl() != xdstype.Cluster.URL || len(r.GetResourceNames()) != 0 || r.GetVersionInfo() != "" || r.GetResponseNonce() != "" {
		t.Fatalf("new stream's request %v, want a legacy wildcard CDS request at no version", r)
	}
	if r.GetNode().GetId() != "relay-under-test" {
		t.Fatalf("new stream's first request has node %v", r.GetNode())
	}
	if cur := wild.Current(); cur != nil {
		t.Fatalf("wildcard shard served %v before the wildcard was answered", cur.Names)
	}
	if got := names(named); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("[a] shard holds %v across the restart", got)
	}
	respondClusters(t, again, "v1", "m1", "a", "b", "c")
	wantACK(t, again.request(t), "v1", "m1")
	if got := names(wild); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("wildcard shard holds %v, want [a b c]", got)
	}
	if restarts, _ := m.counts(); restarts != 1 || m.restartsFor(RestartWildcard) != 1 {
		t.Fatalf("%d restarts counted, want 1 wildcard restart", restarts)
	}
	if st := c.Status(); st[0].Reconnects != 0 || st[0].State != StateConnected || st[0].Restarts != (RestartCounts{Wildcard: 1}) {
		t.Fatalf("status %+v: a wildcard restart is no failure, counted in restarts", st[0])
	}
	// The wildcard is now held: names joining and leaving are covered by it.
	more := subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"z"}, false), nopWatcher{})
	class.Unsubscribe(more, nopWatcher{})
	again.quiet(t, 100*time.Millisecond)
}

// TestSotWRepeatingUpstreamIsNotAnsweredAtOnce: an upstream answering every
// ACK with the response it just sent (go-control-plane did for ["*"]) must
// not loop with the relay at network speed: after StormRepeats repeats the
// relay defers its ACKs with backoff. Without the guard the relay sends
// thousands of requests in the run below.
func TestSotWRepeatingUpstreamIsNotAnsweredAtOnce(t *testing.T) {
	srv, addr := startScripted(t)
	m := &countingMetrics{}
	class := newFormsClass(t, addr, Backoff{Initial: 100 * time.Millisecond, Max: 400 * time.Millisecond}, m)
	sh := subscribe(t, class, xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, nopWatcher{})
	ss := srv.next(t)

	ab := []*anypb.Any{xdstest.MustAny(t, &clusterv3.Cluster{Name: "a"}), xdstest.MustAny(t, &clusterv3.Cluster{Name: "b"})}
	ba := []*anypb.Any{ab[1], ab[0]}
	stop := make(chan struct{})
	counted := make(chan int)
	go func() { // the storming upstream: it answers every request
		n := 0
		defer func() { counted <- n }()
		for {
			select {
			case <-stop:
				return
			case _, ok := <-ss.reqs:
				if !ok {
					return
				}
				n++
				resp := &discoverygrpc.DiscoveryResponse{VersionInfo: "v1", Nonce: strconv.Itoa(n), TypeUrl: xdstype.Cluster.URL, Resources: ab}
				if n%2 == 0 {
					resp.Resources = ba // the order does not matter
				}
				if ss.st.Send(resp) != nil {
					return
				}
			}
		}
	}()
	time.Sleep(1500 * time.Millisecond) // the bounded run
	close(stop)
	n := <-counted
	t.Logf("%d requests in 1.5 s", n)
	if n > 25 {
		t.Fatalf("the relay sent %d requests in 1.5 s to an upstream answering each ACK with the same response", n)
	}
	if _, repeats := m.counts(); repeats == 0 {
		t.Fatal("no repeated response counted")
	}
	if got := names(sh); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("shard holds %v", got)
	}
}
