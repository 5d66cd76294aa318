package relay

import (
	"testing"

	"github.com/xds-relay/xds-relay/shard"
)

// Explicit names: subscribing sends them, subscribing again re-sends even
// if unchanged, unsubscribing sends nothing and stops pushes, a phantom
// unsubscription is ignored.
func TestDeltaExplicitNames(t *testing.T) {
	h, ep := newEndpointHarness(t, "A", "B", "C")
	c := h.deltaADS(t)

	c.subscribe(EndpointType, "A", "B")
	r := c.ackNext(EndpointType, nil, ep("A", 1), ep("B", 1))
	c.fence()

	// Already subscribed and unchanged: sent again (the client may have
	// forgotten it), alone.
	c.subscribe(EndpointType, "A")
	r = c.nextOf(EndpointType)
	wantDelta(t, r, nil, ep("A", 1))
	c.ack(r)
	c.fence()

	// Unsubscribing needs no answer; B's changes are no longer pushed, and B
	// is not reported removed.
	c.unsubscribe(EndpointType, "B")
	c.fence()
	h.apply(EndpointType, false, ep("B", 2))
	c.fence()
	h.apply(EndpointType, false, ep("A", 2))
	r = c.nextOf(EndpointType)
	wantDelta(t, r, nil, ep("A", 2))
	c.ack(r)

	// Phantom unsubscriptions (never subscribed, or already unsubscribed).
	c.unsubscribe(EndpointType, "C", "B")
	c.fence()
	ts := h.typeStatus(t, EndpointType)
	if ts.Wildcard || len(ts.Names) != 1 || ts.Names[0] != "A" {
		t.Fatalf("subscription wildcard=%v names=%v, want [A]", ts.Wildcard, ts.Names)
	}
	// C was never subscribed: its change is not pushed either.
	h.apply(EndpointType, false, ep("C", 2))
	c.fence()

	// Subscribing B again delivers its latest version.
	c.subscribe(EndpointType, "B")
	wantDelta(t, c.nextOf(EndpointType), nil, ep("B", 2))
	c.fence()
}

// A subscribed name that does not exist: when the source is authoritative
// (complete state), the client is told at once through removed_resources;
// when it merges (absence unknown), nothing is said until the name appears.
func TestDeltaSubscribedNameMissing(t *testing.T) {
	t.Run("absence known", func(t *testing.T) {
		h := newHarness(t)
		a1 := h.put(t, EndpointType, true, "A", 1)
		c := h.deltaADS(t)

		c.subscribe(EndpointType, "Z")
		r := c.ackNext(EndpointType, []string{"Z"})

		c.subscribe(EndpointType, "A", "Y")
		r = c.nextOf(EndpointType)
		wantDelta(t, r, []string{"Y"}, a1)
		c.ack(r)
		c.fence()

		// Y appears: pushed. Then deleted: reported removed.
		y1 := resource(t, EndpointType, "Y", 1)
		h.apply(EndpointType, true, a1, y1)
		r = c.nextOf(EndpointType)
		wantDelta(t, r, nil, y1)
		c.ack(r)
		h.apply(EndpointType, true, y1)
		r = c.nextOf(EndpointType)
		wantDelta(t, r, []string{"A"})
		c.ack(r)
		c.fence()
	})

	t.Run("absence unknown", func(t *testing.T) {
		h := newHarness(t)
		a1 := h.put(t, RouteType, false, "A", 1)
		c := h.deltaADS(t)

		c.subscribe(RouteType, "Z")
		c.fence()
		c.subscribe(RouteType, "A", "Y")
		r := c.ackNext(RouteType, nil, a1) // nothing said of Y (or Z)
		c.fence()

		z1 := h.put(t, RouteType, false, "Z", 1)
		r = c.nextOf(RouteType)
		wantDelta(t, r, nil, z1)
		c.ack(r)
		a2 := h.put(t, RouteType, false, "A", 2)
		r = c.nextOf(RouteType)
		wantDelta(t, r, nil, a2)
		c.ack(r)
		y1 := h.put(t, RouteType, false, "Y", 1)
		r = c.nextOf(RouteType)
		wantDelta(t, r, nil, y1)
		c.ack(r)
		c.fence()
	})
}

