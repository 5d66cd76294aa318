package relay

import (
	"bytes"
	"runtime/pprof"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// goroutinesWith counts the goroutines whose stack mentions every one of
// frames.
func goroutinesWith(frames ...string) int {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 2)
	n := 0
	for _, g := range strings.Split(buf.String(), "\n\n") {
		all := true
		for _, f := range frames {
			all = all && strings.Contains(g, f)
		}
		if all {
			n++
		}
	}
	return n
}

const writerFrame = "relay.(*stream[...]).write("

// A stream's writer runs only while something is queued: once the clients
// hold every update, no writer goroutine is left, and an idle stream costs
// the relay its handler goroutine alone.
func TestIdleStreamsHaveNoWriter(t *testing.T) {
	h := newHarness(t)
	h.apply(ClusterType, true, resource(t, ClusterType, "A", 0))
	var clients []*client
	for range 3 {
		c := h.ads(t)
		c.subscribe(ClusterType)
		c.ack(c.next())
		clients = append(clients, c)
	}
	for v := 1; v <= 3; v++ {
		h.apply(ClusterType, true, resource(t, ClusterType, "A", v))
		for _, c := range clients {
			c.ack(c.next())
		}
	}
	eventually(t, "no writer goroutine left", func() bool { return goroutinesWith(writerFrame) == 0 })
	if n := goroutinesWith("relay.(*Server).serveSotW("); n != len(clients) {
		t.Fatalf("%d handler goroutines for %d streams", n, len(clients))
	}
	// A writer starts again for the next update.
	h.apply(ClusterType, true, resource(t, ClusterType, "A", 4))
	for _, c := range clients {
		if got := c.next(); len(got.GetResources()) != 1 {
			t.Fatalf("update after idle: %d resources", len(got.GetResources()))
		}
	}
}

// A request the relay refuses ends the stream with its status even while
// the stream's writer is blocked on the client's flow-control window: the
// handler does not wait on the writer forever.
func TestRefusedRequestEndsStreamWithBlockedWriter(t *testing.T) {
	h := newHarness(t)
	h.srv.opts.MaxCollapses = 0 // never disconnected as a laggard
	reasons := &reasonRecorder{}
	h.srv.metrics = reasons
	// Writers of streams an earlier test left may still be unwinding:
	// count this stream's own.
	blocked := goroutinesWith(writerFrame, "transport.(*writeQuota).get")
	s := h.slowADS(t)
	big := func(v int) {
		h.apply(ListenerType, true, encode(t, "L", &listenerv3.Listener{Name: "L", StatPrefix: strings.Repeat("x", 1<<20) + string(rune('a'+v))}))
	}
	big(0)
	if err := s.Send(&request{Node: h.node, TypeUrl: ListenerType}); err != nil {
		t.Fatal(err)
	}
	big(1)
	big(2)
	eventually(t, "the writer to block on flow control", func() bool {
		return goroutinesWith(writerFrame, "transport.(*writeQuota).get") == blocked+1
	})
	if err := s.Send(&request{TypeUrl: ""}); err != nil { // no type URL on ADS: refused
		t.Fatal(err)
	}
	eventually(t, "the stream to end", func() bool { return h.srv.StreamCount() == 0 })
	if got := reasons.get(); len(got) != 1 || got[0] != ReasonInvalidRequest {
		t.Fatalf("disconnect reasons = %v, want [%s]", got, ReasonInvalidRequest)
	}
	// The status waits behind the data the client has not read: read it all.
	var last error
	for last == nil {
		_, last = s.Recv()
	}
	if status.Code(last) != codes.InvalidArgument || !strings.Contains(last.Error(), "type_url") {
		t.Fatalf("stream ended with %v, want INVALID_ARGUMENT naming type_url", last)
	}
}
