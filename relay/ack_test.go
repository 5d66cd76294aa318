package relay

import (
	"testing"

	"github.com/xds-relay/xds-relay/shard"
)

// After an ACK nothing is resent; a change pushes a new version, new nonce.
func TestACKDoesNotResend(t *testing.T) {
	h := newHarness(t)
	a1, b1 := resource(t, ClusterType, "A", 1), resource(t, ClusterType, "B", 1)
	h.apply(ClusterType, true, a1, b1)

	c := h.ads(t)
	c.subscribe(ClusterType)
	r1 := c.ackNext(ClusterType, a1, b1)
	c.fence() // the ACK provoked no response
	if ts := h.typeStatus(t, ClusterType); ts.ACKs != 1 || ts.AckedVersion != r1.VersionInfo {
		t.Fatalf("status after ACK: acks=%d acked=%q, want 1 and %q", ts.ACKs, ts.AckedVersion, r1.VersionInfo)
	}

	a2 := h.put(t, ClusterType, false, "A", 2)
	r2 := c.nextOf(ClusterType)
	wantResources(t, r2, a2, b1)
	if r2.VersionInfo == r1.VersionInfo || r2.Nonce == r1.Nonce {
		t.Fatalf("change pushed version %q nonce %q; want both different from %q %q", r2.VersionInfo, r2.Nonce, r1.VersionInfo, r1.Nonce)
	}
	c.ack(r2)
	c.fence()
	c.expectNothing(quietWindow)
}

// The same on a per-type stream, where no request barrier exists: wait for
// the relay to count the ACK, then a change must be the next response.
func TestACKDoesNotResendPerType(t *testing.T) {
	h := newHarness(t)
	a1 := h.put(t, EndpointType, true, "A", 1)

	c := h.perType(t, EndpointType)
	c.subscribe(EndpointType, "A")
	r1 := c.ackNext(EndpointType, a1)
	eventually(t, "the ACK to be counted", func() bool { return h.typeStatus(t, EndpointType).ACKs == 1 })

	a2 := h.put(t, EndpointType, false, "A", 2)
	r2 := c.nextOf(EndpointType)
	wantResources(t, r2, a2)
	if r2.VersionInfo == r1.VersionInfo {
		t.Fatalf("change pushed the old version %q", r2.VersionInfo)
	}
	c.ack(r2)
	c.expectNothing(quietWindow)
}

// ackedCDSAndEDS opens an ADS client that subscribes to every cluster, then
// to endpoints A, ACKing each first response; it returns the client and its
// CDS response.
func (h *harness) ackedCDSAndEDS(t *testing.T) (*client, *response) {
	t.Helper()
	c := h.ads(t)
	c.subscribe(ClusterType)
	r1 := c.nextOf(ClusterType)
	c.ack(r1)
	c.subscribe(EndpointType, "A")
	c.ack(c.nextOf(EndpointType))
	return c, r1
}

// A NACKed version is not resent; the next different version is.
func TestNACKDoesNotResendRejectedVersion(t *testing.T) {
	h := newHarness(t)
	a1, e1 := resource(t, ClusterType, "A", 1), resource(t, EndpointType, "A", 1)
	h.apply(ClusterType, true, a1)
	h.apply(EndpointType, true, e1)

	c, r1 := h.ackedCDSAndEDS(t)

	a2 := h.put(t, ClusterType, false, "A", 2)
	r2 := c.nextOf(ClusterType)
	wantResources(t, r2, a2)
	c.nack(r2, r1.VersionInfo, "cluster A: bad config")
	c.fence() // the NACK provoked no response: V2 not resent

	// Push barrier on another type: the next response is that push.
	e2 := h.put(t, EndpointType, false, "A", 2)
	wantResources(t, c.nextOf(EndpointType), e2)

	a3 := h.put(t, ClusterType, false, "A", 3)
	r3 := c.nextOf(ClusterType)
	wantResources(t, r3, a3)
	if r3.VersionInfo == r2.VersionInfo || r3.VersionInfo == r1.VersionInfo {
		t.Fatalf("version after NACK %q, want a new one (V1 %q, V2 %q)", r3.VersionInfo, r1.VersionInfo, r2.VersionInfo)
	}

	ts := h.typeStatus(t, ClusterType)
	if ts.NACKs != 1 || ts.LastNACK != "cluster A: bad config" || ts.ACKs != 1 {
		t.Fatalf("status: nacks=%d last=%q acks=%d, want 1, the message, 1", ts.NACKs, ts.LastNACK, ts.ACKs)
	}
}

