package upstream

import (
	"fmt"
	"runtime"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/xds-relay/xds-relay/bench"
	"github.com/xds-relay/xds-relay/shard"
)

// liveHeap is the live heap after collections (two: a sync.Pool keeps
// what it held through one).
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// classResponse is class k's encoded CDS response of w.
func classResponse(tb testing.TB, w bench.Workload, k int) []byte {
	tb.Helper()
	order := make([]int, w.Clusters)
	for i := range order {
		order[i] = i
	}
	return encodeCDS(tb, "v1", order, func(i int) *clusterv3.Cluster { return w.Cluster(k, i, false) })
}

// BenchmarkHeldForClasses measures what issue 14's memory target counts,
// the whole of what the relay holds for its classes' resources: 20 classes
// of the bench's 10,000 clusters at overlap 0.9, each class's CDS response
// received (parsed, validated with its own validator, as each class's
// upstream stream does, and applied), each class watched by a wildcard
// SotW shard whose body is not built (as once released, see
// shard.BodyKeepAlive). What is held then: the store's distinct resources,
// the classes' tables, indexes, shards and responses, and whatever each
// class's validator keeps between responses. Reported against the distinct
// resources' encoded bytes (bench.Workload.StateBytes), and as the bytes
// held beyond them per distinct resource and per class's reference to one,
// for resources of the bench's plain size (pad=0, about 125 bytes) and
// padded with filter metadata to mesh-like sizes. Run it once:
// -benchtime 1x.
func BenchmarkHeldForClasses(b *testing.B) {
	for _, pad := range []int{0, 400, 900, 1900} {
		b.Run(fmt.Sprint("pad=", pad), func(b *testing.B) {
			benchmarkHeldForClasses(b, bench.Workload{Classes: 20, Clusters: 10_000, Overlap: 0.9, Padding: pad})
		})
	}
}

func benchmarkHeldForClasses(b *testing.B, w bench.Workload) {
	_, unique, err := w.StateBytes()
	if err != nil {
		b.Fatal(err)
	}
	distinct := w.Shared() + (w.Clusters-w.Shared())*w.Classes
	for b.Loop() {
		before := liveHeap()
		acquire := storeClasses(b)
		valid := make([]*validator, w.Classes)
		classes := make([]*shard.Class, w.Classes)
		for k := range w.Classes {
			resp := classResponse(b, w, k)
			classes[k] = acquire(fmt.Sprint("k", k))
			watchAll(b, classes[k])
			valid[k] = &validator{store: classes[k].Store()}
			apply(b, valid[k], classes[k], resp)
		}
		held := liveHeap() - before
		for _, c := range classes {
			sh := subscribe(b, c, clusterType, shard.Subscription{Wildcard: true}, nopWatcher{})
			if got := len(sh.Current().Resources); got != w.Clusters {
				b.Fatalf("a shard of %d resources, want %d", got, w.Clusters)
			}
		}
		b.ReportMetric(float64(unique)/float64(distinct), "B/resource")
		b.ReportMetric(float64(unique)/1e6, "unique-MB")
		b.ReportMetric(float64(held)/1e6, "held-MB")
		b.ReportMetric(float64(held)/float64(unique), "held/unique")
		b.ReportMetric(float64(held-unique)/float64(distinct), "over-B/resource")
		runtime.KeepAlive(valid)
		runtime.KeepAlive(classes)
	}
}
