package relay

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// ttlBytes is d as an encoded google.protobuf.Duration, as upstreams send it.
func ttlBytes(t testing.TB, d time.Duration) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(durationpb.New(d))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withTTL is r delivered with ttl: same bytes, the TTL part of the hash.
func withTTL(r *shard.Resource, ttl []byte) *shard.Resource {
	return &shard.Resource{Name: r.Name, Any: r.Any, Rare: shard.NewRare(nil, ttl, ""), Hash: dedup.ResourceHashFull(r.Any, ttl, nil)}
}

// ttlEndpoints are the TTL tests' endpoints: a, with a TTL of 30 s, and b,
// without; ttl30 is a's TTL.
func ttlEndpoints(t *testing.T) (a, b *shard.Resource, ttl30 []byte) {
	ttl30 = ttlBytes(t, 30*time.Second)
	return withTTL(resource(t, EndpointType, "a", 1), ttl30), resource(t, EndpointType, "b", 1), ttl30
}

// ttlAware is a node of the harness's class announcing resource-in-SotW.
func ttlAware(id string) *corev3.Node {
	return &corev3.Node{Id: id, Cluster: "class-a", ClientFeatures: []string{FeatureResourceInSotW}}
}

// wrapped decodes a SotW resource that must be a Resource wrapper.
func wrapped(t *testing.T, a *anypb.Any) *discoverygrpc.Resource {
	t.Helper()
	if a.TypeUrl != wire.ResourceTypeURL {
		t.Fatalf("resource of type %q, want a %s wrapper", a.TypeUrl, wire.ResourceTypeURL)
	}
	var r discoverygrpc.Resource
	if err := a.UnmarshalTo(&r); err != nil {
		t.Fatalf("undecodable wrapper: %v", err)
	}
	return &r
}

func wantTTL(t *testing.T, what string, got *durationpb.Duration, want time.Duration) {
	t.Helper()
	if got == nil || got.AsDuration() != want {
		t.Fatalf("%s: ttl %v, want %v", what, got, want)
	}
}

// sameAny asserts a carries exactly the bytes of r.
func sameAny(t *testing.T, a *anypb.Any, r *shard.Resource) {
	t.Helper()
	want := &anypb.Any{}
	if err := proto.Unmarshal(r.Any, want); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(a, want) {
		t.Fatalf("resource %q: wrong content", r.Name)
	}
}

// streamStatus returns the relay's view of typeURL on the stream of node id.
func streamStatus(t *testing.T, h *harness, id, typeURL string) DownstreamTypeStatus {
	t.Helper()
	for _, st := range h.srv.Streams(0) {
		if st.Node != id {
			continue
		}
		for _, ts := range st.Types {
			if ts.TypeURL == typeURL {
				return ts
			}
		}
	}
	t.Fatalf("no stream of %s with state for %s", id, short(typeURL))
	return DownstreamTypeStatus{}
}

func heartbeat(typeURL string, ttl []byte, names ...string) shard.Update {
	u := shard.Update{}
	for _, n := range names {
		u.Heartbeats = append(u.Heartbeats, shard.HeartbeatEntry{Name: n, TTL: ttl})
	}
	return u
}