// A request whose nonce is not the latest sent for its type is ignored,
// resource names included; one with the current nonce is honoured.
func TestStaleNonceIgnored(t *testing.T) {
	h := newHarness(t)
	a1, b1 := resource(t, EndpointType, "A", 1), resource(t, EndpointType, "B", 1)
	h.apply(EndpointType, true, a1, b1)

	c := h.ads(t)
	c.subscribe(EndpointType, "A")
	r1 := c.ackNext(EndpointType, a1)
	c.fence() // the ACK is handled before r2 exists

	a2 := h.put(t, EndpointType, false, "A", 2)
	r2 := c.nextOf(EndpointType)
	wantResources(t, r2, a2)

	// Stale: carries r1's nonce although r2 was sent since.
	c.send(&request{Node: c.node, TypeUrl: EndpointType, VersionInfo: r1.VersionInfo, ResponseNonce: r1.Nonce,
		ResourceNames: []string{"A", "B"}})
	c.fence() // no response for the newly named B
	if ts := h.typeStatus(t, EndpointType); ts.StaleNonces != 1 {
		t.Fatalf("stale nonces counted: %d, want 1", ts.StaleNonces)
	}

	// The subscription is still [A]: B's change is not pushed, A's is.
	h.apply(EndpointType, false, resource(t, EndpointType, "B", 2))
	a3 := h.put(t, EndpointType, false, "A", 3)
	r3 := c.nextOf(EndpointType)
	wantResources(t, r3, a3)

	// With the current nonce the same names are honoured.
	c.subscribe(EndpointType, "A", "B")
	wantResources(t, c.nextOf(EndpointType), a3, resource(t, EndpointType, "B", 2))
}

// A stale request's names are ignored, but it still set resource_names: the
// legacy wildcard ends with it (spec: the empty list is the wildcard only if
// no earlier request of the type set the field). A client that then sends
// the empty list subscribes to nothing, and its later "*" is a new wildcard,
// answered with the state. Read as the legacy wildcard still, the empty list
// would change nothing and the "*" after it neither: the client, which
// dropped its clusters, would be left with none.
func TestStaleNonceEndsLegacyWildcard(t *testing.T) {
	h := newHarness(t)
	a, b := resource(t, ClusterType, "A", 1), resource(t, ClusterType, "B", 1)
	h.apply(ClusterType, true, a, b)

	c := h.ads(t)
	c.subscribe(ClusterType) // the legacy wildcard
	r1 := c.ackNext(ClusterType, a, b)
	c.fence() // the ACK is handled before r2 exists

	cc := h.put(t, ClusterType, false, "C", 1)
	wantResources(t, c.nextOf(ClusterType), a, b, cc)

	// Stale: carries r1's nonce although r2 was sent since.
	c.send(&request{Node: c.node, TypeUrl: ClusterType, VersionInfo: r1.VersionInfo, ResponseNonce: r1.Nonce,
		ResourceNames: []string{"A"}})
	c.fence() // ignored: nothing is sent for it
	if ts := h.typeStatus(t, ClusterType); ts.StaleNonces != 1 || !ts.Wildcard {
		t.Fatalf("after the stale request: stale nonces %d wildcard %v, want 1 true", ts.StaleNonces, ts.Wildcard)
	}

	c.subscribe(ClusterType) // current nonce, no names: nothing any more
	c.fence()
	if ts := h.typeStatus(t, ClusterType); ts.Wildcard || len(ts.Names) != 0 {
		t.Fatalf("after the empty list: wildcard=%v names=%v, want nothing", ts.Wildcard, ts.Names)
	}
	// "*" is a new wildcard: the state is sent.
	c.subscribe(ClusterType, "*")
	wantResources(t, c.nextOf(ClusterType), a, b, cc)
}

