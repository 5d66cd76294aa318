package relay

import (
	"slices"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/shard"
)

// BenchmarkSubscribeDuringFanout measures how long a client joining a
// class waits while the class tells a 10,000-stream shard of its updates
// (issue 14). One goroutine applies updates of 1,000 clusters (one
// changed) back to back (one per iteration) to a shard of 10,000 real
// SotW streams, their writers running (each encodes with the relay codec
// and discards, no network); meanwhile a client goroutine, every 100µs,
// subscribes a watcher to the same shard and
// unsubscribes it, and the latency of the pair is recorded. It reports
// the pair's p50, p99 and max, and how many pairs it measured.
func BenchmarkSubscribeDuringFanout(b *testing.B) {
	const streams, clusters = 10000, 1000
	h := newHotPath(b, streams, clusters)
	for _, st := range h.streams {
		st.writes = true
	}
	defer func() {
		for _, st := range h.streams {
			st.mu.Lock()
			st.stopped = true
			st.mu.Unlock()
			st.writers.Wait()
		}
	}()
	w := &fuzzNopWatcher{}
	wildcard := shard.Subscription{Wildcard: true}
	stop, done := make(chan struct{}), make(chan []time.Duration)
	go func() { // owned by the benchmark: stopped by stop, waited for by done
		var lat []time.Duration
		for {
			select {
			case <-stop:
				done <- lat
				return
			default:
			}
			t0 := time.Now()
			sh, err := h.class.TrySubscribe(clusterType, wildcard, w)
			if err != nil {
				panic(err)
			}
			h.class.Unsubscribe(sh, w)
			lat = append(lat, time.Since(t0))
			time.Sleep(100 * time.Microsecond) // a client arriving now and then, not a spinning core
		}
	}()
	for b.Loop() {
		h.apply(clusters)
	}
	close(stop)
	lat := <-done
	if len(lat) == 0 {
		b.Fatal("no subscription measured")
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e3 }
	b.ReportMetric(q(0.5), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(q(1), "max-µs")
	b.ReportMetric(float64(len(lat)), "subscribes")
}
