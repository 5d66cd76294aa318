package upstream

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// recWatcher records the heartbeats and changes of the shards it watches.
// The class calls it with its lock held: it only appends.
type recWatcher struct {
	mu      sync.Mutex
	beats   []*shard.Heartbeat
	changes int
}

func (w *recWatcher) ShardChanged(*shard.Shard, *shard.Response) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.changes++
}

func (w *recWatcher) ShardHeartbeat(_ *shard.Shard, hb *shard.Heartbeat) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.beats = append(w.beats, hb)
}

func (w *recWatcher) seen() ([]*shard.Heartbeat, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.beats), w.changes
}

// wrap is a SotW resource wrapped in envoy.service.discovery.v3.Resource
// with ttl; inner nil makes it a heartbeat.
func wrap(t *testing.T, name string, inner proto.Message, ttl time.Duration) *anypb.Any {
	t.Helper()
	r := &discoverygrpc.Resource{Name: name, Ttl: durationpb.New(ttl)}
	if inner != nil {
		r.Resource = xdstest.MustAny(t, inner)
	}
	return xdstest.MustAny(t, r)
}

func sendSotW(t *testing.T, ss *scriptedStream, version, nonce string, resources ...*anypb.Any) {
	t.Helper()
	resp := &discoverygrpc.DiscoveryResponse{VersionInfo: version, Nonce: nonce, TypeUrl: xdstype.Cluster.URL, Resources: resources}
	if err := ss.st.Send(resp); err != nil {
		t.Fatal(err)
	}
}

// sendACKed sends a CDS response and requires the relay to ACK it.
func sendACKed(t *testing.T, ss *scriptedStream, version, nonce string, resources ...*anypb.Any) {
	t.Helper()
	sendSotW(t, ss, version, nonce, resources...)
	wantACK(t, ss.request(t), version, nonce)
}

func wantACK(t *testing.T, r *discoverygrpc.DiscoveryRequest, version, nonce string) {
	t.Helper()
	if r.GetErrorDetail() != nil || r.GetResponseNonce() != nonce || r.GetVersionInfo() != version {
		t.Fatalf("request %v, want the ACK of %s at %s", r, nonce, version)
	}
}

// ttlOf decodes a resource's TTL (0 when it has none).
func ttlOf(t *testing.T, r *shard.Resource) time.Duration {
	t.Helper()
	if r.TTL() == nil {
		return 0
	}
	var d durationpb.Duration
	if err := proto.Unmarshal(r.TTL(), &d); err != nil {
		t.Fatalf("%s: undecodable TTL: %v", r.Name, err)
	}
	return d.AsDuration()
}

func wantFeatures(t *testing.T, features []string) {
	t.Helper()
	for _, f := range []string{"xds.config.supports-resource-ttl", "xds.config.supports-resource-in-sotw"} {
		if !slices.Contains(features, f) {
			t.Fatalf("upstream node client_features %v lack %s", features, f)
		}
	}
}

