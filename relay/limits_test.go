package relay

import (
	"strings"
	"sync"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func wantStatus(t *testing.T, err error, code codes.Code, substr string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(err.Error(), substr) {
		t.Fatalf("stream ended with %v, want %v mentioning %q", err, code, substr)
	}
}

// Past MaxStreams, a new stream is refused so its client tries another relay.
func TestMaxStreams(t *testing.T) {
	h := newHarness(t)
	h.srv.opts.MaxStreams = 2
	h.apply(ClusterType, true, resource(t, ClusterType, "A", 1))
	for i := 0; i < 2; i++ {
		c := h.ads(t)
		c.subscribe(ClusterType)
		c.nextOf(ClusterType)
	}
	third := h.ads(t)
	// The relay refuses the stream before reading it: the send may already
	// find it closed (io.EOF); the status is what counts.
	_ = third.s.Send(&request{Node: h.node, TypeUrl: ClusterType})
	wantStatus(t, third.recvError(), codes.ResourceExhausted, "limit of 2 streams")
}

// A stream sending requests faster than its rate allows is ended.
func TestRequestRateLimit(t *testing.T) {
	h := newHarness(t)
	h.srv.opts.RequestsPerSecond, h.srv.opts.RequestBurst = 0.001, 3
	c := h.ads(t)
	for i := 0; i < 5; i++ {
		// The relay ends the stream at the fourth: a later send may find it
		// closed (io.EOF); the status is what counts.
		_ = c.s.Send(&request{Node: h.node, TypeUrl: RuntimeType, ResourceNames: []string{"r"}})
	}
	wantStatus(t, c.recvError(), codes.ResourceExhausted, "requests: more than")
}

// The client's answers to the relay's own pushes do not count against its
// rate: with a burst of 3 and no refill, a client ACKs 10 updates of a
// fast-changing control plane and stays connected; its requests beyond one
// answer per push are still limited.
func TestAnswersToPushesAreNotRateLimited(t *testing.T) {
	h := newHarness(t)
	h.srv.opts.RequestsPerSecond, h.srv.opts.RequestBurst = 0.001, 3
	c := h.ads(t)
	h.apply(ClusterType, true, resource(t, ClusterType, "A", 0))
	c.subscribe(ClusterType) // 1 of the burst
	c.ack(c.nextOf(ClusterType))
	for v := 1; v <= 10; v++ {
		h.apply(ClusterType, true, resource(t, ClusterType, "A", v))
		c.ack(c.nextOf(ClusterType))
	}
	c.fence() // the burst's second request, answered: the stream is alive
	last := c.last[ClusterType]
	for i := 0; i < 3; i++ { // re-sent answers: nothing owed any more
		c.send(&request{TypeUrl: ClusterType, VersionInfo: last.VersionInfo, ResponseNonce: last.Nonce})
	}
	wantStatus(t, c.recvError(), codes.ResourceExhausted, "requests: more than")
}

// A chronic laggard — a client that keeps falling 64 responses behind — is
// disconnected with a reason, instead of holding the relay's memory.
func TestSlowClientDisconnected(t *testing.T) {
	h := newHarness(t)
	h.srv.opts.MaxCollapses = 1
	reasons := &reasonRecorder{}
	h.srv.metrics = reasons
	s := h.slowADS(t) // and it does not read
	h.apply(ListenerType, true, resource(t, ListenerType, "L", 0))
	h.apply(ClusterType, true, resource(t, ClusterType, "A", 0))
	for _, typeURL := range []string{ListenerType, ClusterType} {
		if err := s.Send(&request{Node: h.node, TypeUrl: typeURL}); err != nil {
			t.Fatal(err)
		}
	}
	big := func(v int) {
		h.apply(ListenerType, true, encode(t, "L", &listenerv3.Listener{Name: "L", StatPrefix: strings.Repeat("x", 1<<20) + string(rune('a'+v%26))}))
	}
	big(0)
	big(1)
	// The writer is stuck on the big listener; updates of two types
	// alternate, so the queue cannot coalesce and overflows.
	for i := 0; i < 2*maxPending+2; i++ {
		h.apply(ClusterType, true, resource(t, ClusterType, "A", i+1))
		big(i + 2)
	}
	eventually(t, "the laggard to be disconnected", func() bool { return h.srv.StreamCount() == 0 })
	// Its connection was closed under it: the client sees the stream fail.
	var last error
	for last == nil {
		_, last = s.Recv()
	}
	if got := reasons.get(); len(got) != 1 || got[0] != ReasonSlowClient {
		t.Fatalf("disconnect reasons = %v, want [%s]", got, ReasonSlowClient)
	}
}

// reasonRecorder records why streams ended.
type reasonRecorder struct {
	NopMetrics
	mu      sync.Mutex
	reasons []string
}

func (r *reasonRecorder) StreamClosed(_, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reasons = append(r.reasons, reason)
}

func (r *reasonRecorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.reasons...)
}
