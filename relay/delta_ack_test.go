package relay

import (
	"slices"
	"testing"
)

// A request carrying a stale nonce still changes the subscription (spec:
// the server must honor changes to the subscription state even if the nonce
// is stale), and is counted.
func TestDeltaStaleNonceHonoured(t *testing.T) {
	h, ep := newEndpointHarness(t, "A", "B", "C")
	c := h.deltaADS(t)

	c.subscribe(EndpointType, "A")
	r1 := c.ackNext(EndpointType, nil, ep("A", 1))
	c.fence()

	h.apply(EndpointType, false, ep("A", 2))
	r2 := c.nextOf(EndpointType)
	wantDelta(t, r2, nil, ep("A", 2))

	// Stale: r1's nonce although r2 was sent since.
	c.send(&deltaRequest{TypeUrl: EndpointType, ResponseNonce: r1.Nonce, ResourceNamesSubscribe: []string{"B"}})
	r3 := c.nextOf(EndpointType)
	wantDelta(t, r3, nil, ep("B", 1))
	if ts := h.typeStatus(t, EndpointType); ts.StaleNonces != 1 || !slices.Equal(ts.Names, []string{"A", "B"}) {
		t.Fatalf("status: stale nonces %d names %v, want 1 [A B]", ts.StaleNonces, ts.Names)
	}

	// A stale unsubscription is honoured too: A's changes stop.
	c.send(&deltaRequest{TypeUrl: EndpointType, ResponseNonce: r1.Nonce, ResourceNamesUnsubscribe: []string{"A"}})
	c.fence()
	h.apply(EndpointType, false, ep("A", 3))
	c.fence()
	h.apply(EndpointType, false, ep("B", 2))
	wantDelta(t, c.nextOf(EndpointType), nil, ep("B", 2))
	if ts := h.typeStatus(t, EndpointType); ts.StaleNonces != 2 || ts.NACKs != 0 {
		t.Fatalf("status: stale nonces %d nacks %d, want 2 0", ts.StaleNonces, ts.NACKs)
	}
}

// A NACK is counted; the rejected resource versions are not sent again, and
// the next change is sent as usual (without the rejected one).
func TestDeltaNACK(t *testing.T) {
	h, ep := newEndpointHarness(t, "A", "B")
	c := h.deltaADS(t)

	c.subscribe(EndpointType, "A", "B")
	c.ackNext(EndpointType, nil, ep("A", 1), ep("B", 1))
	c.fence()

	h.apply(EndpointType, false, ep("A", 2))
	r2 := c.nextOf(EndpointType)
	wantDelta(t, r2, nil, ep("A", 2))
	c.nack(r2, "endpoint A: bad config")
	c.fence() // the NACK provoked no response: A v2 not resent

	h.apply(EndpointType, false, ep("B", 2))
	r3 := c.nextOf(EndpointType)
	wantDelta(t, r3, nil, ep("B", 2))
	if r3.Nonce == r2.Nonce {
		t.Fatal("nonce reused")
	}
	c.ack(r3)
	c.fence() // the ACK is handled before r4 is sent (else it is stale)

	h.apply(EndpointType, false, ep("A", 3))
	r4 := c.ackNext(EndpointType, nil, ep("A", 3))
	c.fence()

	ts := h.typeStatus(t, EndpointType)
	if ts.NACKs != 1 || ts.LastNACK != "endpoint A: bad config" || ts.ACKs != 3 || ts.StaleNonces != 0 {
		t.Fatalf("status: nacks=%d last=%q acks=%d stale=%d, want 1, the message, 3, 0", ts.NACKs, ts.LastNACK, ts.ACKs, ts.StaleNonces)
	}
	if ts.SentVersion != r4.SystemVersionInfo {
		t.Fatalf("status: sent version %q, want %q", ts.SentVersion, r4.SystemVersionInfo)
	}
}

// A NACK that names resources to (re)subscribe still changes the
// subscription.
func TestDeltaNACKWithSubscription(t *testing.T) {
	h, ep := newEndpointHarness(t, "A", "B")
	c := h.deltaADS(t)
	c.subscribe(EndpointType, "A")
	r1 := c.nextOf(EndpointType)
	c.send(&deltaRequest{TypeUrl: EndpointType, ResponseNonce: r1.Nonce, ErrorDetail: statusProto("no"),
		ResourceNamesSubscribe: []string{"B"}})
	wantDelta(t, c.nextOf(EndpointType), nil, ep("B", 1))
	if ts := h.typeStatus(t, EndpointType); ts.NACKs != 1 {
		t.Fatalf("nacks %d, want 1", ts.NACKs)
	}
}