// TestTTLSotWUpstream: wrapped resources are ACKed and held with their TTL;
// a heartbeat-only response is ACKed, changes nothing and reaches the
// shard's watchers; a TTL change is a change; a wrapper naming another
// resource than it carries is NACKed.
func TestTTLSotWUpstream(t *testing.T) {
	srv, addr := startScripted(t)
	_, class, sh := newClient(t, addr, Backoff{Initial: time.Hour, Max: time.Hour})
	rec := &recWatcher{}
	if subscribe(t, class, xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, rec) != sh {
		t.Fatal("a second wildcard CDS subscription got another shard")
	}
	ss := srv.next(t)
	wantFeatures(t, ss.request(t).GetNode().GetClientFeatures())

	sendSotW(t, ss, "v1", "n1",
		wrap(t, "a", &clusterv3.Cluster{Name: "a"}, 30*time.Second),
		wrap(t, "b", &clusterv3.Cluster{Name: "b"}, 10*time.Second))
	wantACK(t, ss.request(t), "v1", "n1")
	cur := sh.Current()
	if cur == nil || !slices.Equal(cur.Names, []string{"a", "b"}) || !cur.HasTTL {
		t.Fatalf("shard holds %v, want [a b] with TTLs", names(sh))
	}
	if ttlOf(t, cur.Resources[0]) != 30*time.Second || ttlOf(t, cur.Resources[1]) != 10*time.Second {
		t.Fatalf("TTLs %v %v, want 30s 10s", ttlOf(t, cur.Resources[0]), ttlOf(t, cur.Resources[1]))
	}
	if r := cur.Resources[0]; r.Hash != dedup.ResourceHashFull(r.Any, r.TTL(), nil) {
		t.Fatal("a's hash does not cover its TTL")
	}
	// Unwrapped: the held Any is the cluster itself.
	var inner anypb.Any
	if err := proto.Unmarshal(cur.Resources[0].Any, &inner); err != nil || inner.TypeUrl != xdstype.Cluster.URL {
		t.Fatalf("held resource is a %q (%v), want the unwrapped cluster", inner.TypeUrl, err)
	}
	_, changesBefore := rec.seen()

	// Heartbeat only, at the same version.
	sendACKed(t, ss, "v1", "n2", wrap(t, "a", nil, 30*time.Second), wrap(t, "b", nil, 10*time.Second))
	if sh.Current() != cur {
		t.Fatalf("a heartbeat changed the shard: %v", names(sh))
	}
	beats, changes := rec.seen()
	if changes != changesBefore || len(beats) != 1 {
		t.Fatalf("watcher saw %d changes and %d heartbeats, want %d and 1", changes, len(beats), changesBefore)
	}
	hb := beats[0]
	if hb.Response != cur || len(hb.Resources) != 2 || hb.Resources[0].Name != "a" || hb.Resources[1].Name != "b" {
		t.Fatalf("heartbeat %+v, want a and b of the current version", hb)
	}
	if !slices.Equal(hb.TTLs[0], cur.Resources[0].TTL()) {
		t.Fatal("heartbeat TTL of a is not the one sent")
	}

	// A wrapper whose name is not its resource's.
	sendSotW(t, ss, "v2", "n3", wrap(t, "not-a", &clusterv3.Cluster{Name: "a"}, 30*time.Second), wrap(t, "b", &clusterv3.Cluster{Name: "b"}, 10*time.Second))
	nack := ss.request(t)
	if nack.GetErrorDetail() == nil || nack.GetResponseNonce() != "n3" || nack.GetVersionInfo() != "v1" {
		t.Fatalf("want a NACK of n3 at v1, got %v", nack)
	}
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, "not-a") {
		t.Fatalf("NACK message %q does not name the mismatched wrapper", msg)
	}
	if sh.Current() != cur {
		t.Fatal("a rejected response reached the shard")
	}

	// A new TTL is a change.
	sendACKed(t, ss, "v3", "n4", wrap(t, "a", &clusterv3.Cluster{Name: "a"}, time.Minute), wrap(t, "b", &clusterv3.Cluster{Name: "b"}, 10*time.Second))
	next := sh.Current()
	if next == cur || next.Version == cur.Version || ttlOf(t, next.Resources[0]) != time.Minute {
		t.Fatalf("after the TTL change: version %q (was %q), a's TTL %v, want a new version with 1m", next.Version, cur.Version, ttlOf(t, next.Resources[0]))
	}
	if len(next.Changed) != 1 || next.Changed[0].Name != "a" || next.Resources[1] != cur.Resources[1] {
		t.Fatalf("changed %d resources, want only a (b untouched)", len(next.Changed))
	}
}

// TestTTLSotWHeartbeatKeepsResourcesWithoutTTL: a control plane heartbeats
// only the resources that have a TTL (go-control-plane's snapshot cache
// does). For Cluster, a heartbeat-only response must not be taken as the
// complete state: the cluster without a TTL must stay.
func TestTTLSotWHeartbeatKeepsResourcesWithoutTTL(t *testing.T) {
	srv, addr := startScripted(t)
	_, _, sh := newClient(t, addr, Backoff{Initial: time.Hour, Max: time.Hour})
	ss := srv.next(t)
	ss.request(t)
	sendACKed(t, ss, "v1", "n1", wrap(t, "a", &clusterv3.Cluster{Name: "a"}, 30*time.Second), xdstest.MustAny(t, &clusterv3.Cluster{Name: "b"}))
	cur := sh.Current()
	if cur == nil || !slices.Equal(cur.Names, []string{"a", "b"}) {
		t.Fatalf("shard holds %v, want [a b]", names(sh))
	}
	sendACKed(t, ss, "v1", "n2", wrap(t, "a", nil, 30*time.Second))
	if got := names(sh); !slices.Equal(got, []string{"a", "b"}) || sh.Current() != cur {
		t.Fatalf("after a heartbeat of a at the same version the shard holds %v (version %q, was %q), want [a b] unchanged",
			got, sh.Current().Version, cur.Version)
	}
}

// deltaTTL is a delta Resource entry of cluster name with ttl.
func deltaTTL(t *testing.T, name, version string, ttl time.Duration) *discoverygrpc.Resource {
	t.Helper()
	r := cluster(t, name, version)
	r.Ttl = durationpb.New(ttl)
	return r
}

