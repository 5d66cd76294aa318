package relay

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/shard"
)

// stallWatcher holds the class lock inside its first ShardChanged until
// released, so a test can line up what waits for the lock behind it.
type stallWatcher struct {
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func newStallWatcher() *stallWatcher {
	return &stallWatcher{entered: make(chan struct{}), release: make(chan struct{})}
}

func (w *stallWatcher) ShardHeartbeat(*shard.Shard, *shard.Heartbeat) {}

func (w *stallWatcher) ShardChanged(*shard.Shard) {
	w.once.Do(func() {
		close(w.entered)
		<-w.release
	})
}

// A name newly subscribed to, which exists, must never be reported removed,
// even when an upstream update of the stream's current shard lands while
// the relay is moving the stream to its new shard. The relay records the
// new name ("send it, or report it removed if absent") before it holds the
// new shard; an update of the old shard (which lacks the name) written in
// between is diffed against that record, and with absence known the name is
// reported removed, then sent a moment later. For a client this is a
// spurious deletion (on-demand CDS would fail the request that asked).
//
// The interleaving is forced with watchers that hold the class lock: the
// class lock is granted in arrival order, so the update of the old shard
// (and then a stall) are served before the stream's subscription change.
func TestDeltaNewNameNotRemovedDuringShardSwitch(t *testing.T) {
	h := newHarness(t)
	ep := func(name string, v int) *shard.Resource { return resource(t, EndpointType, name, v) }
	rt := func(name string, v int) *shard.Resource { return resource(t, RuntimeType, name, v) }
	h.apply(EndpointType, true, ep("A", 1), ep("B", 1))
	h.apply(RuntimeType, false, rt("R", 1), rt("S", 1))

	w1, w2 := newStallWatcher(), newStallWatcher()
	s1, err1 := h.class.TrySubscribe(RuntimeType, shard.NewSubscription([]string{"R"}, false), w1)
	s2, err2 := h.class.TrySubscribe(RuntimeType, shard.NewSubscription([]string{"S"}, false), w2)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	var once1, once2 sync.Once
	release1 := func() { once1.Do(func() { close(w1.release) }) }
	release2 := func() { once2.Do(func() { close(w2.release) }) }
	var wg sync.WaitGroup
	defer func() {
		release1()
		release2()
		wg.Wait()
		h.class.Unsubscribe(s1, w1)
		h.class.Unsubscribe(s2, w2)
	}()

	c := h.deltaADS(t)
	c.fenceType = SecretType
	c.subscribe(EndpointType, "A")
	r := c.nextOf(EndpointType)
	wantDelta(t, r, nil, ep("A", 1))
	c.ack(r)
	c.fence()

	wg.Add(3)
	go func() { defer wg.Done(); h.apply(RuntimeType, false, rt("R", 2)) }() // holds the lock in w1
	<-w1.entered
	go func() { defer wg.Done(); h.apply(EndpointType, true, ep("A", 2), ep("B", 1)) }() // 1st in line
	time.Sleep(50 * time.Millisecond)
	go func() { defer wg.Done(); h.apply(RuntimeType, false, rt("S", 2)) }() // 2nd: holds the lock in w2
	time.Sleep(50 * time.Millisecond)
	c.subscribe(EndpointType, "B") // 3rd: the stream's move to shard [A B]
	eventually(t, "the request handled up to the shard switch", func() bool {
		return slices.Contains(h.typeStatus(t, EndpointType).Names, "B")
	})
	time.Sleep(50 * time.Millisecond)

	release1() // the update of [A] is served, then w2 holds the lock
	<-w2.entered
	time.Sleep(100 * time.Millisecond) // the stream, still on [A], writes A's update
	release2()

	got := map[string]bool{}
	for !got["A"] || !got["B"] {
		r := c.nextOf(EndpointType)
		if len(r.RemovedResources) > 0 {
			t.Fatalf("response %v removes %v; B exists and was just subscribed to", deltaNames(r), r.RemovedResources)
		}
		for _, res := range r.Resources {
			got[res.Name] = true
		}
		c.ack(r)
	}
	c.fence()
}

// Unsubscribing "*" keeps the explicit names; what the client held only
// through the wildcard is not reported removed (it still exists). That holds
// also when the client unsubscribes "*" before its first response: a
// reconnecting client's initial_resource_versions are what it holds then.
// The relay forgets only names of the last response it sent (none yet), so
// the resources the client declared are later diffed as "held, now absent"
// and reported removed although they exist.
func TestDeltaUnsubscribeWildcardBeforeFirstResponse(t *testing.T) {
	h := newHarness(t)
	cl := func(name string) *shard.Resource { return resource(t, ClusterType, name, 1) }
	c := h.deltaADS(t)
	c.send(&deltaRequest{TypeUrl: ClusterType, ResourceNamesSubscribe: []string{"*", "A"},
		InitialResourceVersions: map[string]string{"A": cl("A").Version(), "B": cl("B").Version(), "C": cl("C").Version()}})
	c.unsubscribe(ClusterType, "*")
	c.fence() // no data yet: nothing to say

	h.apply(ClusterType, true, cl("A"), cl("B"), cl("C"))
	c.fence() // A is held at its version; B and C exist: nothing to say
	if ts := h.typeStatus(t, ClusterType); ts.Wildcard || !slices.Equal(ts.Names, []string{"A"}) {
		t.Fatalf("subscription wildcard=%v names=%v, want [A]", ts.Wildcard, ts.Names)
	}
}
