package upstream

import (
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// servedLog records every response a shard is given, in order.
type servedLog struct {
	mu      sync.Mutex
	served  [][]string        // names of each response
	resps   []*shard.Response // each response
	changed chan struct{}
}

func newServedLog() *servedLog { return &servedLog{changed: make(chan struct{}, 1)} }

func (l *servedLog) ShardChanged(_ *shard.Shard, resp *shard.Response) {
	l.mu.Lock()
	l.served = append(l.served, slices.Clone(resp.Names))
	l.resps = append(l.resps, resp)
	l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

func (l *servedLog) ShardHeartbeat(*shard.Shard, *shard.Heartbeat) {}

// await waits until some response served satisfies ok, and returns every
// response served until then.
func (l *servedLog) await(t *testing.T, what string, ok func([]string) bool) [][]string {
	t.Helper()
	return awaitLogged(t, l, what, func() [][]string { return slices.Clone(l.served) }, ok)
}

// awaitResponse waits until some response served satisfies ok.
func (l *servedLog) awaitResponse(t *testing.T, what string, ok func(*shard.Response) bool) {
	t.Helper()
	awaitLogged(t, l, what, func() []*shard.Response { return slices.Clone(l.resps) }, ok)
}

// awaitLogged waits until an item of l that get returns (under l.mu)
// satisfies ok, and returns the items until then.
func awaitLogged[T any](t *testing.T, l *servedLog, what string, get func() []T, ok func(T) bool) []T {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		l.mu.Lock()
		served := get()
		l.mu.Unlock()
		if slices.ContainsFunc(served, ok) {
			return served
		}
		select {
		case <-l.changed:
		case <-timeout:
			t.Fatalf("%s: never served; served %+v", what, served)
		}
	}
}

// awaitMore waits until more than n responses were served.
func (l *servedLog) awaitMore(t *testing.T, what string, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		l.mu.Lock()
		served := len(l.served)
		l.mu.Unlock()
		if served > n {
			return
		}
		select {
		case <-l.changed:
		case <-timeout:
			t.Fatalf("%s: never served", what)
		}
	}
}

// startCP starts a go-control-plane server of kind holding clusters a, b
// and c, stopped when the test ends.
func startCP(t *testing.T, kind string) *xdstest.ControlPlane {
	t.Helper()
	cp, err := xdstest.StartControlPlane(xdstest.CPOptions{Cache: kind})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	var rs []types.Resource
	for _, n := range []string{"a", "b", "c"} {
		rs = append(rs, xdstest.Resource(xdstype.Cluster.URL, n, 1))
	}
	if err := cp.Set(xdstype.Cluster.URL, rs...); err != nil {
		t.Fatal(err)
	}
	return cp
}

// newCPClass attaches a class to a client of cp counting into m.
func newCPClass(t *testing.T, cp *xdstest.ControlPlane, delta bool, m Metrics) *shard.Class {
	t.Helper()
	c, err := New(Config{Address: cp.Addr, RelayID: "relay-under-test", Delta: delta, Metrics: m,
		Backoff: Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return attachClass(t, c, &corev3.Node{Id: "downstream-1", Cluster: "class-a"})
}

func holds(want ...string) func([]string) bool {
	return func(got []string) bool { return slices.Equal(got, want) }
}

// cdsRequests returns the SotW CDS requests cp received.
func cdsRequests(cp *xdstest.ControlPlane) []*discoverygrpc.DiscoveryRequest {
	sotw, _ := cp.Requests()
	var out []*discoverygrpc.DiscoveryRequest
	for _, r := range sotw {
		if r.GetTypeUrl() == xdstype.Cluster.URL {
			out = append(out, r)
		}
	}
	return out
}

// TestNamesIgnoredFallsBackToWildcard: go-control-plane's snapshot cache
// in ADS mode never answers a request for some of the clusters by name. The
// class stream asks for the type as the wildcard instead, and serves the
// named shards from it: a cluster that exists is served, never as absent;
// one that does not is served as absent once the wildcard's answer came.
func TestNamesIgnoredFallsBackToWildcard(t *testing.T) {
	cp := startCP(t, xdstest.SnapshotADS)
	m := &countingMetrics{}
	class := newCPClass(t, cp, false, m)
	a, x := newServedLog(), newServedLog()
	subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"a"}, false), a)
	subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"x"}, false), x)

	served := a.await(t, "cluster a", holds("a"))
	if !slices.EqualFunc(served, [][]string{{"a"}}, slices.Equal[[]string]) {
		t.Fatalf("shard [a] served %v, want [[a]]: a exists", served)
	}
	x.await(t, "x as absent", holds())
	if got := m.ignoredFor(xdstype.Cluster.URL); got != 1 {
		t.Fatalf("fallbacks counted %d, want 1", got)
	}
	if restarts, _ := m.counts(); restarts != 1 || m.restartsFor(RestartNamesIgnored) != 1 {
		t.Fatalf("%d restarts counted, want 1 for names_ignored", restarts)
	}
	reqs := cdsRequests(cp)
	if last := reqs[len(reqs)-1]; len(last.GetResourceNames()) != 0 {
		t.Fatalf("last CDS request %v, want the legacy wildcard", last)
	}

	// The class keeps the type current from the wildcard: a change of a is
	// served.
	if err := cp.Set(xdstype.Cluster.URL, xdstest.Resource(xdstype.Cluster.URL, "a", 2)); err != nil {
		t.Fatal(err)
	}
	a.awaitMore(t, "a's second generation", len(served))
}

