package upstream

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// What a control plane can send a class stream the relay does not read is
// bounded by DefaultStreamWindow, however long it keeps sending: a server
// floods streams of the relay's upstream connection that nobody reads, and
// each stream's sent bytes settle at the window plus what gRPC queues on
// the server's side, neither below the window (the default 64 KiB) nor
// growing past it (gRPC's bandwidth estimate would raise it to 16 MiB).
func TestUpstreamStreamWindowBoundsUnreadBytes(t *testing.T) {
	t.Run("default", func(t *testing.T) { testStreamWindowBound(t, 0, DefaultStreamWindow) })
	t.Run("configured", func(t *testing.T) { testStreamWindowBound(t, 256<<10, 256<<10) })
}

// testStreamWindowBound floods unread streams of a client configured with
// stream window configured (0: the default) and checks each settles at
// want.
func testStreamWindowBound(t *testing.T, configured, want int32) {
	const streams, msgSize = 8, 32 << 10
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var sent [streams]atomic.Int64
	var opened atomic.Int32
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
		i := opened.Add(1) - 1
		msg := &wrapperspb.BytesValue{Value: make([]byte, msgSize)}
		for {
			if err := st.SendMsg(msg); err != nil {
				return err
			}
			sent[i].Add(msgSize)
		}
	}))
	go srv.Serve(lis) // ends with srv.Stop below
	defer srv.Stop()

	c, err := New(Config{Address: lis.Addr().String(), StreamWindow: configured}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	desc := &grpc.StreamDesc{StreamName: "Flood", ServerStreams: true, ClientStreams: true}
	for range streams {
		st, err := c.pool.conns[0].cc.NewStream(ctx, desc, "/flood.Flood/Flood")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(&wrapperspb.BytesValue{}); err != nil { // the server starts on the stream's first message
			t.Fatal(err)
		}
	}

	// Wait until nothing more is sent for a while (bounded).
	total := func() (n int64) {
		for i := range sent {
			n += sent[i].Load()
		}
		return n
	}
	last, still := int64(-1), 0
	for deadline := time.Now().Add(20 * time.Second); still < 10 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if n := total(); n == last {
			still++
		} else {
			last, still = n, 0
		}
	}
	if still < 10 {
		t.Fatalf("the server was still sending after 20 s: %d bytes", total())
	}
	// gRPC's server queues up to 64 KiB a stream beyond the window, plus the
	// message being written.
	const slack = 64<<10 + 2*msgSize
	for i := range sent {
		if n := sent[i].Load(); n < int64(want) || n > int64(want)+slack {
			t.Errorf("stream %d: %d bytes sent unread, want the window (%d) to %d", i, n, want, int64(want)+slack)
		}
	}
}
