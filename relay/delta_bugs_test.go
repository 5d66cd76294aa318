package relay

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/shard"
)

// classStall holds a class's lock, once armed, in the class's first
// interest change of typeURL until released (the class tells its interest
// hook with its lock held), so a test can stop whatever needs the class
// meanwhile.
type classStall struct {
	typeURL string
	armed   atomic.Bool
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func newClassStall(typeURL string) *classStall {
	return &classStall{typeURL: typeURL, entered: make(chan struct{}), release: make(chan struct{})}
}

// start is the registry's interest hook.
func (c *classStall) start(*shard.Class) func(string) {
	return func(typeURL string) {
		if typeURL != c.typeURL || !c.armed.Load() {
			return
		}
		c.once.Do(func() {
			close(c.entered)
			<-c.release
		})
	}
}

// A name newly subscribed to, which exists, must never be reported removed,
// even when a response of the stream's current shard is written while the
// relay is moving the stream to its new shard. The relay records the new
// name ("send it, or report it removed if absent") before it holds the new
// shard; a response of the old shard (which lacks the name) written in
// between would be diffed against that record, and with absence known the
// name would be reported removed, then sent a moment later. For a client
// this is a spurious deletion (on-demand CDS would fail the request that
// asked).
//
// The interleaving is forced, not timed: another subscription holds the
// class lock (in the class's interest hook), so the request stops in its
// shard switch (the stream shows it switching), and the test runs the
// stream's writer right then.
func TestDeltaNewNameNotRemovedDuringShardSwitch(t *testing.T) {
	stall := newClassStall(RuntimeType)
	srv, class, node := fuzzServerWith(stall.start, false, false)
	ep := func(name string, v int) *shard.Resource { return resource(t, EndpointType, name, v) }
	class.Apply(EndpointType, []*shard.Resource{ep("A", 1), ep("B", 1)}, true)
	class.Apply(RuntimeType, []*shard.Resource{resource(t, RuntimeType, "R", 1)}, false)
	tr := &fuzzTransport[*deltaRequest]{ctx: context.Background(), fuzzSent: &fuzzSent{}}
	st := newDeltaStream(srv, tr, "", variantDeltaADS)
	defer st.release()
	sent := func() []*deltaResponse {
		t.Helper()
		if err := st.writeQueued(); err != nil {
			t.Fatal(err)
		}
		var out []*deltaResponse
		for _, b := range tr.take() {
			r := &deltaResponse{}
			if err := proto.Unmarshal(b, r); err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		return out
	}
	if err := st.handle(&deltaRequest{Node: node, TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"A"}}); err != nil {
		t.Fatal(err)
	}
	if got := sent(); len(got) != 1 {
		t.Fatalf("%d first responses, want 1", len(got))
	}
	// An update of the stream's shard [A], queued and not written yet.
	class.Apply(EndpointType, []*shard.Resource{ep("A", 2), ep("B", 1)}, true)

	stall.armed.Store(true)
	w := &fuzzNopWatcher{}
	var rs *shard.Shard
	var once sync.Once
	release := func() { once.Do(func() { close(stall.release) }) }
	subscribed := make(chan error, 1)
	go func() {
		var err error
		rs, err = class.TrySubscribe(RuntimeType, shard.NewSubscription([]string{"R"}, false), w)
		subscribed <- err
	}()
	defer func() {
		release()
		if err := <-subscribed; err != nil {
			t.Error(err)
			return
		}
		class.Unsubscribe(rs, w)
	}()
	<-stall.entered // the class lock is held until release

	handled := make(chan error, 1)
	go func() {
		handled <- st.handle(&deltaRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"B"}})
	}()
	d := st.types.at(EndpointType)
	eventually(t, "the request in its shard switch", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.switching == d
	})
	for _, r := range sent() { // the old shard's update, mid-switch
		if len(r.RemovedResources) > 0 {
			t.Fatalf("response %v removes %v; B exists and was just subscribed to", deltaNames(r), r.RemovedResources)
		}
	}
	release()
	if err := <-handled; err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range sent() {
		if len(r.RemovedResources) > 0 {
			t.Fatalf("response %v removes %v; B exists and was just subscribed to", deltaNames(r), r.RemovedResources)
		}
		for _, res := range r.Resources {
			got[res.Name] = true
		}
	}
	if !got["A"] || !got["B"] {
		t.Fatalf("after the switch the client was sent %v, want A's update and B", got)
	}
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

// A push still on its way when the client changes its subscription: the
// client unsubscribes l1 and l2 before it has read the response sending l2,
// then subscribes "*". The relay marked l2 not held at the unsubscription,
// but the client applies the push it reads afterwards and holds l2. l2 is
// deleted before the wildcard is answered: that answer must report l2
// removed, else the client keeps it forever. The crossing is the client's
// not answering the push: its requests carry no nonce (it has processed no
// response), whatever the test has received.
func TestDeltaUnsubscribeCrossingPush(t *testing.T) {
	h := newHarness(t)
	cl := func(name string) *shard.Resource { return resource(t, ClusterType, name, 1) }
	h.apply(ClusterType, true, cl("c0"), cl("l2"))
	c := h.deltaADS(t)
	c.send(&deltaRequest{TypeUrl: ClusterType, ResourceNamesSubscribe: []string{"l1", "l2"},
		ResourceNamesUnsubscribe: []string{"*", "x"}})
	wantDelta(t, c.nextOf(ClusterType), []string{"l1"}, cl("l2")) // on its way: unread

	c.send(&deltaRequest{TypeUrl: ClusterType, ResourceNamesUnsubscribe: []string{"l1", "l2"}})
	c.fence()                            // unsubscribing needs no answer
	h.apply(ClusterType, true, cl("c0")) // l2 deleted
	c.send(&deltaRequest{TypeUrl: ClusterType, ResourceNamesSubscribe: []string{"*"}})
	// The client read the first push after its unsubscription: it holds l2.
	c.ackNext(ClusterType, []string{"l2"}, cl("c0"))
	c.fence()
}
