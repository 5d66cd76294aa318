package relay

import (
	"testing"
)

// Changing the subscription moves the stream to another shard and releases
// the previous one.
func TestDeltaSubscriptionChangeReleasesShard(t *testing.T) {
	h := newHarness(t)
	h.apply(EndpointType, false, resource(t, EndpointType, "A", 1), resource(t, EndpointType, "B", 1))
	c := h.deltaADS(t)
	c.subscribe(EndpointType, "A")
	c.nextOf(EndpointType)
	c.subscribe(EndpointType, "B")
	c.nextOf(EndpointType)
	c.unsubscribe(EndpointType, "A")
	c.fence()
	s := h.shards(EndpointType)
	if len(s) != 1 || len(s[0].Names) != 1 || s[0].Names[0] != "B" || s[0].Streams != 1 {
		t.Fatalf("EDS shards %+v, want only [B] with 1 stream", s)
	}
	c.unsubscribe(EndpointType, "B")
	c.fence()
	if s := h.shards(EndpointType); len(s) != 0 {
		t.Fatalf("EDS shards %+v after unsubscribing everything", s)
	}
}