// TestTTLSotWClientWithFeature: a client announcing resource-in-SotW gets
// TTL'd resources wrapped (the rest plain), heartbeats at the version it
// holds (not counted as pushes), and a TTL change as a new version.
func TestTTLSotWClientWithFeature(t *testing.T) {
	h := newHarness(t)
	a, b, ttl30 := ttlEndpoints(t)
	c := h.ads(t)
	c.node = ttlAware("aware")
	c.subscribe(EndpointType, "a", "b")
	h.class.ApplyUpdate(EndpointType, shard.Update{Resources: []*shard.Resource{a, b}})

	r1 := c.nextUnchecked(recvTimeout)
	if r1.TypeUrl != EndpointType || len(r1.Resources) != 2 {
		t.Fatalf("first response: %s with %d resources, want EDS with 2", r1.TypeUrl, len(r1.Resources))
	}
	for _, x := range r1.Resources {
		if x.TypeUrl == EndpointType {
			sameAny(t, x, b) // no TTL: not wrapped
			continue
		}
		w := wrapped(t, x)
		if w.Name != "a" || w.Resource == nil {
			t.Fatalf("wrapper %v, want a with its resource", w)
		}
		wantTTL(t, "a", w.Ttl, 30*time.Second)
		sameAny(t, w.Resource, a)
	}
	c.ack(r1)
	eventually(t, "the ACK", func() bool { return streamStatus(t, h, "aware", EndpointType).ACKs == 1 })

	h.class.ApplyUpdate(EndpointType, heartbeat(EndpointType, ttl30, "a"))
	hb := c.nextUnchecked(recvTimeout)
	if hb.TypeUrl != EndpointType || hb.VersionInfo != r1.VersionInfo || len(hb.Resources) != 1 {
		t.Fatalf("heartbeat: %s at %q with %d resources, want EDS at %q with 1", hb.TypeUrl, hb.VersionInfo, len(hb.Resources), r1.VersionInfo)
	}
	if w := wrapped(t, hb.Resources[0]); w.Name != "a" || w.Resource != nil {
		t.Fatalf("heartbeat entry %v, want a without resource", w)
	} else {
		wantTTL(t, "heartbeat", w.Ttl, 30*time.Second)
	}
	st := streamStatus(t, h, "aware", EndpointType)
	if st.Pushes != 1 || st.Heartbeats != 1 || st.SentVersion != r1.VersionInfo {
		t.Fatalf("status after the heartbeat: pushes %d heartbeats %d version %q, want 1, 1, %q", st.Pushes, st.Heartbeats, st.SentVersion, r1.VersionInfo)
	}
	c.ack(hb)

	// A heartbeat of a name the shard does not hold reaches nobody.
	h.class.ApplyUpdate(EndpointType, heartbeat(EndpointType, ttl30, "zzz"))
	c.fence()

	// A new TTL is a new version of the resource.
	a2 := withTTL(a, ttlBytes(t, time.Minute))
	h.class.ApplyUpdate(EndpointType, shard.Update{Resources: []*shard.Resource{a2}})
	r3 := c.nextUnchecked(recvTimeout)
	if r3.TypeUrl != EndpointType || r3.VersionInfo == r1.VersionInfo || len(r3.Resources) != 2 {
		t.Fatalf("after the TTL change: %s at %q with %d resources, want a new EDS version with 2", r3.TypeUrl, r3.VersionInfo, len(r3.Resources))
	}
	for _, x := range r3.Resources {
		if x.TypeUrl == wire.ResourceTypeURL {
			wantTTL(t, "a after the change", wrapped(t, x).Ttl, time.Minute)
		}
	}
	if st := streamStatus(t, h, "aware", EndpointType); st.Pushes != 2 || st.Heartbeats != 1 {
		t.Fatalf("status: pushes %d heartbeats %d, want 2 and 1", st.Pushes, st.Heartbeats)
	}
}