// TestNamesIgnoredSurvivesReconnect: once the upstream ignored names of a
// type, a new stream of the class asks for the type as the wildcard at
// once, without waiting out the grace again.
func TestNamesIgnoredSurvivesReconnect(t *testing.T) {
	cp := startCP(t, xdstest.SnapshotADS)
	m := &countingMetrics{}
	class := newCPClass(t, cp, false, m)
	a := newServedLog()
	subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"a"}, false), a)
	a.await(t, "cluster a", holds("a"))

	cp.Down()
	if err := cp.Set(xdstype.Cluster.URL, xdstest.Resource(xdstype.Cluster.URL, "a", 2)); err != nil {
		t.Fatal(err)
	}
	before := len(cdsRequests(cp))
	if err := cp.Up(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	a.awaitMore(t, "a's second generation", 1)
	for _, r := range cdsRequests(cp)[before:] {
		if len(r.GetResourceNames()) != 0 {
			t.Fatalf("CDS request %v of the new stream names clusters; want the legacy wildcard", r)
		}
	}
	if got := m.ignoredFor(xdstype.Cluster.URL); got != 1 {
		t.Fatalf("fallbacks counted %d, want 1 (the new stream asks for the wildcard at once)", got)
	}
	if restarts, _ := m.counts(); restarts != 1 || m.restartsFor(RestartNamesIgnored) != 1 {
		t.Fatalf("%d restarts counted, want the fallback's alone: the reconnect is a failure", restarts)
	}
}

// TestNamesAnsweredNoFallback: an upstream that answers requests by name
// never makes the class stream fall back, even for a name that does not
// exist, asked after the type was answered (go-control-plane then stays
// silent: only the first request of a stream claims no version, and only
// its silence tells that names are ignored).
func TestNamesAnsweredNoFallback(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache string
		delta bool
	}{
		{"snapshot/sotw", xdstest.Snapshot, false},
		{"linear/sotw", xdstest.Linear, false},
		{"snapshot-ads/delta", xdstest.SnapshotADS, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := startCP(t, tc.cache)
			m := &countingMetrics{}
			class := newCPClass(t, cp, tc.delta, m)
			a, x := newServedLog(), newServedLog()
			subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"a"}, false), a)
			if served := a.await(t, "cluster a", holds("a")); !slices.EqualFunc(served, [][]string{{"a"}}, slices.Equal[[]string]) {
				t.Fatalf("shard [a] served %v, want [[a]]", served)
			}
			// x is asked for on the answered stream, at no version (the class
			// lacks it); it is served as absent once the upstream answers (or
			// after PendingGrace when it stays silent), and no fallback
			// engages: the stream was answered.
			subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"x"}, false), x)
			x.await(t, "x as absent", holds())
			if got := m.ignoredFor(xdstype.Cluster.URL); got != 0 {
				t.Fatalf("fallbacks counted %d, want 0: the upstream answers names", got)
			}
			sotw, delta := cp.Requests()
			for _, r := range sotw {
				if len(r.GetResourceNames()) == 0 {
					t.Fatalf("request %v asks for the wildcard; want names only", r)
				}
			}
			for _, r := range delta {
				if slices.Contains(r.GetResourceNamesSubscribe(), "*") || (r.GetResponseNonce() == "" && len(r.GetResourceNamesSubscribe()) == 0) {
					t.Fatalf("delta request %v asks for the wildcard; want names only", r)
				}
			}
		})
	}
}
