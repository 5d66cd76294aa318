package relay

import (
	"context"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/drop"
	"github.com/xds-relay/xds-relay/shard/wire"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// dropRig drives streams by hand (no goroutines: each test says when a
// request is handled and when the writer runs) over a server counting drops.
type dropRig struct {
	t     *testing.T
	srv   *Server
	class *shard.Class
	node  *corev3.Node
}

func newDropRig(t *testing.T) *dropRig {
	srv, class, node := fuzzServer(false, false)
	srv.drops = &drop.Counters{}
	srv.opts.MaxCollapses = -1 // a collapse is counted, the client never disconnected
	return &dropRig{t: t, srv: srv, class: class, node: node}
}

func (r *dropRig) sotw() (*sotwStream, *fuzzTransport[*request]) {
	tr := &fuzzTransport[*request]{ctx: context.Background(), fuzzSent: &fuzzSent{}}
	return newSotWStream(r.srv, tr, "", variantSotWADS), tr
}

func (r *dropRig) delta() (*deltaStream, *fuzzTransport[*deltaRequest]) {
	tr := &fuzzTransport[*deltaRequest]{ctx: context.Background(), fuzzSent: &fuzzSent{}}
	return newDeltaStream(r.srv, tr, "", variantDeltaADS), tr
}

// apply sets resource "a" of typeURL to version v (Listener and Cluster:
// the complete state).
func (r *dropRig) apply(typeURL string, v int) {
	r.class.Apply(typeURL, []*shard.Resource{resource(r.t, typeURL, "a", v)}, xdstype.FullState(typeURL))
}

// sotwInSync returns a SotW ADS stream subscribed to every Cluster, in
// sync with Cluster "a" at version 0.
func (r *dropRig) sotwInSync() (*sotwStream, *fuzzTransport[*request]) {
	st, tr := r.sotw()
	inSync(r, &st.stream, tr, &request{Node: r.node, TypeUrl: ClusterType})
	return st, tr
}

// deltaInSync is sotwInSync for a delta stream.
func (r *dropRig) deltaInSync() (*deltaStream, *fuzzTransport[*deltaRequest]) {
	st, tr := r.delta()
	inSync(r, &st.stream, tr, &deltaRequest{Node: r.node, TypeUrl: ClusterType})
	return st, tr
}

// inSync has st send first (every Cluster) once Cluster "a" is at version
// 0, and writes the answer.
func inSync[S perType, Req any](r *dropRig, st *stream[S, Req], tr *fuzzTransport[Req], first Req) {
	r.t.Helper()
	r.apply(ClusterType, 0)
	r.ok(st.proto.handle(first))
	if n := write(r, st, tr); n != 1 {
		r.t.Fatalf("%d initial responses, want 1", n)
	}
}

func (r *dropRig) ok(err error) {
	r.t.Helper()
	if err != nil {
		r.t.Fatal(err)
	}
}

// write runs the writer once and returns how many messages it sent.
func write[S perType, Req any](r *dropRig, st *stream[S, Req], tr *fuzzTransport[Req]) int {
	r.t.Helper()
	r.ok(st.writeQueued())
	return len(tr.take())
}

// dropped runs the writer, which must send nothing, and checks that the
// stream counted n drops of reason, and nothing else.
func dropped[S perType, Req any](r *dropRig, st *stream[S, Req], tr *fuzzTransport[Req], reason drop.Reason, n uint64) {
	r.t.Helper()
	if sent := write(r, st, tr); sent != 0 {
		r.t.Fatalf("%d messages sent, want none (%s)", sent, reason)
	}
	r.want(map[drop.Reason]uint64{reason: n})
}

// want checks every drop counter: the reasons in want counted that many
// times, every other reason never.
func (r *dropRig) want(want map[drop.Reason]uint64) {
	r.t.Helper()
	for _, c := range r.srv.drops.Snapshot() {
		if c.N != want[c.Reason] {
			r.t.Errorf("%s drops = %d, want %d", c.Reason, c.N, want[c.Reason])
		}
	}
}

// nonce is the nonce of the last response of typeURL on st, as a client
// echoes it.
func nonce[S perType, Req any](st *stream[S, Req], typeURL string) string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return wire.NonceString(st.types.at(typeURL).common().nonce)
}

// A response queued and not yet written is superseded by the next one of
// its type: the client gets the latest only.
func TestDropSuperseded(t *testing.T) {
	r := newDropRig(t)
	st, tr := r.sotwInSync()
	r.apply(ClusterType, 1)
	r.apply(ClusterType, 2)
	if n := write(r, &st.stream, tr); n != 1 {
		t.Fatalf("%d responses after two updates, want 1 (the latest)", n)
	}
	r.want(map[drop.Reason]uint64{drop.Superseded: 1})
}