// TestTTLSotWClientWithoutFeature: on the same shard, a client without the
// feature gets plain resources and no heartbeats, while the aware one does.
func TestTTLSotWClientWithoutFeature(t *testing.T) {
	h := newHarness(t)
	ttl := ttlBytes(t, 30*time.Second)
	a := withTTL(resource(t, EndpointType, "a", 1), ttl)
	aware := h.ads(t)
	aware.node = ttlAware("aware")
	plain := h.ads(t)
	plain.node = &corev3.Node{Id: "plain", Cluster: "class-a"}
	aware.subscribe(EndpointType, "a")
	plain.subscribe(EndpointType, "a")
	h.class.ApplyUpdate(EndpointType, shard.Update{Resources: []*shard.Resource{a}})

	pr := plain.nextOf(EndpointType) // the envelope check: type_url is the resource type
	wantResources(t, pr, a)
	ar := aware.nextUnchecked(recvTimeout)
	if len(ar.Resources) != 1 || wrapped(t, ar.Resources[0]).Name != "a" || ar.VersionInfo != pr.VersionInfo {
		t.Fatalf("aware client: %v at %q, want a wrapped a at %q", ar.Resources, ar.VersionInfo, pr.VersionInfo)
	}
	if sh := h.shards(EndpointType); len(sh) != 1 || sh[0].Streams != 2 {
		t.Fatalf("shards %+v, want one shard with both streams", sh)
	}
	plain.ack(pr)
	aware.ack(ar)
	eventually(t, "both ACKs", func() bool {
		return streamStatus(t, h, "plain", EndpointType).ACKs == 1 && streamStatus(t, h, "aware", EndpointType).ACKs == 1
	})

	h.class.ApplyUpdate(EndpointType, heartbeat(EndpointType, ttl, "a"))
	if hb := aware.nextUnchecked(recvTimeout); hb.VersionInfo != ar.VersionInfo || wrapped(t, hb.Resources[0]).Resource != nil {
		t.Fatalf("aware client: %v at %q, want a heartbeat at %q", hb.Resources, hb.VersionInfo, ar.VersionInfo)
	}
	// Barriers: nothing was due to the plain client before its fence, nor
	// before a later real push.
	plain.fence()
	a2 := resource(t, EndpointType, "a", 2)
	h.class.ApplyUpdate(EndpointType, shard.Update{Resources: []*shard.Resource{a2}})
	next := plain.nextOf(EndpointType)
	wantResources(t, next, a2)
	if next.VersionInfo == pr.VersionInfo {
		t.Fatalf("plain client: a response at the old version %q", next.VersionInfo)
	}
	if st := streamStatus(t, h, "plain", EndpointType); st.Heartbeats != 0 || st.Pushes != 2 {
		t.Fatalf("plain client status: heartbeats %d pushes %d, want 0 and 2", st.Heartbeats, st.Pushes)
	}
}

// TestTTLDeltaClient: a delta client gets Resource.ttl on the resource, a
// heartbeat as a Resource without resource (name, version, ttl) at the
// system version it holds, not counted as a push; a new TTL as an update.
func TestTTLDeltaClient(t *testing.T) {
	h := newHarness(t)
	a, b, ttl30 := ttlEndpoints(t)
	c := h.deltaADS(t)
	c.subscribe(EndpointType, "a", "b")
	h.class.ApplyUpdate(EndpointType, shard.Update{Resources: []*shard.Resource{a, b}})

	r1 := c.nextOf(EndpointType)
	wantDelta(t, r1, nil, a, b)
	for _, r := range r1.Resources {
		if r.Name == "a" {
			wantTTL(t, "a", r.Ttl, 30*time.Second)
		} else if r.Ttl != nil {
			t.Fatalf("%s carries ttl %v, want none", r.Name, r.Ttl)
		}
	}
	c.ack(r1)
	eventually(t, "the ACK", func() bool { return h.typeStatus(t, EndpointType).ACKs == 1 })

	h.class.ApplyUpdate(EndpointType, heartbeat(EndpointType, ttl30, "a"))
	hb := c.nextUnchecked(recvTimeout)
	if hb.TypeUrl != EndpointType || hb.SystemVersionInfo != r1.SystemVersionInfo || len(hb.Resources) != 1 || len(hb.RemovedResources) != 0 {
		t.Fatalf("heartbeat: %v, want one EDS entry at %q", hb, r1.SystemVersionInfo)
	}
	e := hb.Resources[0]
	if e.Name != "a" || e.Version != a.Version() || e.Resource != nil {
		t.Fatalf("heartbeat entry %v, want a at %q without resource", e, a.Version())
	}
	wantTTL(t, "heartbeat", e.Ttl, 30*time.Second)
	if st := h.typeStatus(t, EndpointType); st.Pushes != 1 || st.Heartbeats != 1 {
		t.Fatalf("status: pushes %d heartbeats %d, want 1 and 1", st.Pushes, st.Heartbeats)
	}
	c.ack(hb)

	a2 := withTTL(a, ttlBytes(t, time.Minute))
	h.class.ApplyUpdate(EndpointType, shard.Update{Resources: []*shard.Resource{a2}})
	r3 := c.nextOf(EndpointType)
	wantDelta(t, r3, nil, a2)
	wantTTL(t, "a after the change", r3.Resources[0].Ttl, time.Minute)
	if a2.Version() == a.Version() {
		t.Fatal("a TTL change kept the resource's version")
	}
	if st := h.typeStatus(t, EndpointType); st.Pushes != 2 || st.Heartbeats != 1 {
		t.Fatalf("status: pushes %d heartbeats %d, want 2 and 1", st.Pushes, st.Heartbeats)
	}
}