// Applying the same bytes again, in any order, with or without replace,
// pushes nothing.
func TestIdenticalContentNotPushed(t *testing.T) {
	h := newHarness(t)
	h.apply(ClusterType, true, resource(t, ClusterType, "A", 1), resource(t, ClusterType, "B", 1))
	h.apply(EndpointType, true, resource(t, EndpointType, "A", 1), resource(t, EndpointType, "B", 1))

	c, r1 := h.ackedCDSAndEDS(t)

	// Fresh Resource values with the same bytes.
	h.apply(ClusterType, true, resource(t, ClusterType, "B", 1), resource(t, ClusterType, "A", 1))
	h.apply(ClusterType, false, resource(t, ClusterType, "A", 1))
	h.apply(EndpointType, true, resource(t, EndpointType, "A", 1), resource(t, EndpointType, "B", 1))
	// A change outside the EDS subscription leaves [A]'s content identical.
	h.apply(EndpointType, false, resource(t, EndpointType, "B", 2))
	c.fence()

	b2 := h.put(t, ClusterType, false, "B", 2)
	r2 := c.nextOf(ClusterType)
	wantResources(t, r2, resource(t, ClusterType, "A", 1), b2)
	if r2.VersionInfo == r1.VersionInfo {
		t.Fatalf("changed content kept version %q", r1.VersionInfo)
	}
}

// Versions are content hashes: two relays given the same resources in a
// different order, through a different history, agree on version_info.
func TestVersionsDeterministic(t *testing.T) {
	h1, h2 := newHarness(t), newHarness(t)
	cl := func(name string, v int) *shard.Resource { return resource(t, ClusterType, name, v) }
	ep := func(name string, v int) *shard.Resource { return resource(t, EndpointType, name, v) }

	h1.apply(ClusterType, true, cl("A", 1), cl("B", 1), cl("C", 1))
	h1.apply(EndpointType, true, ep("A", 1), ep("C", 1))
	h2.apply(ClusterType, true, cl("A", 7))
	h2.apply(ClusterType, true, cl("C", 1), cl("A", 1), cl("B", 1))
	h2.apply(EndpointType, false, ep("C", 1))
	h2.apply(EndpointType, false, ep("A", 1))

	c1, c2 := h1.ads(t), h2.ads(t)
	c1.subscribe(ClusterType)
	c2.subscribe(ClusterType, "*")
	v1, v2 := c1.nextOf(ClusterType).VersionInfo, c2.nextOf(ClusterType).VersionInfo
	if v1 != v2 {
		t.Fatalf("CDS versions differ: %q vs %q", v1, v2)
	}
	c1.subscribe(EndpointType, "A", "C")
	c2.subscribe(EndpointType, "C", "A")
	e1, e2 := c1.nextOf(EndpointType).VersionInfo, c2.nextOf(EndpointType).VersionInfo
	if e1 != e2 {
		t.Fatalf("EDS versions differ: %q vs %q", e1, e2)
	}

	// The version follows the content: a change moves it, a revert restores it.
	h2.apply(ClusterType, false, cl("B", 2))
	if v := c2.nextOf(ClusterType).VersionInfo; v == v1 {
		t.Fatalf("changed content kept version %q", v)
	}
	h2.apply(ClusterType, false, cl("B", 1))
	if v := c2.nextOf(ClusterType).VersionInfo; v != v1 {
		t.Fatalf("reverted content has version %q, want %q", v, v1)
	}
}