// TestTTLDeltaUpstream: Resource.ttl is held; a Resource without resource
// is a heartbeat (ACKed, no change, forwarded to watchers); a new TTL is a
// change.
func TestTTLDeltaUpstream(t *testing.T) {
	rec := &recWatcher{}
	_, _, sh, ds := startDeltaCDS(t, rec)
	first := ds.request(t)
	wantFeatures(t, first.GetNode().GetClientFeatures())

	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, SystemVersionInfo: "s1", Nonce: "n1",
		Resources: []*discoverygrpc.Resource{deltaTTL(t, "a", "1", 30*time.Second), cluster(t, "b", "1")}})
	if ack := ds.request(t); ack.GetResponseNonce() != "n1" || ack.GetErrorDetail() != nil {
		t.Fatalf("want the ACK of n1, got %v", ack)
	}
	cur := sh.Current()
	if cur == nil || !slices.Equal(cur.Names, []string{"a", "b"}) {
		t.Fatalf("shard holds %v, want [a b]", names(sh))
	}
	if ttlOf(t, cur.Resources[0]) != 30*time.Second || cur.Resources[1].TTL() != nil {
		t.Fatalf("TTLs %v %v, want 30s and none", ttlOf(t, cur.Resources[0]), ttlOf(t, cur.Resources[1]))
	}
	_, changesBefore := rec.seen()

	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, SystemVersionInfo: "s1", Nonce: "n2",
		Resources: []*discoverygrpc.Resource{{Name: "a", Version: "1", Ttl: durationpb.New(30 * time.Second)}}})
	if ack := ds.request(t); ack.GetResponseNonce() != "n2" || ack.GetErrorDetail() != nil {
		t.Fatalf("want the ACK of the heartbeat n2, got %v", ack)
	}
	if sh.Current() != cur {
		t.Fatalf("a heartbeat changed the shard: %v", names(sh))
	}
	beats, changes := rec.seen()
	if changes != changesBefore || len(beats) != 1 || len(beats[0].Resources) != 1 || beats[0].Resources[0].Name != "a" || beats[0].Response != cur {
		t.Fatalf("watcher saw %d changes and heartbeats %+v, want %d changes and one heartbeat of a", changes, beats, changesBefore)
	}

	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, SystemVersionInfo: "s2", Nonce: "n3",
		Resources: []*discoverygrpc.Resource{deltaTTL(t, "a", "1", time.Minute)}})
	if ack := ds.request(t); ack.GetResponseNonce() != "n3" || ack.GetErrorDetail() != nil {
		t.Fatalf("want the ACK of n3, got %v", ack)
	}
	next := sh.Current()
	if next == cur || ttlOf(t, next.Resources[0]) != time.Minute || next.Resources[1] != cur.Resources[1] {
		t.Fatalf("after the TTL change: %v, want a new version with a's TTL 1m and b untouched", next.Names)
	}

	// A heartbeat entry without a name is malformed.
	ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, Nonce: "n4",
		Resources: []*discoverygrpc.Resource{{Version: "1", Ttl: durationpb.New(time.Minute)}}})
	if nack := ds.request(t); nack.GetResponseNonce() != "n4" || nack.GetErrorDetail() == nil {
		t.Fatalf("want a NACK of n4, got %v", nack)
	}
}

// TestTTLSotWHeartbeatKeepsAbsenceKnown: a heartbeat-only Cluster response
// (go-control-plane's) refreshes TTLs; it must not make the relay forget
// that its Cluster state is complete. A shard subscribed by name after it
// must still know that a name the upstream does not have is absent (delta
// clients are told it is removed), as one subscribed before it does.
func TestTTLSotWHeartbeatKeepsAbsenceKnown(t *testing.T) {
	srv, addr := startScripted(t)
	_, class, _ := newClient(t, addr, Backoff{Initial: time.Hour, Max: time.Hour})
	ss := srv.next(t)
	ss.request(t)
	sendACKed(t, ss, "v1", "n1", wrap(t, "a", &clusterv3.Cluster{Name: "a"}, 30*time.Second))

	// The union grows to the wildcard plus names: the wildcard covers them,
	// so nothing is sent.
	before := subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"a", "x1"}, false), nopWatcher{})
	if cur := before.Current(); cur == nil || !cur.KnownAbsent("x1") {
		t.Fatalf("before any heartbeat: shard %+v, want x1 known absent", cur)
	}

	sendSotW(t, ss, "v1", "n2", wrap(t, "a", nil, 30*time.Second))
	if ack := ss.request(t); ack.GetResponseNonce() != "n2" || ack.GetErrorDetail() != nil {
		t.Fatalf("want the ACK of the heartbeat n2, got %v", ack)
	}
	after := subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"a", "x2"}, false), nopWatcher{})
	cur := after.Current()
	if cur == nil || !cur.Has("a") {
		t.Fatalf("after the heartbeat: shard %+v, want a", cur)
	}
	if !cur.AbsenceKnown || !cur.KnownAbsent("x2") {
		t.Fatalf("after a heartbeat-only response, a new Cluster shard has AbsenceKnown %v: x2 is not known absent", cur.AbsenceKnown)
	}
}

