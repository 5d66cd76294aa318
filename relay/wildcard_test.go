package relay

import (
	"testing"

	"github.com/xds-relay/xds-relay/shard"
)

func clusters(t *testing.T, v int, names ...string) []*shard.Resource {
	out := make([]*shard.Resource, 0, len(names))
	for _, n := range names {
		out = append(out, resource(t, ClusterType, n, v))
	}
	return out
}

// applyClusters gives h's class exactly the clusters named, at version v,
// and returns them.
func (h *harness) applyClusters(t *testing.T, v int, names ...string) []*shard.Resource {
	rs := clusters(t, v, names...)
	h.apply(ClusterType, true, rs...)
	return rs
}

// Legacy (empty), explicit ("*") and mixed ("*" plus a name) wildcards all
// get every cluster, and keep getting them.
func TestWildcardForms(t *testing.T) {
	h := newHarness(t)
	abc := h.applyClusters(t, 1, "A", "B", "C")

	forms := [][]string{nil, {"*"}, {"*", "A"}, {"*", "X"}}
	cs := make([]*client, len(forms))
	for i, names := range forms {
		cs[i] = h.ads(t)
		cs[i].subscribe(ClusterType, names...)
		r := cs[i].nextOf(ClusterType)
		wantResources(t, r, abc...)
		cs[i].ack(r) // an ACK with empty names keeps the legacy wildcard
		cs[i].fence()
	}
	d := h.put(t, ClusterType, false, "D", 1)
	for i := range cs {
		wantResources(t, cs[i].nextOf(ClusterType), append(abc, d)...)
	}
	x := h.put(t, ClusterType, false, "X", 1)
	for i := range cs {
		wantResources(t, cs[i].nextOf(ClusterType), append(abc, d, x)...)
	}

	// Legacy wildcard on a per-type service, type_url left empty.
	l := h.put(t, ListenerType, true, "L", 1)
	lc := h.perType(t, ListenerType)
	lc.send(&request{Node: h.node})
	wantResources(t, lc.nextOf(ListenerType), l)
}

// Nothing is sent before the class has data for the type; then the first
// answer is sent even when there is nothing: for SotW, the full state of a
// Listener or Cluster subscription; for delta, the answer to a wildcard (it
// tells the client its empty state is complete).
func TestFirstResponseWaitsForData(t *testing.T) {
	for _, p := range protocols {
		for _, typeURL := range []string{ClusterType, ListenerType} {
			t.Run(p.name+"/"+short(typeURL), func(t *testing.T) {
				h := newHarness(t)
				c := p.ads(h, t)
				c.subscribe(typeURL)
				c.fence()
				h.apply(typeURL, true)
				c.wantNextACK(typeURL)
				a := h.put(t, typeURL, true, "A", 1)
				c.wantNext(typeURL, a)
			})
		}
	}
}

// The four-step SotW example of the spec ("How the client specifies what
// resources to return"), on CDS.
func TestSotWWildcardExample(t *testing.T) {
	h := newHarness(t)
	abc := h.applyClusters(t, 1, "A", "B", "C")
	c := h.ads(t)

	// 1. resource_names unset: wildcard.
	c.subscribe(ClusterType)
	c.ackNext(ClusterType, abc...)

	// 2. ["*", "A"]: wildcard continues, A newly requested and resent.
	c.subscribe(ClusterType, "*", "A")
	c.ackNext(ClusterType, abc...)

	// 3. ["A"]: the wildcard is gone; only A is of interest.
	c.subscribe(ClusterType, "A")
	c.fence()
	h.apply(ClusterType, false, resource(t, ClusterType, "B", 2))
	c.fence() // B's change is not pushed
	a2 := h.put(t, ClusterType, false, "A", 2)
	c.ackNext(ClusterType, a2) // full state of the subscription: A alone

	// 4. unset again: unsubscribes from everything; not a wildcard any more.
	c.subscribe(ClusterType)
	c.fence()
	h.apply(ClusterType, false, resource(t, ClusterType, "A", 3))
	h.applyClusters(t, 4, "A", "B", "C", "D")
	h.apply(ClusterType, true)
	c.fence()
	c.expectNothing(quietWindow)
	if ts := h.typeStatus(t, ClusterType); ts.Wildcard || len(ts.Names) != 0 {
		t.Fatalf("after unsubscribing: wildcard=%v names=%v", ts.Wildcard, ts.Names)
	}
}

