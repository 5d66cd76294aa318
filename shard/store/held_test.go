package store_test

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/store"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// heapAlloc is the live heap after a collection.
func heapAlloc() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// benchCluster is a resource as the validator makes it from the bench's
// control plane (bench.Workload): a 123-byte Any copied out of the
// message, its name, its EDS service name as its child. Class -1: the
// content every class shares.
func benchCluster(i, class int) *shard.Resource {
	name := fmt.Sprintf("cluster-%05d", i)
	eds := fmt.Sprintf("eds-%05d-class-%d", i, class)
	raw := []byte(fmt.Sprintf("%-123s", name+"/"+eds))
	return shard.NewResource(name, bytes.Clone(raw), dedup.ResourceHash(raw), nil, []string{eds}, nil)
}

// BenchmarkHeldForClasses measures what the issue 14 memory target
// counts, without gRPC, streams or the upstream's decoding: 20 classes of
// 10,000 clusters at overlap 0.9 (9,000 the same in every class, 1,000 a
// class's own), each class watched by a wildcard SotW shard whose bodies
// are not built (as once released, see shard.BodyKeepAlive). It reports
// the heap the store's distinct resources take and what the classes
// (tables, indexes, shards, responses) add, against the distinct Any
// bytes. Run it once: -benchtime 1x.
func BenchmarkHeldForClasses(b *testing.B) {
	const classes, n, shared = 20, 10_000, 9_000
	for b.Loop() {
		before := heapAlloc()
		s := store.New()
		var distinct []*shard.Resource
		unique := int64(0)
		for k := -1; k < classes; k++ {
			lo, hi := 0, shared
			if k >= 0 {
				lo, hi = shared, n
			}
			for i := lo; i < hi; i++ {
				r := s.Acquire(benchCluster(i, k))
				distinct = append(distinct, r)
				unique += int64(len(r.Any))
			}
		}
		storeHeld := heapAlloc() - before

		cl, err := shard.NewClassifier(nil)
		if err != nil {
			b.Fatal(err)
		}
		reg := shard.NewRegistryWith(cl, nil, shard.Lifecycle{})
		reg.SetStore(s)
		var shards []*shard.Shard
		for k := range classes {
			c, err := reg.Acquire(&corev3.Node{Id: fmt.Sprint("n-", k), Cluster: fmt.Sprint("k", k)})
			if err != nil {
				b.Fatal(err)
			}
			sh, _ := c.TrySubscribe(xdstype.Cluster.URL, shard.NewSubscription(nil, true), nopWatcher{})
			shards = append(shards, sh)
			update := make([]*shard.Resource, n)
			for i := range update {
				// Fresh copies, as the validator hands a class the
				// resources the store does not hold yet.
				if i < shared {
					update[i] = benchCluster(i, -1)
				} else {
					update[i] = benchCluster(i, k)
				}
			}
			c.Apply(xdstype.Cluster.URL, update, true)
		}
		// The store's own references go: what stays is the classes'.
		for _, r := range distinct {
			s.Release(r)
		}
		distinct = nil
		all := heapAlloc() - before
		for _, sh := range shards {
			if len(sh.Current().Resources) != n {
				b.Fatalf("a shard of %d resources, want %d", len(sh.Current().Resources), n)
			}
		}
		b.ReportMetric(float64(unique)/1e6, "unique-MB")
		b.ReportMetric(float64(storeHeld)/1e6, "store-MB")
		b.ReportMetric(float64(all-storeHeld)/classes/1e3, "KB/class")
		b.ReportMetric(float64(all)/float64(unique), "held/unique")
		runtime.KeepAlive(shards)
		reg.Close()
	}
}