// TestTTLSotWHeartbeatDoesNotAnswerWildcard: a wildcard newly requested is
// pending until the upstream answers it; a heartbeat-only response (TTL
// refreshes of what the relay already holds) is no answer, so a wildcard
// shard must not be served the partial state the class holds.
func TestTTLSotWHeartbeatDoesNotAnswerWildcard(t *testing.T) {
	srv, addr := startScripted(t)
	class := newSotwClass(t, addr)
	subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"a"}, false), nopWatcher{})
	ss := srv.next(t)
	if r := ss.request(t); !slices.Equal(r.GetResourceNames(), []string{"a"}) {
		t.Fatalf("first request %v, want CDS [a]", r)
	}
	sendACKed(t, ss, "v1", "n1", wrap(t, "a", &clusterv3.Cluster{Name: "a"}, 30*time.Second))

	// The wildcard, wanted after explicit names, is asked for on a new
	// stream in the legacy form.
	wild := subscribe(t, class, xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, nopWatcher{})
	ss = srv.next(t)
	if r := ss.request(t); len(r.GetResourceNames()) != 0 || r.GetVersionInfo() != "" {
		t.Fatalf("request %v, want the legacy wildcard at no version", r)
	}
	if cur := wild.Current(); cur != nil {
		t.Fatalf("wildcard shard served %v before the upstream answered the wildcard", cur.Names)
	}
	heartbeatIsNoAnswer(t, ss, wild, "v1", "b")
}

// heartbeatIsNoAnswer sends a heartbeat-only response for cluster a, which
// must leave sh unserved (it is no answer: serving sh would tell its
// clients that what it lacks was deleted), then an answer at version of a
// and other, which sh must then serve.
func heartbeatIsNoAnswer(t *testing.T, ss *scriptedStream, sh *shard.Shard, version, other string) {
	t.Helper()
	sendACKed(t, ss, "v1", "n2", wrap(t, "a", nil, 30*time.Second))
	if cur := sh.Current(); cur != nil {
		t.Fatalf("a heartbeat-only response answered: the shard serves %v", cur.Names)
	}
	sendACKed(t, ss, version, "n3", wrap(t, "a", &clusterv3.Cluster{Name: "a"}, 30*time.Second), xdstest.MustAny(t, &clusterv3.Cluster{Name: other}))
	if got, want := names(sh), []string{"a", other}; !slices.Equal(got, want) {
		t.Fatalf("shard after the real answer: %v, want %v", got, want)
	}
}

// TestTTLSotWHeartbeatDoesNotResolvePending: a Cluster name newly asked
// for is pending until the upstream answers (shard.PendingGrace); a
// heartbeat-only response is no answer, so the shard needing it must not be
// served without it (telling a client that holds it that it was deleted).
func TestTTLSotWHeartbeatDoesNotResolvePending(t *testing.T) {
	srv, addr := startScripted(t)
	class := newSotwClass(t, addr)
	subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"a"}, false), nopWatcher{})
	ss := srv.next(t)
	ss.request(t)
	sendACKed(t, ss, "v1", "n1", wrap(t, "a", &clusterv3.Cluster{Name: "a"}, 30*time.Second))

	both := subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"a", "c"}, false), nopWatcher{})
	if r := ss.request(t); !slices.Equal(r.GetResourceNames(), []string{"a", "c"}) {
		t.Fatalf("request %v, want CDS [a c]", r)
	}
	heartbeatIsNoAnswer(t, ss, both, "v2", "c")
}

// newSotwClass starts a SotW upstream client and returns a class with no
// interest yet (newClient's subscribes a wildcard).
func newSotwClass(t *testing.T, addr string) *shard.Class {
	t.Helper()
	c, err := New(Config{Address: addr, RelayID: "relay-under-test", Backoff: Backoff{Initial: time.Hour, Max: time.Hour}}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return attachClass(t, c, &corev3.Node{Id: "downstream-1", Cluster: "class-a"})
}
