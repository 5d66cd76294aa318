package relay

import (
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// parent is a Cluster or Listener resource that refers to children (as the
// upstream's validator records them).
func parent(t *testing.T, typeURL, name string, v int, children ...string) *shard.Resource {
	t.Helper()
	r := deltaResource(t, typeURL, name, v)
	return shard.NewResource(r.Name, r.Any, r.Hash, r.Rare, children, nil)
}

// orderSetup has a delta ADS client hold clusters A and B and the endpoints
// of both (B's EDS service name is "b-eds"), all from an upstream that
// reports deletions (ApplyDelta: absence is known for every type).
func orderSetup(t *testing.T, wait time.Duration) (*harness, *deltaClient) {
	t.Helper()
	h := newHarness(t)
	h.srv.opts.ParentRemovalWait = wait // before any stream exists
	ca, cb := parent(t, ClusterType, "A", 1, "A"), parent(t, ClusterType, "B", 1, "b-eds")
	ea, eb := deltaResource(t, EndpointType, "A", 1), deltaResource(t, EndpointType, "b-eds", 1)
	applyDelta(h.class, ClusterType, []*shard.Resource{ca, cb}, nil)
	applyDelta(h.class, EndpointType, []*shard.Resource{ea, eb}, nil)

	c := h.deltaADS(t)
	c.subscribe(ClusterType, "*")
	r := c.nextOf(ClusterType)
	wantDelta(t, r, nil, ca, cb)
	c.ack(r)
	c.subscribe(EndpointType, "A", "b-eds")
	r = c.nextOf(EndpointType)
	wantDelta(t, r, nil, ea, eb)
	c.ack(r)
	return h, c
}

// The upstream removes a cluster before its endpoints: the delta client is
// told of the endpoints' removal first, then of the cluster's.
func TestDeltaChildRemovedBeforeParent(t *testing.T) {
	h, c := orderSetup(t, time.Minute)

	applyDelta(h.class, ClusterType, nil, []string{"B"})
	c.fence() // the cluster's removal waits for its endpoints'
	applyDelta(h.class, EndpointType, nil, []string{"b-eds"})
	wantDelta(t, c.nextOf(EndpointType), []string{"b-eds"})
	wantDelta(t, c.nextOf(ClusterType), []string{"B"})

	// Other changes are not held: a cluster change and a removal in one
	// update send the change at once, the removal after the endpoints'.
	cc := parent(t, ClusterType, "C", 1, "c-eds")
	applyDelta(h.class, ClusterType, []*shard.Resource{cc}, nil)
	wantDelta(t, c.nextOf(ClusterType), nil, cc)
	// The endpoints exist before the client asks for them: subscribed
	// first, a name the class does not hold is answered removed or with
	// the resource, whichever the stream reads first.
	ec := deltaResource(t, EndpointType, "c-eds", 1)
	applyDelta(h.class, EndpointType, []*shard.Resource{ec}, nil)
	c.subscribe(EndpointType, "c-eds")
	wantDelta(t, c.nextOf(EndpointType), nil, ec)
	ca2 := parent(t, ClusterType, "A", 2, "A")
	applyDelta(h.class, ClusterType, []*shard.Resource{ca2}, []string{"C"})
	wantDelta(t, c.nextOf(ClusterType), nil, ca2)
	// A later cluster update keeps holding C's removal.
	ca3 := parent(t, ClusterType, "A", 3, "A")
	applyDelta(h.class, ClusterType, []*shard.Resource{ca3}, nil)
	wantDelta(t, c.nextOf(ClusterType), nil, ca3)
	c.fence()
	applyDelta(h.class, EndpointType, nil, []string{"c-eds"})
	wantDelta(t, c.nextOf(EndpointType), []string{"c-eds"})
	wantDelta(t, c.nextOf(ClusterType), []string{"C"})
}

// A client that drops the endpoints itself releases the held removal; so
// does the end of the wait when the endpoints' removal never comes.
func TestDeltaParentRemovalReleased(t *testing.T) {
	t.Run("unsubscribed", func(t *testing.T) {
		h, c := orderSetup(t, time.Minute)
		applyDelta(h.class, ClusterType, nil, []string{"B"})
		c.fence()
		c.unsubscribe(EndpointType, "b-eds")
		wantDelta(t, c.nextOf(ClusterType), []string{"B"})
	})
	t.Run("parent back", func(t *testing.T) {
		h, c := orderSetup(t, time.Minute)
		applyDelta(h.class, ClusterType, nil, []string{"B"})
		c.fence()
		applyDelta(h.class, ClusterType, []*shard.Resource{parent(t, ClusterType, "B", 1, "b-eds")}, nil)
		c.fence() // the client still holds that very B: nothing to tell
		applyDelta(h.class, EndpointType, nil, []string{"b-eds"})
		wantDelta(t, c.nextOf(EndpointType), []string{"b-eds"})
		c.fence() // and B's removal is no longer due
	})
	t.Run("wait over", func(t *testing.T) {
		h, c := orderSetup(t, 50*time.Millisecond)
		applyDelta(h.class, ClusterType, nil, []string{"B"})
		wantDelta(t, c.nextOf(ClusterType), []string{"B"})
		// The endpoints' removal, if it ever comes, still reaches the client.
		applyDelta(h.class, EndpointType, nil, []string{"b-eds"})
		wantDelta(t, c.nextOf(EndpointType), []string{"b-eds"})
	})
}

// With a SotW upstream the endpoints' removal is never known, so nothing
// waits for it: the cluster's removal is sent at once.
func TestDeltaParentRemovalNotHeldWithoutChildAbsence(t *testing.T) {
	h := newHarness(t)
	h.srv.opts.ParentRemovalWait = time.Hour
	ca, cb := parent(t, ClusterType, "A", 1, "A"), parent(t, ClusterType, "B", 1, "B")
	h.apply(ClusterType, true, ca, cb)
	h.apply(EndpointType, false, deltaResource(t, EndpointType, "A", 1), deltaResource(t, EndpointType, "B", 1))

	c := h.deltaADS(t)
	c.subscribe(ClusterType, "*")
	c.ack(c.nextOf(ClusterType))
	c.subscribe(EndpointType, "A", "B")
	c.ack(c.nextOf(EndpointType))
	h.apply(ClusterType, true, ca)
	wantDelta(t, c.nextOf(ClusterType), []string{"B"})
}

// A Listener's removal waits for its RouteConfiguration's, as a Cluster's
// for its endpoints'.
func TestDeltaRouteRemovedBeforeListener(t *testing.T) {
	h := newHarness(t)
	h.srv.opts.ParentRemovalWait = time.Minute
	l := parent(t, ListenerType, "L", 1, "R")
	rc := deltaResource(t, RouteType, "R", 1)
	applyDelta(h.class, ListenerType, []*shard.Resource{l}, nil)
	applyDelta(h.class, RouteType, []*shard.Resource{rc}, nil)

	c := h.deltaADS(t)
	c.subscribe(ListenerType, "*")
	c.ack(c.nextOf(ListenerType))
	c.subscribe(RouteType, "R")
	c.ack(c.nextOf(RouteType))

	applyDelta(h.class, ListenerType, nil, []string{"L"})
	applyDelta(h.class, RouteType, nil, []string{"R"})
	wantDelta(t, c.nextOf(RouteType), []string{"R"})
	wantDelta(t, c.nextOf(ListenerType), []string{"L"})
}

// deltaCodecTransport is codecTransport for a delta stream.
type deltaCodecTransport struct{ codecTransport }

func (c *deltaCodecTransport) Recv() (*deltaRequest, error) { return nil, errStep }

// A delta stream in sync that is sent a version removing a cluster whose
// endpoints it does not hold gets the version's shared delta body: checking
// the removal order allocates nothing (the codec's buffer slice is the
// one allocation, as for SotW).
func TestDeltaRemovalOrderAllocations(t *testing.T) {
	srv, class, node := fuzzServer(false, false)
	c0 := parent(t, ClusterType, "c0", 1, "e0")
	c1 := parent(t, ClusterType, "c1", 1, "e1")
	applyDelta(class, ClusterType, []*shard.Resource{c0, c1}, nil)
	applyDelta(class, EndpointType, []*shard.Resource{deltaResource(t, EndpointType, "e0", 1), deltaResource(t, EndpointType, "e1", 1)}, nil)

	tr := &deltaCodecTransport{codecTransport{codec: wire.NewCodec()}}
	st := newDeltaStream(srv, tr, "", "delta-ads")
	for _, req := range []*deltaRequest{
		{Node: node, TypeUrl: ClusterType, ResourceNamesSubscribe: []string{"*"}},
		{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"e0"}},
	} {
		if err := st.handle(req); err != nil {
			t.Fatal(err)
		}
	}
	flushDelta := func() {
		if err := st.writeQueued(); err != nil {
			t.Fatal(err)
		}
	}
	flushDelta()
	d := st.types.at(ClusterType)
	sh := d.shard
	before := sh.Current()
	applyDelta(class, ClusterType, nil, []string{"c1"})
	after := sh.Current()
	flushDelta()
	if len(after.Removed) != 1 || d.base != after || len(d.over) != 0 {
		t.Fatalf("setup: removed %v, stream at the new version %v, overrides %v", after.Removed, d.base == after, d.over)
	}
	pushes := d.pushes
	allocs := testing.AllocsPerRun(1000, func() {
		st.mu.Lock()
		d.base = before
		st.queue.push(d, sh, after, false)
		st.mu.Unlock()
		flushDelta()
	})
	if allocs > 1 {
		t.Fatalf("sending a shared delta body with a removal allocates %v times, want 1 (the codec's buffer slice)", allocs)
	}
	if d.pushes-pushes < 1000 {
		t.Fatalf("%d pushes: the measured sends did not happen", d.pushes-pushes)
	}
}