// A queue past maxPending collapses to one entry per type; every entry it
// drops is counted.
func TestDropCollapsed(t *testing.T) {
	r := newDropRig(t)
	st, tr := r.sotw()
	r.ok(st.handle(&request{Node: r.node, TypeUrl: ClusterType}))
	r.ok(st.handle(&request{TypeUrl: EndpointType}))
	write(r, &st.stream, tr)
	// Updates alternate between the types, so none supersedes another.
	for v := 0; st.queue.collapses == 0; v++ {
		r.apply([]string{ClusterType, EndpointType}[v%2], v)
	}
	if n := write(r, &st.stream, tr); n != 2 {
		t.Fatalf("%d responses after the collapse, want 2 (one per type)", n)
	}
	r.want(map[drop.Reason]uint64{drop.Collapsed: maxPending + 1 - 2})
}

// A response queued for a shard the client has left is not written.
func TestDropUnsubscribed(t *testing.T) {
	r := newDropRig(t)
	r.apply(EndpointType, 0)
	st, tr := r.sotw()
	r.ok(st.handle(&request{Node: r.node, TypeUrl: EndpointType, ResourceNames: []string{"a"}}))
	write(r, &st.stream, tr)
	r.apply(EndpointType, 1) // queued
	// The client now asks for nothing of the type.
	r.ok(st.handle(&request{TypeUrl: EndpointType, ResponseNonce: nonce(&st.stream, EndpointType)}))
	dropped(r, &st.stream, tr, drop.Unsubscribed, 1)
}

// A client reconnecting with the version it holds is not sent it again.
func TestDropAlreadyHeld(t *testing.T) {
	r := newDropRig(t)
	first, _ := r.sotwInSync()
	held := first.types.at(ClusterType).sentVersion

	again, tr2 := r.sotw()
	r.ok(again.handle(&request{Node: r.node, TypeUrl: ClusterType, VersionInfo: held}))
	dropped(r, &again.stream, tr2, drop.AlreadyHeld, 1)
}

// A delta client in sync is not sent the version it holds again.
func TestDropAlreadyHeldDelta(t *testing.T) {
	r := newDropRig(t)
	st, tr := r.deltaInSync()
	d := st.types.at(ClusterType)
	st.mu.Lock()
	st.pushLocked(d, d.shard, d.shard.Current(), false)
	st.mu.Unlock()
	dropped(r, &st.stream, tr, drop.AlreadyHeld, 1)
}

// A delta response that would carry no resource and no removal is not
// sent: here, to a client reconnecting with what exists.
func TestDropEmptyResponse(t *testing.T) {
	r := newDropRig(t)
	a := resource(t, EndpointType, "a", 0)
	r.class.Apply(EndpointType, []*shard.Resource{a}, false)
	st, tr := r.delta()
	r.ok(st.handle(&deltaRequest{Node: r.node, TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"},
		InitialResourceVersions: map[string]string{"a": a.Version()}}))
	dropped(r, &st.stream, tr, drop.EmptyResponse, 1)
}

// A TTL heartbeat is not sent to a client that cannot hold TTLs (it did
// not announce resource-in-SotW).
func TestDropHeartbeatNotHeld(t *testing.T) {
	r := newDropRig(t)
	ttl := ttlBytes(t, 30*time.Second)
	r.class.ApplyUpdate(EndpointType, shard.Update{Resources: []*shard.Resource{withTTL(resource(t, EndpointType, "a", 0), ttl)}})
	st, tr := r.sotw()
	r.ok(st.handle(&request{Node: r.node, TypeUrl: EndpointType, ResourceNames: []string{"a"}}))
	write(r, &st.stream, tr)
	r.class.ApplyUpdate(EndpointType, heartbeat(EndpointType, ttl, "a"))
	dropped(r, &st.stream, tr, drop.HeartbeatNotHeld, 1)
}

// What is queued when a stream ends is counted and never written.
func TestDropStreamEnded(t *testing.T) {
	r := newDropRig(t)
	st, tr := r.sotwInSync()
	r.apply(ClusterType, 1) // queued
	st.release()
	dropped(r, &st.stream, tr, drop.StreamEnded, 1)
}

// A request answering an older response than the type's latest is stale:
// SotW ignores it, delta ignores its ACK; both count it.
func TestDropStaleNonce(t *testing.T) {
	r := newDropRig(t)
	st, tr := r.sotwInSync()
	ds, dtr := r.deltaInSync()
	old, dold := nonce(&st.stream, ClusterType), nonce(&ds.stream, ClusterType)
	r.apply(ClusterType, 1)
	write(r, &st.stream, tr)
	write(r, &ds.stream, dtr)

	r.ok(st.handle(&request{TypeUrl: ClusterType, ResponseNonce: old}))
	r.ok(ds.handle(&deltaRequest{TypeUrl: ClusterType, ResponseNonce: dold}))
	if acks := st.types.at(ClusterType).acks + ds.types.at(ClusterType).acks; acks != 0 {
		t.Fatalf("%d stale ACKs taken, want none", acks)
	}
	r.want(map[drop.Reason]uint64{drop.StaleNonce: 2})
}
