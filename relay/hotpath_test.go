package relay

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// codecTransport is a SotW stream whose SendMsg does what gRPC's does with
// the relay's messages short of framing: encode with the relay codec, then
// free the buffers once "written". It counts the bytes.
type codecTransport struct {
	codec wire.Codec
	bytes int
}

func (c *codecTransport) Context() context.Context { return context.Background() }

func (c *codecTransport) Recv() (*discoveryv3.DiscoveryRequest, error) { return nil, errStep }

func (c *codecTransport) SendMsg(m any) error {
	out, err := c.codec.Marshal(m)
	if err != nil {
		return err
	}
	c.bytes += out.Len()
	out.Free()
	return nil
}

// hotPath is a class with n wildcard CDS SotW streams in sync.
type hotPath struct {
	class   *shard.Class
	streams []*sotwStream
	tr      []*codecTransport
	gen     int
	states  [2][]*shard.Resource
}

func newHotPath(tb testing.TB, streams, clusters int) *hotPath {
	tb.Helper()
	srv, class, node := fuzzServer(false, false)
	h := &hotPath{class: class}
	h.apply(clusters)
	for i := range streams {
		tr := &codecTransport{codec: wire.NewCodec()}
		st := newSotWStream(srv, tr, "", "ads")
		n := &corev3.Node{Id: "n" + strconv.Itoa(i), Cluster: node.GetCluster()}
		if err := st.handle(&discoveryv3.DiscoveryRequest{Node: n, TypeUrl: clusterType}); err != nil {
			tb.Fatal(err)
		}
		h.streams, h.tr = append(h.streams, st), append(h.tr, tr)
	}
	h.flushAll(tb)
	for i, tr := range h.tr {
		if tr.bytes == 0 {
			tb.Fatalf("stream %d got no initial state", i)
		}
	}
	return h
}

const clusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// apply installs clusters resources of ~120 bytes, cluster 0 differing
// between even and odd generations. The two states are built once, so that
// a benchmark measures the class, not the making of resources.
func (h *hotPath) apply(clusters int) {
	h.gen++
	if h.states[h.gen%2] == nil {
		rs := make([]*shard.Resource, clusters)
		for i := range rs {
			content := fmt.Sprintf("%0120d", i)
			if i == 0 {
				content = fmt.Sprintf("%0120d", h.gen%2)
			}
			b := []byte(content)
			rs[i] = &shard.Resource{Name: fmt.Sprintf("cluster-%05d", i), Any: b, Hash: dedup.ResourceHash(b)}
		}
		h.states[h.gen%2] = rs
	}
	h.class.Apply(clusterType, h.states[h.gen%2], true)
}

func (h *hotPath) flushAll(tb testing.TB) {
	for _, st := range h.streams {
		if err := st.writeQueued(); err != nil {
			tb.Fatal(err)
		}
	}
}

// sendCached makes two versions of the first stream's shard (the second by
// applying clusters) and returns a function sending the stream one of them,
// the other each time, as a cached response: enqueued, stamped and handed
// to the codec. It returns the stream's subscription too, counting pushes.
func (h *hotPath) sendCached(tb testing.TB, clusters int) (func(), *sotwTypeSub) {
	st := h.streams[0]
	sub := st.types.at(clusterType)
	sh := sub.shard
	v2 := sh.Current()
	h.apply(clusters)
	h.flushAll(tb)
	resps := [2]*shard.Response{v2, sh.Current()}
	i := 0
	return func() {
		i++
		st.mu.Lock()
		st.queue.push(sub, sh, resps[i%2], false)
		st.mu.Unlock()
		if err := st.writeQueued(); err != nil {
			tb.Fatal(err)
		}
	}, sub
}

// Sending a cached response to a stream that is in sync on another version
// allocates only the codec's two-buffer slice: the enqueue, the nonce stamp
// and the batch allocate nothing (the bench issue's zero-allocation target
// for stamping one more stream).
func TestSendCachedResponseAllocations(t *testing.T) {
	send, sub := newHotPath(t, 1, 50).sendCached(t, 50)
	allocs := testing.AllocsPerRun(1000, send)
	if allocs > 1 {
		t.Fatalf("sending a cached response allocates %v times, want 1 (the codec's buffer slice)", allocs)
	}
	if sub.pushes < 1000 {
		t.Fatalf("%d pushes: the measured sends did not happen", sub.pushes)
	}
}

// BenchmarkEncodeShard is the once-per-update cost: a class takes a new
// CDS state of 1,000 clusters (one changed) and builds the shard's response.
func BenchmarkEncodeShard(b *testing.B) {
	h := newHotPath(b, 0, 1000)
	b.ReportAllocs()
	for b.Loop() {
		h.apply(1000)
	}
}

// BenchmarkSendCached is the per-stream cost of one update: enqueue a cached
// response on a stream, stamp its nonce and hand it to the codec.
func BenchmarkSendCached(b *testing.B) {
	send, _ := newHotPath(b, 1, 1000).sendCached(b, 1000)
	b.ReportAllocs()
	for b.Loop() {
		send()
	}
}

// BenchmarkFanout is one update of 1,000 clusters (one changed) to 1,000
// streams of a shard, gRPC framing excluded: the encode once, and per
// stream the enqueue (under the class lock), the stamp and the codec.
func BenchmarkFanout(b *testing.B) {
	const streams = 1000
	h := newHotPath(b, streams, 1000)
	b.ReportAllocs()
	for b.Loop() {
		h.apply(1000)
		h.flushAll(b)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*streams), "ns/stream")
}
