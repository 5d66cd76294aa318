package shard

import (
	"fmt"
	"runtime"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// BenchmarkTableNamesPerSubscription reports the heap a class keeps per
// subscribed name (a name counted once for each shard naming it), after GC,
// for the shapes the shard table meets: one shard of many names, many
// shards sharing names, and names beside a wildcard shard.
func BenchmarkTableNamesPerSubscription(b *testing.B) {
	names := make([]string, 100000)
	for i := range names {
		names[i] = fmt.Sprintf("cluster-%06d", i)
	}
	shapes := []struct {
		name string
		subs []Subscription
	}{
		{"one-shard-100k", []Subscription{NewSubscription(names, false)}},
		{"100-shards-1k-sharing-10k", sharingSubs(names[:10000], 100, 1000)},
		{"wildcard-and-100k", []Subscription{{Wildcard: true}, NewSubscription(names, false)}},
	}
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			subscribed := 0
			for _, s := range sh.subs {
				subscribed += len(s.Names)
			}
			var total uint64
			for range b.N {
				reg := NewRegistry(mustClassifier(b, nil), func(*Class) func(string) { return func(string) {} })
				before := heapAfterGC()
				c := reg.ClassFor(&corev3.Node{Id: "n", Cluster: "c"})
				w := &recorder{}
				for _, s := range sh.subs {
					c.Subscribe(edsType, s, w)
				}
				total += heapAfterGC() - before
				runtime.KeepAlive(c)
			}
			b.ReportMetric(float64(total)/float64(b.N)/float64(subscribed), "B/name")
		})
	}
}

// sharingSubs makes n subscriptions of per names each, drawn in turn from
// pool, so every name of pool is in n*per/len(pool) shards.
func sharingSubs(pool []string, n, per int) []Subscription {
	subs := make([]Subscription, n)
	for i := range subs {
		l := make([]string, per)
		for j := range l {
			l[j] = pool[(i*per/10+j)%len(pool)]
		}
		subs[i] = NewSubscription(l, false)
	}
	return subs
}

func heapAfterGC() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
