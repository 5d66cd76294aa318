package store_test

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/store"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// nopWatcher is told of changes and heartbeats, and ignores them.
type nopWatcher struct{}

func (nopWatcher) ShardChanged(*shard.Shard, *shard.Response)    {}
func (nopWatcher) ShardHeartbeat(*shard.Shard, *shard.Heartbeat) {}

// registry returns a registry whose classes hold their resources in s,
// one class per node cluster, lingering life.Linger once left.
func registry(t *testing.T, s *store.Store, life shard.Lifecycle) *shard.Registry {
	t.Helper()
	cl, err := shard.NewClassifier(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := shard.NewRegistryWith(cl, nil, life)
	r.SetStore(s)
	t.Cleanup(r.Close)
	return r
}

func acquire(t *testing.T, r *shard.Registry, cluster string) *shard.Class {
	t.Helper()
	c, err := r.Acquire(&corev3.Node{Id: "n-" + cluster, Cluster: cluster})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clusters returns fresh resources c0 … c(n-1), each of content v: what a
// validator that found none of them held would hand each class.
func clusters(n int, v string) []*shard.Resource {
	out := make([]*shard.Resource, n)
	for i := range out {
		out[i] = res(fmt.Sprintf("c%d", i), v)
	}
	return out
}

// held returns the resource named name in the shard's current response.
func held(t *testing.T, s *shard.Shard, name string) *shard.Resource {
	t.Helper()
	r, ok := s.Current().Lookup(name)
	if !ok {
		t.Fatalf("shard of %s lacks %s", s.Class.Name, name)
	}
	return r
}

// Identical resources of two classes are one object and one store entry;
// a change in one class leaves the other's as it was; the entries go with
// the references, and with the classes when they linger out.
func TestClassesShareIdenticalResources(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const linger = time.Minute
		s := store.New()
		r := registry(t, s, shard.Lifecycle{Linger: linger})
		a, b := acquire(t, r, "a"), acquire(t, r, "b")
		wild := shard.NewSubscription(nil, true)
		sa, _ := a.TrySubscribe(xdstype.Cluster.URL, wild, nopWatcher{})
		sb, _ := b.TrySubscribe(xdstype.Cluster.URL, wild, nopWatcher{})
		a.Apply(xdstype.Cluster.URL, clusters(3, "1"), true)
		b.Apply(xdstype.Cluster.URL, clusters(3, "1"), true)
		size := int64(len(res("c0", "1").Any))
		wantCounts(t, s, 3, 3*size)
		for _, n := range []string{"c0", "c1", "c2"} {
			if ra, rb := held(t, sa, n), held(t, sb, n); ra != rb {
				t.Fatalf("%s: class a holds %p, class b %p: want one object", n, ra, rb)
			}
		}

		// c1 changes in class a only.
		a.Apply(xdstype.Cluster.URL, append(clusters(3, "1")[:1], res("c1", "2"), res("c2", "1")), true)
		wantCounts(t, s, 4, 4*size)
		if got := string(held(t, sb, "c1").Any); got != "c1=1" {
			t.Fatalf("class b's c1 = %q after class a's changed, want c1=1", got)
		}
		if got := string(held(t, sa, "c1").Any); got != "c1=2" {
			t.Fatalf("class a's c1 = %q, want c1=2", got)
		}
		// Class b drops c2: class a still holds it.
		b.Apply(xdstype.Cluster.URL, clusters(2, "1"), true)
		wantCounts(t, s, 4, 4*size)
		// Class b's c1 becomes class a's: the old content goes.
		b.Apply(xdstype.Cluster.URL, []*shard.Resource{res("c0", "1"), res("c1", "2")}, true)
		wantCounts(t, s, 3, 3*size)
		if ra, rb := held(t, sa, "c1"), held(t, sb, "c1"); ra != rb {
			t.Fatalf("c1 after both changed to one content: %p and %p, want one object", ra, rb)
		}

		// Both classes are left and linger out: nothing stays held.
		a.Unsubscribe(sa, nopWatcher{})
		b.Unsubscribe(sb, nopWatcher{})
		r.Release(a)
		r.Release(b)
		wantCounts(t, s, 3, 3*size) // lingering classes keep their state
		time.Sleep(linger)          // the bubble's clock
		synctest.Wait()
		if n := len(r.Classes()); n != 0 {
			t.Fatalf("%d classes after the linger, want 0", n)
		}
		wantCounts(t, s, 0, 0)
		// An update arriving for a dropped class holds nothing.
		a.Apply(xdstype.Cluster.URL, clusters(1, "1"), true)
		wantCounts(t, s, 0, 0)
	})
}

// A resource dropped because the upstream was asked for it no more is
// released (Class.Requested), as is one an incremental update removes.
func TestDroppedResourcesReleased(t *testing.T) {
	s := store.New()
	r := registry(t, s, shard.Lifecycle{})
	c := acquire(t, r, "a")
	t.Cleanup(func() { r.Release(c) })
	const eds = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	sub := shard.NewSubscription([]string{"c0", "c1"}, false)
	sh, _ := c.TrySubscribe(eds, sub, nopWatcher{})
	c.Requested(eds, sub, true)
	c.ApplyUpdate(eds, shard.Update{Kind: shard.UpdateIncremental, Resources: clusters(2, "1"), Asked: true})
	wantCounts(t, s, 2, 2*int64(len("c0=1")))
	c.ApplyUpdate(eds, shard.Update{Kind: shard.UpdateIncremental, Removed: []string{"c1"}, Asked: true})
	wantCounts(t, s, 1, int64(len("c0=1")))
	c.Unsubscribe(sh, nopWatcher{})
	c.Requested(eds, shard.Subscription{}, true)
	wantCounts(t, s, 0, 0)
}

// Classes updating concurrently (each on its own goroutine, as their
// upstream streams do) end with the store holding exactly the distinct
// content of their last state.
func TestClassesUpdateConcurrently(t *testing.T) {
	s := store.New()
	r := registry(t, s, shard.Lifecycle{})
	const classes, rounds, n = 4, 50, 20
	cs := make([]*shard.Class, classes)
	for i := range cs {
		cs[i] = acquire(t, r, fmt.Sprint("k", i))
		cs[i].TrySubscribe(xdstype.Cluster.URL, shard.NewSubscription(nil, true), nopWatcher{})
	}
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range rounds {
				// Half the resources common to every class, half its own.
				rs := clusters(n/2, fmt.Sprint(round))
				for j := n / 2; j < n; j++ {
					rs = append(rs, res(fmt.Sprintf("c%d", j), fmt.Sprint(round, "-", i)))
				}
				c.Apply(xdstype.Cluster.URL, rs, true)
			}
		}()
	}
	wg.Wait()
	last := fmt.Sprint(rounds - 1)
	var bytes int64
	for j := range n / 2 {
		bytes += int64(len(res(fmt.Sprintf("c%d", j), last).Any))
	}
	for i := range classes {
		for j := n / 2; j < n; j++ {
			bytes += int64(len(res(fmt.Sprintf("c%d", j), fmt.Sprint(last, "-", i)).Any))
		}
	}
	wantCounts(t, s, n/2+classes*n/2, bytes)
	for _, c := range cs {
		r.Release(c)
	}
}
