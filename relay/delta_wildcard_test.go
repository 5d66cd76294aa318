package relay

import (
	"fmt"
	"slices"
	"testing"

	"github.com/xds-relay/xds-relay/shard"
)

// manyClusters returns n clusters c000... at version v, except those in
// over, which are at the version given there.
func manyClusters(t *testing.T, n, v int, over map[string]int) []*shard.Resource {
	out := make([]*shard.Resource, 0, n)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("c%03d", i)
		ver := v
		if o, ok := over[name]; ok {
			ver = o
		}
		out = append(out, resource(t, ClusterType, name, ver))
	}
	return out
}

// A wildcard subscription (legacy empty first request, or "*") gets every
// resource; then only what changes: one changed resource among 100 is sent
// alone, a deleted one is reported removed, identical content sends nothing.
func TestDeltaWildcard(t *testing.T) {
	for _, form := range []struct {
		name string
		sub  []string
	}{{"legacy", nil}, {"explicit", []string{"*"}}} {
		t.Run(form.name, func(t *testing.T) {
			h := newHarness(t)
			all := manyClusters(t, 100, 1, nil)
			h.apply(ClusterType, true, all...)

			c := h.deltaADS(t)
			c.subscribe(ClusterType, form.sub...)
			r1 := c.ackNext(ClusterType, nil, all...)
			c.fence()

			changed := manyClusters(t, 100, 1, map[string]int{"c042": 2})
			h.apply(ClusterType, true, changed...)
			r2 := c.nextOf(ClusterType)
			wantDelta(t, r2, nil, changed[42])
			if r2.SystemVersionInfo == r1.SystemVersionInfo {
				t.Fatalf("system_version_info %q kept after a change", r2.SystemVersionInfo)
			}
			c.ack(r2)

			deleted := slices.Delete(slices.Clone(changed), 7, 8) // c007
			h.apply(ClusterType, true, deleted...)
			c.ackNext(ClusterType, []string{"c007"})

			// The same bytes again, as fresh Resource values: nothing to send.
			h.apply(ClusterType, true, slices.Delete(manyClusters(t, 100, 1, map[string]int{"c042": 2}), 7, 8)...)
			c.fence()
			c.expectNothing(quietWindow)
		})
	}
}

// A wildcard added to a stream that already holds, by name, everything
// the wildcard covers is answered all the same, with nothing in it: the
// answer is what tells the client (a relay below this one, waiting for its
// upstream's word on the wildcard) that its state is complete. Found by the
// conformance engine (testdata/chain-delta-wildcard-after-names.json): a
// chain of delta relays left such a wildcard unanswered.
func TestDeltaWildcardAfterNamesIsAnswered(t *testing.T) {
	h := newHarness(t)
	b := h.put(t, ClusterType, true, "b", 1)
	c := h.deltaADS(t)
	c.subscribe(ClusterType, "a", "b")
	r := c.nextOf(ClusterType)
	wantDelta(t, r, []string{"a"}, b) // a does not exist

	c.ack(r)
	c.subscribe(ClusterType, "*")
	r = c.nextOf(ClusterType)
	wantDelta(t, r, nil)
	c.ack(r)
	c.fence() // answered once: nothing more is due
}

