package relay

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
)

// Streams of one shard get the same encoded response, nonce aside, and the
// class holds one shard for them.
func TestSharedEncoding(t *testing.T) {
	h := newHarness(t)
	h.applyClusters(t, 1, "A", "B")
	h.apply(EndpointType, true, resource(t, EndpointType, "A", 1), resource(t, EndpointType, "B", 1))

	a, b := h.ads(t), h.perType(t, ClusterType)
	b.node = &corev3.Node{Id: "node-2", Cluster: h.node.Cluster} // another node, same class
	a.subscribe(ClusterType)
	b.subscribe(ClusterType, "*")
	sameBody(t, a.nextOf(ClusterType), b.nextOf(ClusterType))

	a.subscribe(EndpointType, "B", "A")
	e := h.perType(t, EndpointType)
	e.subscribe(EndpointType, "A", "B")
	sameBody(t, a.nextOf(EndpointType), e.nextOf(EndpointType))

	for _, typeURL := range []string{ClusterType, EndpointType} {
		shards := h.shards(typeURL)
		if len(shards) != 1 || shards[0].Streams != 2 {
			t.Fatalf("%s shards %+v, want one with 2 streams", short(typeURL), shards)
		}
	}
	if got := len(h.registry.Classes()); got != 1 {
		t.Fatalf("%d classes, want 1", got)
	}

	h.apply(ClusterType, false, resource(t, ClusterType, "B", 2))
	sameBody(t, a.nextOf(ClusterType), b.nextOf(ClusterType))
}

// sameBody requires two responses (SotW or delta) to be equal and to encode
// the same, nonce aside; each has a nonce.
func sameBody[M rawResponse](t *testing.T, x, y M) {
	t.Helper()
	if x.GetNonce() == "" || y.GetNonce() == "" {
		t.Fatal("response without nonce")
	}
	var msgs [2]proto.Message
	var enc [2]string
	for i, m := range []M{x, y} {
		c := proto.Clone(m)
		r := c.ProtoReflect()
		r.Clear(r.Descriptor().Fields().ByName("nonce"))
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		msgs[i], enc[i] = c, string(b)
	}
	if !proto.Equal(msgs[0], msgs[1]) {
		t.Fatalf("responses differ beyond the nonce:\n%v\n%v", x, y)
	}
	if enc[0] != enc[1] {
		t.Fatal("responses encode differently beyond the nonce")
	}
}

// A stream (SotW or delta) that ends, by cancellation or by the client
// half-closing, releases its shards and its interest; the shard shared with
// another stream stays, and no shard is kept without streams.
func TestStreamEndReleasesShards(t *testing.T) {
	for _, p := range protocols {
		for _, how := range []string{"cancel", "CloseSend"} {
			t.Run(p.name+"/"+how, func(t *testing.T) {
				h := newHarness(t)
				a1, e1 := resource(t, ClusterType, "A", 1), resource(t, EndpointType, "A", 1)
				h.apply(ClusterType, true, a1)
				h.apply(EndpointType, true, e1)

				stay := p.ads(h, t)
				stay.subscribe(ClusterType)
				stay.wantNext(ClusterType, a1)

				c := p.ads(h, t)
				c.subscribe(ClusterType)
				c.wantNext(ClusterType, a1)
				c.subscribe(EndpointType, "A")
				c.wantNext(EndpointType, e1)
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
				} else if err := c.closeSend(); err != nil {
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
				for _, ts := range h.class.Status() {
					for _, s := range ts.Shards {
						if s.Streams == 0 {
							t.Fatalf("%s shard %s kept without streams", short(ts.TypeURL), s.Key)
						}
					}
				}

				// The remaining stream still gets pushes.
				a2 := h.put(t, ClusterType, true, "A", 2)
				stay.wantNext(ClusterType, a2)
			})
		}
	}
}
