package relay

import (
	"testing"
)

// A delta stream that ends, by cancellation or by the client half-closing,
// releases its shards; a shard shared with another stream stays.
func TestDeltaStreamEndReleasesShards(t *testing.T) {
	for _, how := range []string{"cancel", "CloseSend"} {
		t.Run(how, func(t *testing.T) {
			h := newHarness(t)
			h.apply(ClusterType, true, resource(t, ClusterType, "A", 1))
			h.apply(EndpointType, true, resource(t, EndpointType, "A", 1))

			stay := h.deltaADS(t)
			stay.subscribe(ClusterType)
			stay.nextOf(ClusterType)

			c := h.deltaADS(t)
			c.subscribe(ClusterType)
			c.nextOf(ClusterType)
			c.subscribe(EndpointType, "A")
			c.nextOf(EndpointType)
			if n := h.srv.StreamCount(); n != 2 {
				t.Fatalf("%d streams, want 2", n)
			}
			if s := h.shards(EndpointType); len(s) != 1 || s[0].Streams != 1 {
				t.Fatalf("EDS shards %+v, want one with 1 stream", s)
			}
			if s := h.shards(ClusterType); len(s) != 1 || s[0].Streams != 2 {
				t.Fatalf("CDS shards %+v, want one with 2 streams", s)
			}

			if how == "cancel" {
				c.close()
			} else if err := c.s.CloseSend(); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the stream's shards released", func() bool {
				cds := h.shards(ClusterType)
				return h.srv.StreamCount() == 1 && len(h.shards(EndpointType)) == 0 &&
					len(cds) == 1 && cds[0].Streams == 1
			})
			if in := h.class.Interest(EndpointType); !in.Empty() {
				t.Fatalf("EDS interest %+v after the only subscriber left", in)
			}

			a2 := resource(t, ClusterType, "A", 2)
			h.apply(ClusterType, true, a2)
			wantDelta(t, stay.nextOf(ClusterType), nil, a2)
		})
	}
}

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

// On delta ADS, responses of different types arrive in the order the
// class's updates happened.
func TestDeltaADSOrder(t *testing.T) {
	h := newHarness(t)
	types := []string{ClusterType, EndpointType, ListenerType}
	for _, typeURL := range types {
		h.apply(typeURL, true, resource(t, typeURL, "A", 0))
	}
	c := h.deltaADS(t)
	c.subscribe(ClusterType)
	c.subscribe(EndpointType, "A")
	c.subscribe(ListenerType, "*")
	for _, typeURL := range types {
		c.nextOf(typeURL) // first responses follow the requests' order
	}

	orders := [][]int{{0, 1, 2}, {2, 0, 1}, {1, 2, 0}, {0, 2, 1}, {2, 1, 0}, {1, 0, 2}}
	v := 0
	for round := 0; round < 5; round++ {
		for _, order := range orders {
			v++
			for _, i := range order {
				h.apply(types[i], true, resource(t, types[i], "A", v))
			}
			for _, i := range order {
				wantDelta(t, c.nextOf(types[i]), nil, resource(t, types[i], "A", v))
			}
		}
	}
	c.expectNothing(quietWindow)
}