// On reconnect, initial_resource_versions says what the client holds: what
// is unchanged is not sent again, what changed is, and what was deleted
// meanwhile is reported removed. Nothing else.
func TestDeltaReconnectInitialVersions(t *testing.T) {
	cases := []struct {
		name    string
		typeURL string
		service string   // "" for ADS
		sub     []string // on both streams
	}{
		{"legacy wildcard", ClusterType, "", nil},
		{"wildcard", ListenerType, ListenerType, []string{"*"}},
		{"names", EndpointType, EndpointType, []string{"A", "B", "C"}},
		{"names ADS", SecretType, "", []string{"A", "B", "C"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			res := func(name string, v int) *shard.Resource { return resource(t, tc.typeURL, name, v) }
			h.apply(tc.typeURL, true, res("A", 1), res("B", 1), res("C", 1))

			c1 := h.openDeltaClient(t, h.conn, tc.service)
			c1.subscribe(tc.typeURL, tc.sub...)
			r := c1.nextOf(tc.typeURL)
			wantDelta(t, r, nil, res("A", 1), res("B", 1), res("C", 1))
			held := versionsOf(r)
			c1.ack(r)
			c1.close()
			eventually(t, "stream 1 gone", func() bool { return h.srv.StreamCount() == 0 })

			// While disconnected: A changes, C is deleted, B stays.
			h.apply(tc.typeURL, true, res("A", 2), res("B", 1))

			c2 := h.openDeltaClient(t, h.conn, tc.service)
			c2.send(&deltaRequest{TypeUrl: tc.typeURL, ResourceNamesSubscribe: tc.sub, InitialResourceVersions: held})
			r = c2.nextOf(tc.typeURL)
			wantDelta(t, r, []string{"C"}, res("A", 2))
			c2.ack(r)
			c2.expectNothing(quietWindow)

			// Then the stream goes on from there.
			h.apply(tc.typeURL, true, res("A", 2), res("B", 2))
			wantDelta(t, c2.nextOf(tc.typeURL), nil, res("B", 2))
		})
	}
}

// A name claimed at no version (initial_resource_versions "") on a first
// request subscribing to it is owed an answer, as go-control-plane answers
// such a claim: sent if it exists, reported removed once known absent. An
// xds-relay below claims so every name it asks on a new stream, to learn
// whether the name exists (upstream.deltaSession.claims).
func TestDeltaEmptyVersionClaimIsAnswered(t *testing.T) {
	h := newHarness(t)
	a1 := h.put(t, EndpointType, true, "A", 1)
	c := h.deltaADS(t)
	c.send(&deltaRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"A", "Z"},
		InitialResourceVersions: map[string]string{"A": "", "Z": ""}})
	c.ackNext(EndpointType, []string{"Z"}, a1)
	c.fence()
}

// A reconnecting wildcard client that holds exactly the current state still
// gets its first (empty) answer, and nothing is resent.
func TestDeltaReconnectInSync(t *testing.T) {
	h := newHarness(t)
	a, b := resource(t, ClusterType, "A", 1), resource(t, ClusterType, "B", 1)
	h.apply(ClusterType, true, a, b)
	c := h.deltaADS(t)
	c.send(&deltaRequest{TypeUrl: ClusterType, InitialResourceVersions: map[string]string{"A": a.Version(), "B": b.Version()}})
	c.ackNext(ClusterType, nil)
	c.fence()

	// A stale version held is replaced.
	c2 := h.deltaADS(t)
	c2.send(&deltaRequest{TypeUrl: ClusterType, InitialResourceVersions: map[string]string{"A": "old", "B": b.Version()}})
	wantDelta(t, c2.nextOf(ClusterType), nil, a)
}