// The four-step incremental example of the spec ("How the client specifies
// what resources to return"), on CDS.
func TestDeltaSpecExample(t *testing.T) {
	h := newHarness(t)
	cl := func(name string, v int) *shard.Resource { return resource(t, ClusterType, name, v) }
	h.apply(ClusterType, true, cl("A", 1), cl("B", 1), cl("C", 1))
	c := h.deltaADS(t)

	// 1. resource_names_subscribe unset: a subscription to "*".
	c.subscribe(ClusterType)
	r := c.ackNext(ClusterType, nil, cl("A", 1), cl("B", 1), cl("C", 1))

	// 2. Subscribe to A: the wildcard continues, A is added, and A is sent
	// again although the client has it.
	c.subscribe(ClusterType, "A")
	r = c.nextOf(ClusterType)
	wantDelta(t, r, nil, cl("A", 1))
	c.ack(r)
	if ts := h.typeStatus(t, ClusterType); !ts.Wildcard || !slices.Equal(ts.Names, []string{"A"}) {
		t.Fatalf("after step 2: wildcard=%v names=%v, want true [A]", ts.Wildcard, ts.Names)
	}
	h.apply(ClusterType, true, cl("A", 1), cl("B", 2), cl("C", 1))
	r = c.nextOf(ClusterType) // B still comes through the wildcard
	wantDelta(t, r, nil, cl("B", 2))
	c.ack(r)

	// 3. Unsubscribe "*": A stays. Nothing is sent for the unsubscription
	// (B and C are not reported removed), and only A is pushed afterwards.
	c.unsubscribe(ClusterType, "*")
	c.fence()
	h.apply(ClusterType, true, cl("A", 1), cl("B", 3), cl("C", 1))
	h.apply(ClusterType, true, cl("A", 1), cl("B", 3)) // C deleted
	c.fence()
	h.apply(ClusterType, true, cl("A", 2), cl("B", 3))
	r = c.nextOf(ClusterType)
	wantDelta(t, r, nil, cl("A", 2))
	c.ack(r)
	if ts := h.typeStatus(t, ClusterType); ts.Wildcard || !slices.Equal(ts.Names, []string{"A"}) {
		t.Fatalf("after step 3: wildcard=%v names=%v, want false [A]", ts.Wildcard, ts.Names)
	}

	// 4. Unsubscribe A: subscribed to nothing, which is not a wildcard.
	c.unsubscribe(ClusterType, "A")
	c.fence()
	h.apply(ClusterType, true, cl("A", 3), cl("B", 3), cl("D", 1))
	c.fence()
	if ts := h.typeStatus(t, ClusterType); ts.Wildcard || len(ts.Names) != 0 {
		t.Fatalf("after step 4: wildcard=%v names=%v, want false []", ts.Wildcard, ts.Names)
	}
	if s := h.shards(ClusterType); len(s) != 0 {
		t.Fatalf("CDS shards %+v after unsubscribing everything, want none", s)
	}

	// Subscribing again works as at first.
	c.subscribe(ClusterType, "D")
	wantDelta(t, c.nextOf(ClusterType), nil, cl("D", 1))
	c.fence()
}

// The spec's exception to "unsubscribing needs no answer": a client with
// the wildcard and an explicit name that unsubscribes the name must be told
// whether the wildcard still covers it: the resource if it does, its removal
// if it does not.
func TestDeltaWildcardUnsubscribeException(t *testing.T) {
	h := newHarness(t)
	a1, b1 := resource(t, ClusterType, "A", 1), resource(t, ClusterType, "B", 1)
	h.apply(ClusterType, true, a1, b1)
	c := h.deltaADS(t)
	c.subscribe(ClusterType, "*")
	c.ackNext(ClusterType, nil, a1, b1)

	t.Run("covered", func(t *testing.T) {
		c.subscribe(ClusterType, "A")
		wantDelta(t, c.nextOf(ClusterType), nil, a1)
		c.unsubscribe(ClusterType, "A")
		c.ackNext(ClusterType, nil, a1)
		c.fence()
		// Still covered by the wildcard: pushed.
		a2 := resource(t, ClusterType, "A", 2)
		h.apply(ClusterType, true, a2, b1)
		wantDelta(t, c.nextOf(ClusterType), nil, a2)
		a1 = a2
	})

	t.Run("not covered", func(t *testing.T) {
		// X does not exist (the source is authoritative): told at once.
		c.subscribe(ClusterType, "X")
		wantDelta(t, c.nextOf(ClusterType), []string{"X"})
		c.unsubscribe(ClusterType, "X")
		c.ackNext(ClusterType, []string{"X"})
		c.fence()
		// The wildcard still gets what appears, X included.
		x := resource(t, ClusterType, "X", 1)
		h.apply(ClusterType, true, a1, b1, x)
		wantDelta(t, c.nextOf(ClusterType), nil, x)
	})
}

// The exception's answer waits for the shard's: on a new stream whose shard
// has no upstream answer yet, the relay does not know whether the name
// unsubscribed exists. Told from the empty state, a reconnecting client
// would hear that A, which it declared and which exists, was removed, and
// get it again a moment later once the upstream answers.
func TestDeltaWildcardUnsubscribeWaitsForAnswer(t *testing.T) {
	h := newHarness(t)
	a, b := resource(t, ClusterType, "A", 1), resource(t, ClusterType, "B", 1)
	c := h.deltaADS(t)
	c.send(&deltaRequest{TypeUrl: ClusterType, ResourceNamesSubscribe: []string{"*", "A"},
		InitialResourceVersions: map[string]string{"A": a.Version(), "B": b.Version()}})
	c.unsubscribe(ClusterType, "A")
	c.fence() // nothing is known of the type yet: nothing to say

	h.apply(ClusterType, true, a, b)
	// A is still covered by the wildcard: sent (the client dropped it with
	// the unsubscription); B is held at its version.
	c.ackNext(ClusterType, nil, a)
	c.fence()
}
