package relay

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/xds-relay/xds-relay/relay/overload"
)

// gatedHarness is a harness whose server asks a memory monitor with a
// 1000-byte budget (marks 800 and 900) whose heap the test sets; step
// samples it.
func gatedHarness(t *testing.T) (h *harness, heap *atomic.Uint64, step func(uint64)) {
	t.Helper()
	h = newHarness(t)
	heap = new(atomic.Uint64)
	m := overload.New(overload.Config{Budget: 1000, ShedRatio: 0.8, RefuseRatio: 0.9, Interval: time.Hour,
		Read: heap.Load, Collect: func() {}})
	h.srv.opts.Admission = m
	return h, heap, func(n uint64) { heap.Store(n); m.Step() }
}

// Past the refuse mark a new stream, a subscription that would add a
// shard and a REST poll of a shard not held are refused with
// RESOURCE_EXHAUSTED (429) naming the budget's key; streams already served
// keep their updates, may drop names and may join a shard the class
// holds. Below the mark again, new streams are served.
func TestOverloadRefusesNewKeepsServed(t *testing.T) {
	h, _, step := gatedHarness(t)
	h.apply(EndpointType, false, resource(t, EndpointType, "a", 1), resource(t, EndpointType, "b", 1), resource(t, EndpointType, "c", 1))
	served := h.ads(t)
	served.subscribe(EndpointType, "a", "b")
	served.ack(served.nextOf(EndpointType))
	wide := h.ads(t)
	wide.subscribe(EndpointType, "a", "b", "c")
	wide.ack(wide.nextOf(EndpointType))
	grower := h.ads(t)
	grower.subscribe(EndpointType, "a")
	grower.ack(grower.nextOf(EndpointType))
	ts := restServer(t, h, 0)
	wantOK(t, poll(t, ts, EndpointType, &request{Node: h.node, ResourceNames: []string{"a", "b"}}), EndpointType)

	step(950)
	refused := h.ads(t)
	// Refused before it is read: the send may find it closed (io.EOF).
	_ = refused.s.Send(&request{Node: h.node, TypeUrl: EndpointType, ResourceNames: []string{"a"}})
	wantStatus(t, refused.recvError(), codes.ResourceExhausted, overload.BudgetKey)

	h.apply(EndpointType, false, resource(t, EndpointType, "a", 2))
	wantResources(t, served.nextOf(EndpointType), resource(t, EndpointType, "a", 2), resource(t, EndpointType, "b", 1))
	served.ack(served.last[EndpointType])
	served.subscribe(EndpointType, "a")           // fewer names: nothing to send
	served.subscribe(EndpointType, "a", "b", "c") // the shard of wide
	wantResources(t, served.nextOf(EndpointType), resource(t, EndpointType, "a", 2), resource(t, EndpointType, "b", 1), resource(t, EndpointType, "c", 1))

	wantOK(t, poll(t, ts, EndpointType, &request{Node: h.node, ResourceNames: []string{"a", "b", "c"}}), EndpointType)
	wantError(t, poll(t, ts, EndpointType, &request{Node: h.node, ResourceNames: []string{"b", "c"}}), http.StatusTooManyRequests, overload.BudgetKey)

	grower.ack(grower.nextOf(EndpointType)) // a's update
	grower.subscribe(EndpointType, "a", "c")
	wantStatus(t, grower.recvError(), codes.ResourceExhausted, overload.BudgetKey)

	step(860) // within the hysteresis: still refusing
	again := h.ads(t)
	_ = again.s.Send(&request{Node: h.node, TypeUrl: EndpointType, ResourceNames: []string{"a"}})
	wantStatus(t, again.recvError(), codes.ResourceExhausted, overload.BudgetKey)

	step(700)
	back := h.ads(t)
	back.subscribe(EndpointType, "b", "c")
	wantResources(t, back.nextOf(EndpointType), resource(t, EndpointType, "b", 1), resource(t, EndpointType, "c", 1))
}

// The same for delta streams: past the refuse mark a new delta stream and
// a delta subscription adding a name are refused naming the key, while a
// served delta stream keeps its updates and may unsubscribe.
func TestOverloadRefusesNewDelta(t *testing.T) {
	h, _, step := gatedHarness(t)
	h.apply(EndpointType, false, deltaResource(t, EndpointType, "a", 1), deltaResource(t, EndpointType, "b", 1))
	served := h.deltaADS(t)
	served.subscribe(EndpointType, "a", "b")
	served.ack(served.nextOf(EndpointType))
	grower := h.deltaADS(t)
	grower.subscribe(EndpointType, "a")
	grower.ack(grower.nextOf(EndpointType))

	step(950)
	refused := h.deltaADS(t)
	_ = refused.s.Send(&deltaRequest{Node: h.node, TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"}})
	wantStatus(t, refused.recvError(), codes.ResourceExhausted, overload.BudgetKey)

	h.apply(EndpointType, false, deltaResource(t, EndpointType, "b", 2))
	wantDelta(t, served.nextOf(EndpointType), nil, deltaResource(t, EndpointType, "b", 2))
	served.ack(served.last[EndpointType])
	served.unsubscribe(EndpointType, "b") // fewer names: served

	grower.subscribe(EndpointType, "c") // {a, c}: no shard has it
	wantStatus(t, grower.recvError(), codes.ResourceExhausted, overload.BudgetKey)

	h.apply(EndpointType, false, deltaResource(t, EndpointType, "a", 2))
	wantDelta(t, served.nextOf(EndpointType), nil, deltaResource(t, EndpointType, "a", 2))
}
