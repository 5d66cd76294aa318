package relay

import (
	"testing"

	"github.com/xds-relay/xds-relay/shard"
)

// Newly requested names that exist are sent even though nothing changed.
func TestNewlyRequestedNamesResent(t *testing.T) {
	for _, typeURL := range []string{EndpointType, ClusterType} {
		t.Run(short(typeURL), func(t *testing.T) {
			h := newHarness(t)
			a, b := resource(t, typeURL, "A", 1), resource(t, typeURL, "B", 1)
			h.apply(typeURL, true, a, b)

			c := h.ads(t)
			c.subscribe(typeURL, "A")
			c.ackNext(typeURL, a)

			c.subscribe(typeURL, "A", "B")
			c.ackNext(typeURL, a, b)

			// Dropping B and asking again delivers B again: the client forgot
			// it. The relay may have dropped B from the class when nobody
			// wanted it, in which case its upstream, asked for B again, resends
			// it (modelled here); either way B arrives exactly once.
			c.subscribe(typeURL, "A")
			c.fence()
			c.subscribe(typeURL, "A", "B")
			eventually(t, "B back in the class's interest", func() bool { return h.class.Interest(typeURL).Has("B") })
			h.apply(typeURL, false, resource(t, typeURL, "B", 1))
			wantResources(t, c.nextOf(typeURL), a, b)
			c.fence()
		})
	}
}

// A requested name that does not exist yet is pushed when it appears; so is
// a name of a type of which nothing exists yet.
func TestRequestedNamePushedWhenItAppears(t *testing.T) {
	for _, tc := range []struct{ name, typeURL, missing string }{
		{"EDS", EndpointType, "B"},
		{"CDS", ClusterType, "Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			a := resource(t, tc.typeURL, "A", 1)
			h.apply(tc.typeURL, true, a)

			c := h.ads(t)
			c.subscribe(tc.typeURL, "A", tc.missing)
			c.ackNext(tc.typeURL, a)
			c.fence()

			m := resource(t, tc.typeURL, tc.missing, 1)
			h.apply(tc.typeURL, false, m)
			wantResources(t, c.nextOf(tc.typeURL), a, m)

			// Nothing of the type exists at all yet: silence, then the push.
			c.subscribe(RouteType, "R")
			c.fence()
			r := h.put(t, RouteType, true, "R", 1)
			wantResources(t, c.nextOf(RouteType), r)
		})
	}
	t.Run("EDS per-type", func(t *testing.T) {
		h := newHarness(t)
		c := h.perType(t, EndpointType)
		c.subscribe(EndpointType, "X")
		c.expectNothing(quietWindow)
		x := h.put(t, EndpointType, true, "X", 1)
		wantResources(t, c.nextOf(EndpointType), x)
	})
}

// Unsubscribing one name on EDS: its changes stop, the others' continue.
func TestUnsubscribeName(t *testing.T) {
	h := newHarness(t)
	a1, b1 := resource(t, EndpointType, "A", 1), resource(t, EndpointType, "B", 1)
	h.apply(EndpointType, true, a1, b1)

	c := h.ads(t)
	c.subscribe(EndpointType, "A", "B")
	c.ackNext(EndpointType, a1, b1)

	c.subscribe(EndpointType, "A")
	c.fence() // names only removed: nothing to send

	h.apply(EndpointType, false, resource(t, EndpointType, "B", 2))
	a2 := h.put(t, EndpointType, false, "A", 2)
	wantResources(t, c.nextOf(EndpointType), a2)
}

// Types other than Listener and Cluster never get an empty response.
func TestNonFullStateNeverEmpty(t *testing.T) {
	h := newHarness(t)
	a := h.put(t, EndpointType, true, "A", 1)

	c := h.ads(t)
	c.subscribe(EndpointType, "A", "B")
	c.ackNext(EndpointType, a)

	// A deleted upstream: the shard has nothing left, which is not sent.
	h.apply(EndpointType, true, resource(t, EndpointType, "C", 1))
	c.fence()
	b := h.put(t, EndpointType, false, "B", 1)
	wantResources(t, c.nextOf(EndpointType), b)

	// The upstream's first answer for a type is empty: nothing sent.
	c.subscribe(RouteType, "R")
	h.apply(RouteType, true)
	c.fence()

	// A legacy wildcard EDS subscription whose type empties out.
	w := h.ads(t)
	w.subscribe(EndpointType)
	wantResources(t, w.nextOf(EndpointType), b, resource(t, EndpointType, "C", 1))
	h.apply(EndpointType, true)
	w.fence()
}

// A name listed twice is sent once, and the listing order does not matter.
func TestNoDuplicateNames(t *testing.T) {
	h := newHarness(t)
	ea, eb := resource(t, EndpointType, "A", 1), resource(t, EndpointType, "B", 1)
	ca, cb := resource(t, ClusterType, "A", 1), resource(t, ClusterType, "B", 1)
	h.apply(EndpointType, true, ea, eb)
	h.apply(ClusterType, true, ca, cb)

	c := h.ads(t)
	c.subscribe(EndpointType, "A", "A")
	wantResources(t, c.nextOf(EndpointType), ea) // exactly one A
	c.subscribe(ClusterType, "A", "*", "A", "B", "*")
	wantResources(t, c.nextOf(ClusterType), ca, cb)

	// ["B","A","A"] and ["A","B"] are one subscription: one shard.
	d := h.ads(t)
	d.subscribe(EndpointType, "B", "A", "A")
	wantResources(t, d.nextOf(EndpointType), ea, eb)
	e := h.ads(t)
	e.subscribe(EndpointType, "A", "B")
	wantResources(t, e.nextOf(EndpointType), ea, eb)
	var ab []shard.ShardStatus
	for _, s := range h.shards(EndpointType) {
		if !s.Wildcard && len(s.Names) == 2 {
			ab = append(ab, s)
		}
	}
	if len(ab) != 1 || ab[0].Streams != 2 {
		t.Fatalf("[A B] shards: %+v, want one with 2 streams", ab)
	}
}

// A name the client dropped and asks for again is sent, also when its new
// shard waits for another name the upstream has not answered yet: once
// answered, the shard's version can equal the one the client was last sent
// (a was all it held then, a is all there is now), but the client dropped
// a since, so the answer must go out (spec: newly requested resources are
// resent). Found by the conformance engine (snapshot-delta-readded-pending).
func TestSotWReaddedNameWithPendingName(t *testing.T) {
	h := newHarness(t)
	a := resource(t, ClusterType, "a", 1)
	h.apply(ClusterType, true, a)
	c := h.ads(t)
	c.subscribe(ClusterType, "a")
	c.ackNext(ClusterType, a)
	// The test is the upstream: it was asked for a. Names asked for since
	// are pending until it answers.
	h.class.Requested(ClusterType, shard.NewSubscription([]string{"a"}, false), false)
	c.subscribe(ClusterType, "b") // b is pending: its shard waits
	c.fence()
	c.subscribe(ClusterType, "a", "c") // c is pending too; the class holds a
	c.fence()
	h.class.Requested(ClusterType, shard.NewSubscription([]string{"a", "c"}, false), false)
	h.apply(ClusterType, true, a) // the answer: c does not exist
	// a is sent before the answer to a request made after the upstream's.
	h.apply(RuntimeType, false, resource(t, RuntimeType, "after", 0))
	c.subscribe(RuntimeType, "after")
	wantResources(t, c.nextOf(ClusterType), a)
	c.nextOf(RuntimeType)
}
