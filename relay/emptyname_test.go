package relay

import (
	"testing"
)

// The empty resource name matches nothing (as in go-control-plane): [""]
// unsubscribes a SotW client from everything of the type without ending
// the stream, so the stream's other types keep being served; "" never
// reaches the class's union interest (the upstream) nor a shard's key.
func TestSotWEmptyNameMatchesNothing(t *testing.T) {
	h := newHarness(t)
	ca, cb := resource(t, ClusterType, "A", 1), resource(t, ClusterType, "B", 1)
	h.apply(ClusterType, true, ca, cb)
	h.put(t, EndpointType, true, "A", 1)

	c := h.ads(t)
	c.subscribe(EndpointType, "A")
	c.ack(c.nextOf(EndpointType))
	c.subscribe(ClusterType, "A")
	c.ack(c.nextOf(ClusterType))

	c.subscribe(ClusterType, "")
	c.fence() // names only removed: nothing to send, and the stream lives
	if got := h.class.Interest(ClusterType); !got.Empty() {
		t.Fatalf("CDS interest after [\"\"] = %q (wildcard %v), want nothing", got.Names, got.Wildcard)
	}
	if ts := h.typeStatus(t, ClusterType); ts.Wildcard || len(ts.Names) != 0 {
		t.Fatalf("CDS subscription after [\"\"] = %+v, want nothing", ts)
	}

	// Another type of the ADS stream keeps being served; the unsubscribed
	// one is not.
	h.apply(ClusterType, true, resource(t, ClusterType, "A", 2), cb)
	ea2 := h.put(t, EndpointType, false, "A", 2)
	wantResources(t, c.nextOf(EndpointType), ea2)

	// After [""] the legacy wildcard is gone: [] stays "nothing".
	c.subscribe(ClusterType)
	c.fence()

	// ["", "B"] is ["B"]: the same shard, answered with B alone.
	o := h.ads(t)
	o.subscribe(ClusterType, "B")
	wantResources(t, o.nextOf(ClusterType), cb)
	c.subscribe(ClusterType, "", "B")
	wantResources(t, c.nextOf(ClusterType), cb)
	if got := h.class.Interest(ClusterType); got.Wildcard || len(got.Names) != 1 || got.Names[0] != "B" {
		t.Fatalf("CDS interest = %+v, want [B]", got)
	}
	if got := len(h.shards(ClusterType)); got != 1 {
		t.Fatalf("%d CDS shards, want 1 shared by [B] and [\"\", B]", got)
	}
}

// A first request of [""] is an explicit subscription to nothing: no
// response, no legacy wildcard afterwards, and the stream is not ended.
func TestSotWEmptyNameFirstRequest(t *testing.T) {
	h := newHarness(t)
	l := h.put(t, ListenerType, true, "L", 1)
	ra := h.put(t, RouteType, true, "R", 1)

	c := h.ads(t)
	c.subscribe(ListenerType, "")
	c.fence()
	c.subscribe(ListenerType) // not the legacy wildcard any more
	c.fence()
	c.subscribe(RouteType, "R")
	wantResources(t, c.nextOf(RouteType), ra)
	c.subscribe(ListenerType, "*")
	wantResources(t, c.nextOf(ListenerType), l)
}

// Delta: "" in resource_names_subscribe ends the legacy wildcard like any
// name (spec: a non-empty subscribe list) but subscribes to nothing; in
// resource_names_unsubscribe it is a phantom unsubscription. Neither ends
// the stream, and the stream's other types keep being served.
func TestDeltaEmptyNameMatchesNothing(t *testing.T) {
	h := newHarness(t)
	ca := h.put(t, ClusterType, true, "A", 1)
	ea := h.put(t, EndpointType, true, "A", 1)

	c := h.deltaADS(t)
	c.subscribe(EndpointType, "A")
	c.ackNext(EndpointType, nil, ea)

	c.subscribe(ClusterType, "") // not the legacy wildcard
	c.unsubscribe(EndpointType, "")
	c.fence()
	if got := h.class.Interest(ClusterType); !got.Empty() {
		t.Fatalf("CDS interest after subscribing \"\" = %q (wildcard %v), want nothing", got.Names, got.Wildcard)
	}

	ea2 := h.put(t, EndpointType, false, "A", 2)
	wantDelta(t, c.nextOf(EndpointType), nil, ea2)

	c.subscribe(ClusterType, "A")
	wantDelta(t, c.nextOf(ClusterType), nil, ca)
}
