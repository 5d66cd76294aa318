package shard

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// lifecycleRegistry is a registry with lifecycle life whose Drop reports on
// the returned channel; it counts the interest changes of its classes.
func lifecycleRegistry(t *testing.T, life Lifecycle) (*Registry, chan *Class, *sync.Map) {
	t.Helper()
	dropped := make(chan *Class, 1000)
	var interest sync.Map // class name -> *[]string (guarded by the class lock)
	life.Drop = func(c *Class) { dropped <- c }
	r := NewRegistryWith(mustClassifier(t, nil), func(c *Class) func(string) {
		var changes []string
		interest.Store(c.Name, &changes)
		return func(typeURL string) { changes = append(changes, typeURL) }
	}, life)
	t.Cleanup(r.Close)
	return r, dropped, &interest
}

func node(cluster string) *corev3.Node { return &corev3.Node{Id: "n-" + cluster, Cluster: cluster} }

// A class left by its last stream keeps its shard (and so its upstream
// interest) while it lingers: a stream coming back gets the same shard,
// already holding the state. A shard left unwatched after the class came
// back is swept when the linger ends.
func TestLingeringClassKeepsShards(t *testing.T) {
	// The linger timers run on the bubble's fake clock (testing/synctest):
	// nothing lingers out before the test says so.
	synctest.Test(t, func(t *testing.T) {
		const linger = 20 * time.Millisecond
		r, dropped, interest := lifecycleRegistry(t, Lifecycle{Linger: linger})
		c, err := r.Acquire(node("a"))
		if err != nil {
			t.Fatal(err)
		}
		w := &recorder{}
		wild := c.Subscribe(ClusterType, NewSubscription(nil, true), w)
		c.Apply(ClusterType, []*Resource{res("x", "1")}, true)
		r.Release(c)
		c.Unsubscribe(wild, w)
		changes, _ := interest.Load("a")
		if got := *changes.(*[]string); len(got) != 1 {
			t.Fatalf("interest changes %v: the lingering class dropped its wildcard interest", got)
		}

		c2, err := r.Acquire(node("a"))
		if err != nil || c2 != c {
			t.Fatalf("Acquire within the linger: %p %v, want the lingering class %p", c2, err, c)
		}
		if s := c2.Subscribe(ClusterType, NewSubscription(nil, true), w); s != wild || s.Current() == nil || len(s.Current().Names) != 1 {
			t.Fatalf("returning stream got shard %p (%+v), want the kept shard %p with its state", s, s.Current(), wild)
		}
		// A shard left while the class is in use goes at once; one left while
		// it lingered goes when the linger ends.
		named := c.Subscribe(ClusterType, NewSubscription([]string{"x"}, false), w)
		c.Unsubscribe(named, w)
		c.Unsubscribe(wild, w) // the class is leased: removed at once
		if n := c.shardCount(); n != 0 {
			t.Fatalf("%d shards left by their watchers of a leased class, want 0", n)
		}

		kept := &recorder{}
		edsShard := c.Subscribe(edsType, NewSubscription([]string{"e"}, false), kept)
		r.Release(c)
		c.Unsubscribe(edsShard, kept) // kept while idle
		if _, err := r.Acquire(node("a")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(linger) // the bubble's clock: the linger ends, nothing else moves
		synctest.Wait()
		if n := c.shardCount(); n != 0 {
			t.Fatalf("%d shards after the linger, want the unwatched one swept", n)
		}
		select {
		case d := <-dropped:
			t.Fatalf("class %s dropped while leased", d.Name)
		default:
		}
		r.Release(c)
		if d := <-dropped; d != c {
			t.Fatalf("dropped %p, want %p", d, c)
		}
		if names := r.Classes(); len(names) != 0 {
			t.Fatalf("registry still holds %d classes", len(names))
		}
		c3, _ := r.Acquire(node("a"))
		if c3 == c {
			t.Fatal("a dropped class was reused")
		}
		r.Release(c3)
	})
}

// Streams acquiring and releasing while classes are dropped always end up
// in a live class: a leased class is never dropped, and every class dropped
// had no lease.
func TestAcquireRacesDrop(t *testing.T) {
	var mu sync.Mutex
	leased := map[*Class]int{}
	var bad []string
	r := NewRegistryWith(mustClassifier(t, nil), nil, Lifecycle{Linger: time.Microsecond, Drop: func(c *Class) {
		mu.Lock()
		defer mu.Unlock()
		if leased[c] > 0 {
			bad = append(bad, fmt.Sprintf("%s dropped with %d leases", c.Name, leased[c]))
		}
	}})
	defer r.Close()
	concurrently(8, func(g int) {
		w := &recorder{}
		for i := range 500 {
			c, err := r.Acquire(node(fmt.Sprintf("c%d", (g+i)%3)))
			if err != nil {
				t.Error(err)
				return
			}
			r.mu.Lock()
			if c.dropped {
				t.Errorf("Acquire returned a dropped class %s", c.Name)
			}
			r.mu.Unlock()
			mu.Lock()
			leased[c]++
			mu.Unlock()
			s := c.Subscribe(edsType, NewSubscription([]string{"x"}, false), w)
			mu.Lock()
			leased[c]--
			mu.Unlock()
			r.Release(c)
			c.Unsubscribe(s, w)
		}
	})
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatal(bad)
	}
}

// MaxClasses refuses a new class while every class is in use, and evicts
// the longest-lingering class otherwise.
func TestMaxClasses(t *testing.T) {
	r, dropped, _ := lifecycleRegistry(t, Lifecycle{Linger: time.Hour, MaxClasses: 2})
	a, _ := r.Acquire(node("a"))
	b, _ := r.Acquire(node("b"))
	_, err := r.Acquire(node("c"))
	var limit *MaxClassesError
	if !errors.As(err, &limit) || limit.Max != 2 || !contains(err.Error(), "limits.max_classes") {
		t.Fatalf("third class: %v, want MaxClassesError naming limits.max_classes", err)
	}
	if again, err := r.Acquire(node("a")); err != nil || again != a {
		t.Fatalf("an existing class after the refusal: %v", err)
	}
	r.Release(a)
	r.Release(a) // both leases: a lingers first
	r.Release(b)
	c, err := r.Acquire(node("c"))
	if err != nil {
		t.Fatalf("a lingering class should have been evicted: %v", err)
	}
	if d := <-dropped; d != a {
		t.Fatalf("evicted %s, want the longest idle a", d.Name)
	}
	if got := r.Classes(); len(got) != 2 || got[0] != b || got[1] != c {
		t.Fatalf("classes %v, want [b c]", got)
	}
	r.Release(c)
}
