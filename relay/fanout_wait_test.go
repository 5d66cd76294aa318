package relay

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/drop"
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

// A stream switching its subscription while the class applies updates
// concurrently never writes a resource at an older version after a newer
// one. The class tells its watchers outside its lock, so a stream can be
// told of a shard's response after it installed the shard at a newer one
// (its Current); it must drop the older one (shard.Watcher). Run with
// -race.
func TestStreamKeepsOrderWhileSwitchingDuringUpdates(t *testing.T) {
	srv, class, node := fuzzServer(false, false)
	const appliers, updates, streams, slow = 3, 150, 3, 100
	names := []string{"e0", "e1", "e2"}
	for _, n := range names {
		class.Apply(EndpointType, []*shard.Resource{resource(t, EndpointType, n, 0)}, false)
	}
	subs := [][]string{{"e0"}, {"e0", "e1", "e2"}, {"e1", "e0"}}
	// Slow watchers on every shard the streams switch between stretch each
	// telling, so that streams install shards while older tellings of
	// them are still on their way.
	for _, names := range subs {
		for range slow {
			w := &yieldingWatcher{}
			sh, err := class.TrySubscribe(EndpointType, shard.NewSubscription(names, false), w)
			if err != nil {
				t.Fatal(err)
			}
			defer class.Unsubscribe(sh, w)
		}
	}
	done := make(chan struct{})
	var streamsDone sync.WaitGroup
	for range streams {
		streamsDone.Go(func() {
			tr := &fuzzTransport[*discoveryv3.DiscoveryRequest]{ctx: context.Background(), fuzzSent: &fuzzSent{}}
			st := newSotWStream(srv, tr, "", "ads")
			st.limiter = rate.NewLimiter(rate.Inf, 0) // a switch per step, not a client's pace
			defer st.release()
			last := map[string]uint32{} // each name's last version written
			nonce := ""
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				req := &discoveryv3.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: subs[i%len(subs)], ResponseNonce: nonce}
				if i == 0 {
					req.Node = node
				}
				if err := st.handle(req); err != nil {
					t.Error(err)
					return
				}
				if err := st.writeQueued(); err != nil {
					t.Error(err)
					return
				}
				for _, b := range tr.take() {
					r := &discoveryv3.DiscoveryResponse{}
					if err := proto.Unmarshal(b, r); err != nil {
						t.Error(err)
						return
					}
					nonce = r.GetNonce()
					for _, a := range r.GetResources() {
						cla := &endpointv3.ClusterLoadAssignment{}
						if err := a.UnmarshalTo(cla); err != nil {
							t.Error(err)
							return
						}
						v := cla.GetEndpoints()[0].GetPriority()
						if p, ok := last[cla.GetClusterName()]; ok && v < p {
							t.Errorf("stream wrote %s at v%d after v%d: responses out of order", cla.GetClusterName(), v, p)
						}
						last[cla.GetClusterName()] = v
					}
				}
			}
		})
	}
	var appliersDone sync.WaitGroup
	for g := range appliers {
		appliersDone.Go(func() {
			for v := 1; v <= updates; v++ {
				class.Apply(EndpointType, []*shard.Resource{resource(t, EndpointType, names[g], v)}, false)
			}
		})
	}
	appliersDone.Wait()
	close(done)
	streamsDone.Wait()
}

// yieldingWatcher gives the processor away at every telling.
type yieldingWatcher struct{}

func (*yieldingWatcher) ShardChanged(*shard.Shard, *shard.Response)    { runtime.Gosched() }
func (*yieldingWatcher) ShardHeartbeat(*shard.Shard, *shard.Heartbeat) { runtime.Gosched() }

// A response told to a stream after its shard has a newer one (the class
// tells outside its lock) is dropped as superseded, and so is a heartbeat
// of it: the stream holds the newer response, or its telling follows.
func TestOlderTellSuperseded(t *testing.T) {
	r := newDropRig(t)
	st, tr := r.sotwInSync()
	sh := st.types.at(ClusterType).shard
	old := sh.Current()
	r.apply(ClusterType, 1)
	if n := write(r, &st.stream, tr); n != 1 {
		t.Fatalf("%d responses to the update, want 1", n)
	}
	st.ShardChanged(sh, old)
	st.ShardHeartbeat(sh, &shard.Heartbeat{Response: old, Resources: old.Resources, TTLs: [][]byte{nil}})
	dropped(r, &st.stream, tr, drop.Superseded, 2)
}