// Listener and Cluster responses carry the full state: every subscribed
// resource on any change, absence meaning deletion, empty meaning none.
func TestFullState(t *testing.T) {
	t.Run("CDS wildcard", func(t *testing.T) {
		h := newHarness(t)
		a, b, cc := resource(t, ClusterType, "A", 1), resource(t, ClusterType, "B", 1), resource(t, ClusterType, "C", 1)
		h.apply(ClusterType, true, a, b, cc)
		c := h.ads(t)
		c.subscribe(ClusterType)
		c.ackNext(ClusterType, a, b, cc)

		b2 := h.put(t, ClusterType, false, "B", 2)
		c.ackNext(ClusterType, a, b2, cc)

		h.apply(ClusterType, true, a, b2) // C deleted
		r := c.ackNext(ClusterType, a, b2)

		h.apply(ClusterType, true) // all deleted
		empty := c.nextOf(ClusterType)
		wantResources(t, empty)
		if empty.VersionInfo == r.VersionInfo {
			t.Fatalf("empty state kept version %q", r.VersionInfo)
		}
		c.ack(empty)

		h.apply(ClusterType, true, a)
		wantResources(t, c.nextOf(ClusterType), a)
	})
	t.Run("LDS names", func(t *testing.T) {
		h := newHarness(t)
		l1, l2 := resource(t, ListenerType, "L1", 1), resource(t, ListenerType, "L2", 1)
		h.apply(ListenerType, true, l1, l2, resource(t, ListenerType, "L3", 1))
		c := h.perType(t, ListenerType)
		c.subscribe(ListenerType, "L1", "L2")
		c.ackNext(ListenerType, l1, l2)

		l1b := h.put(t, ListenerType, false, "L1", 2)
		c.ackNext(ListenerType, l1b, l2)

		h.apply(ListenerType, true, l1b, resource(t, ListenerType, "L3", 1)) // L2 deleted
		c.ackNext(ListenerType, l1b)

		h.apply(ListenerType, true, resource(t, ListenerType, "L3", 1)) // L1 deleted
		wantResources(t, c.nextOf(ListenerType))
	})
}

// A new stream whose wildcard CDS request carries the current version gets
// nothing until the next change; with another version it gets the state; a
// subscription naming resources is always answered.
func TestReconnectSameVersion(t *testing.T) {
	h := newHarness(t)
	abc := h.applyClusters(t, 1, "A", "B", "C")
	first := h.ads(t)
	first.subscribe(ClusterType)
	v := first.nextOf(ClusterType).VersionInfo

	for _, names := range [][]string{nil, {"*"}} {
		same := h.ads(t)
		same.send(&request{Node: h.node, TypeUrl: ClusterType, VersionInfo: v, ResourceNames: names})
		same.fence()
		same.expectNothing(quietWindow)
	}

	other := h.ads(t)
	other.send(&request{Node: h.node, TypeUrl: ClusterType, VersionInfo: "some-other-version"})
	wantResources(t, other.nextOf(ClusterType), abc...)

	named := h.ads(t)
	named.send(&request{Node: h.node, TypeUrl: ClusterType, VersionInfo: v, ResourceNames: []string{"*", "A"}})
	wantResources(t, named.nextOf(ClusterType), abc...)

	// The quiet stream is subscribed all the same: a change reaches it.
	same := h.ads(t)
	same.send(&request{Node: h.node, TypeUrl: ClusterType, VersionInfo: v})
	same.fence()
	d := h.put(t, ClusterType, false, "D", 1)
	wantResources(t, same.nextOf(ClusterType), append(abc, d)...)
}

// A real reconnect: the client's only stream ends, then it comes back with
// the version it holds. The class still holds A, B, C (nothing was deleted
// upstream), so the relay must either stay quiet or send A, B, C; and a later
// upstream change must be pushed on top of A, B, C.
func TestReconnectAfterLastStreamClosed(t *testing.T) {
	h := newHarness(t)
	abc := h.applyClusters(t, 1, "A", "B", "C")
	first := h.ads(t)
	first.subscribe(ClusterType)
	r := first.nextOf(ClusterType)
	first.ack(r)
	first.fence()
	first.close()
	eventually(t, "the first stream's shards released", func() bool { return len(h.shards(ClusterType)) == 0 })

	again := h.ads(t)
	again.send(&request{Node: h.node, TypeUrl: ClusterType, VersionInfo: r.VersionInfo})
	eventually(t, "the new stream's shard", func() bool {
		s := h.shards(ClusterType)
		return len(s) == 1 && s[0].Streams == 1
	})
	d := resource(t, ClusterType, "D", 1)
	h.apply(ClusterType, false, d) // barrier: the next push
	got := again.nextOf(ClusterType)
	if len(got.Resources) == 3 {
		wantResources(t, got, abc...) // the state resent: allowed
		got = again.nextOf(ClusterType)
	}
	if len(got.Resources) != 4 {
		t.Fatalf("reconnected client got CDS %v (version %s), want [A B C] untouched and then [A B C D]: "+
			"an incomplete full-state response deletes clusters on the client", names(t, got), got.VersionInfo)
	}
	wantResources(t, got, append(abc, d)...)
}
