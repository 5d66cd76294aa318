package relay

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A stream's handler goroutine spends its life in Recv, yet gRPC ends a
// stream with the handler's status only when the handler returns, and a
// Recv that fails writes a status of its own (CANCELLED) first. To end a
// stream from elsewhere (drain, a slow client) with the status it means,
// the relay does what gRPC's own SendMsg and RecvMsg do when they fail: it
// writes the status on the transport stream, which also cancels the
// stream's context, so Recv and a SendMsg waiting on flow control return.

// statusWriter is the part of gRPC's transport stream (the
// grpc.ServerTransportStream in a handler's context) that ends the stream
// with a status; safe to call from any goroutine, and a no-op once the
// stream has ended.
type statusWriter interface {
	WriteStatus(*status.Status) error
}

// streamEnder returns the statusWriter of the stream ctx belongs to, nil if
// there is none (a test's fake transport).
func streamEnder(ctx context.Context) statusWriter {
	w, _ := grpc.ServerTransportStreamFromContext(ctx).(statusWriter)
	return w
}

// errNoEnder refuses every stream if the gRPC in use no longer lets the
// relay end a stream (a gRPC upgrade changed its transport stream): no test
// of a stream passes then, so the upgrade cannot land unnoticed.
var errNoEnder = status.Error(codes.Internal, "xds-relay: this gRPC version's server streams cannot be ended by the relay (transport stream without WriteStatus)")