// TestTTLReplaceKeepsHeartbeatOnlyResource: a full-state (Cluster) update
// that carries a resource only as a heartbeat keeps it: no new version, no
// removal, just the heartbeat.
func TestTTLReplaceKeepsHeartbeatOnlyResource(t *testing.T) {
	h := newHarness(t)
	ttl := ttlBytes(t, 30*time.Second)
	a := withTTL(resource(t, ClusterType, "a", 1), ttl)
	b := withTTL(resource(t, ClusterType, "b", 1), ttl)
	h.class.ApplyUpdate(ClusterType, shard.Update{Resources: []*shard.Resource{a, b}, Kind: shard.UpdateFull})
	c := h.deltaADS(t)
	c.subscribe(ClusterType, "*")
	r1 := c.ackNext(ClusterType, nil, a, b)
	eventually(t, "the ACK", func() bool { return h.typeStatus(t, ClusterType).ACKs == 1 })
	before := h.shards(ClusterType)[0].Version

	// b as a resource, a only as a heartbeat: the complete state is still a, b.
	u := heartbeat(ClusterType, ttl, "a")
	u.Resources, u.Kind = []*shard.Resource{b}, shard.UpdateFull
	h.class.ApplyUpdate(ClusterType, u)
	hb := c.nextUnchecked(recvTimeout)
	if len(hb.RemovedResources) != 0 || len(hb.Resources) != 1 || hb.Resources[0].Name != "a" || hb.Resources[0].Resource != nil {
		t.Fatalf("got %v, want only the heartbeat of a (no removal)", hb)
	}
	if hb.SystemVersionInfo != r1.SystemVersionInfo {
		t.Fatalf("heartbeat at %q, want the held version %q", hb.SystemVersionInfo, r1.SystemVersionInfo)
	}
	c.ack(hb)
	sh := h.shards(ClusterType)
	if len(sh) != 1 || sh[0].Version != before || sh[0].Resources != 2 {
		t.Fatalf("shard after the update: %+v, want version %q with 2 resources", sh, before)
	}
	for _, ts := range h.class.Status() {
		if ts.TypeURL == ClusterType && ts.Resources != 2 {
			t.Fatalf("class holds %d clusters, want 2", ts.Resources)
		}
	}
	c.fence()
	if st := h.typeStatus(t, ClusterType); st.Pushes != 1 || st.Heartbeats != 1 {
		t.Fatalf("status: pushes %d heartbeats %d, want 1 and 1", st.Pushes, st.Heartbeats)
	}
}

// TestTTLHeartbeatTTLReachesLaterClients: a heartbeat may change a
// resource's TTL (spec "TTL": heartbeats are "lightweight TTL updates"). A
// client that subscribes after it must get the TTL the upstream set last,
// not the one the resource first came with: with the old, shorter TTL it
// would expire the resource before the upstream's next heartbeat.
func TestTTLHeartbeatTTLReachesLaterClients(t *testing.T) {
	h := newHarness(t)
	a := withTTL(resource(t, EndpointType, "a", 1), ttlBytes(t, 5*time.Second))
	h.class.ApplyUpdate(EndpointType, shard.Update{Resources: []*shard.Resource{a}})
	h.class.ApplyUpdate(EndpointType, heartbeat(EndpointType, ttlBytes(t, time.Minute), "a"))

	c := h.ads(t)
	c.node = ttlAware("late")
	c.subscribe(EndpointType, "a")
	r := c.nextUnchecked(recvTimeout)
	if len(r.Resources) != 1 {
		t.Fatalf("got %d resources, want a", len(r.Resources))
	}
	wantTTL(t, "a, for a client subscribing after a heartbeat set its TTL to 1m", wrapped(t, r.Resources[0]).Ttl, time.Minute)
}
