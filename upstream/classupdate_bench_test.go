package upstream

import (
	"bytes"
	"math/rand/v2"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/bench"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/store"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// cdsResponse is the encoded CDS response of the bench's workload: clusters
// clusters, cluster 0 changed when changed is set, in an order of seed's
// (go-control-plane's snapshot cache lists a response's resources in map
// order).
func cdsResponse(tb testing.TB, clusters int, version string, changed bool, seed uint64) []byte {
	tb.Helper()
	w := bench.Workload{Clusters: clusters, Overlap: 1}
	return encodeCDS(tb, version, rand.New(rand.NewPCG(seed, 0)).Perm(clusters), func(i int) *clusterv3.Cluster {
		return w.Cluster(0, i, changed && i == 0)
	})
}

// encodeCDS is the encoded CDS response of version of cluster(i) for each
// i of order.
func encodeCDS(tb testing.TB, version string, order []int, cluster func(i int) *clusterv3.Cluster) []byte {
	tb.Helper()
	resp := &discoveryv3.DiscoveryResponse{VersionInfo: version, TypeUrl: clusterType, Nonce: version}
	for _, i := range order {
		a, err := anypb.New(cluster(i))
		if err != nil {
			tb.Fatal(err)
		}
		resp.Resources = append(resp.Resources, a)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// classUpdate is a class's share of an update the relay's store already
// holds (another class received it first): the received CDS response parsed,
// validated against the store and applied to the class, whose one wildcard
// shard is rebuilt (its body is built on first use, so not here).
type classUpdate struct {
	class *shard.Class
	valid *validator
	resps [2][]byte
	gen   int
}

// storeClasses returns a function acquiring the class of a node cluster
// from a registry whose classes hold their resources in one store.
func storeClasses(tb testing.TB) func(name string) *shard.Class {
	tb.Helper()
	cl, err := shard.NewClassifier(nil)
	if err != nil {
		tb.Fatal(err)
	}
	reg := shard.NewRegistryWith(cl, nil, shard.Lifecycle{})
	reg.SetStore(store.New())
	tb.Cleanup(reg.Close)
	return func(name string) *shard.Class {
		c, err := reg.Acquire(&corev3.Node{Id: "n-" + name, Cluster: name})
		if err != nil {
			tb.Fatal(err)
		}
		return c
	}
}

func newClassUpdate(tb testing.TB, clusters int) *classUpdate {
	tb.Helper()
	acquire := storeClasses(tb)
	u := &classUpdate{resps: [2][]byte{cdsResponse(tb, clusters, "v1", false, 1), cdsResponse(tb, clusters, "v2", true, 2)}}
	// Two other classes hold the two states, as the other classes of a
	// fleet do.
	for i, name := range []string{"holder-1", "holder-2"} {
		c := acquire(name)
		watchAll(tb, c)
		apply(tb, &validator{store: c.Store()}, c, u.resps[i])
	}
	u.class = acquire("measured")
	watchAll(tb, u.class)
	u.valid = &validator{store: u.class.Store()}
	u.step(tb)
	return u
}

// watchAll subscribes a watcher to every cluster of c, as asked upstream.
func watchAll(tb testing.TB, c *shard.Class) {
	tb.Helper()
	wild := shard.Subscription{Wildcard: true}
	subscribe(tb, c, clusterType, wild, nopWatcher{})
	c.Requested(clusterType, wild, false)
}

// apply does what sotwSession.handle does with a response, short of the
// network: parse, validate, apply.
func apply(tb testing.TB, v *validator, c *shard.Class, b []byte) {
	sc := getSotwScratch()
	defer sc.release()
	if err := wire.ParseResponseInto(b, &sc.resp); err != nil {
		tb.Fatal(err)
	}
	beats, err := sc.validate(v)
	if err != nil {
		tb.Fatal(err)
	}
	c.ApplyUpdate(sc.resp.TypeURL, shard.Update{Kind: shard.UpdateFull, Resources: sc.out, Heartbeats: beats, Asked: true, Distinct: true})
}

// step applies the other of the two states.
func (u *classUpdate) step(tb testing.TB) {
	u.gen++
	apply(tb, u.valid, u.class, u.resps[u.gen%2])
}

// BenchmarkClassUpdate is the relay's CPU for one class of a many-class
// update (issue 14), beyond receiving the message and writing to clients:
// a 1,000-cluster CDS response whose resources the store holds, one
// cluster changed from the class's state.
func BenchmarkClassUpdate(b *testing.B) {
	u := newClassUpdate(b, 1000)
	b.ReportAllocs()
	for b.Loop() {
		u.step(b)
	}
}

// The received message's buffer is reused once its response is handled
// (wire.Pooled): nothing the class keeps may alias it. A class applies a
// response, the buffer is overwritten, and what the class holds is still
// the response's content.
func TestHandledResponseOwnsNothingOfItsBuffer(t *testing.T) {
	c := storeClasses(t)("c")
	watchAll(t, c)
	b := cdsResponse(t, 20, "v1", false, 1)
	resp, err := wire.ParseResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for _, raw := range resp.Resources {
		_, value, _ := wire.ParseAny(raw)
		name, _ := wire.ResourceName(value)
		want[name] = bytes.Clone(raw)
	}
	apply(t, &validator{store: c.Store()}, c, b)
	for i := range b {
		b[i] = 0xa5
	}
	sh := subscribe(t, c, clusterType, shard.Subscription{Wildcard: true}, nopWatcher{})
	got := sh.Current()
	if got == nil || len(got.Resources) != len(want) {
		t.Fatalf("shard holds %v, want %d resources", got, len(want))
	}
	for _, r := range got.Resources {
		if !bytes.Equal(r.Any, want[r.Name]) {
			t.Fatalf("resource %q = %x after the buffer was reused, want %x", r.Name, r.Any, want[r.Name])
		}
	}
}
