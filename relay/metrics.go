package relay

import (
	"errors"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Metrics receives the downstream events the relay counts. It is called on
// the hot path, some calls with a stream's lock held: implementations must
// be cheap, non-blocking and safe for concurrent use. Label values passed
// are bounded: variants, type URLs the relay serves, class names.
type Metrics interface {
	StreamOpened(variant string)
	StreamClosed(variant, reason string)
	// TypeSubscribed and TypeUnsubscribed track a stream's types (+1/-1).
	TypeSubscribed(variant, typeURL string)
	TypeUnsubscribed(variant, typeURL string)
	// Pushed counts one response written to a client.
	Pushed(variant, typeURL string, bytes int)
	ClientACK(class, typeURL string)
	ClientNACK(class, typeURL string)
	// QueueCollapsed counts a slow client's queue jumping to the latest
	// state (responses dropped).
	QueueCollapsed(variant string)
	// LoadReportReceived counts a client's load report merged into its
	// class's window (lrs.go).
	LoadReportReceived(class string)
}

// NopMetrics discards every event.
type NopMetrics struct{}

var _ Metrics = NopMetrics{}

func (NopMetrics) StreamOpened(string)             {}
func (NopMetrics) StreamClosed(string, string)     {}
func (NopMetrics) TypeSubscribed(string, string)   {}
func (NopMetrics) TypeUnsubscribed(string, string) {}
func (NopMetrics) Pushed(string, string, int)      {}
func (NopMetrics) ClientACK(string, string)        {}
func (NopMetrics) ClientNACK(string, string)       {}
func (NopMetrics) QueueCollapsed(string)           {}
func (NopMetrics) LoadReportReceived(string)       {}

// Disconnect reasons, as counted.
const (
	ReasonClientClosed   = "client_closed"
	ReasonDrain          = "drain"
	ReasonInvalidRequest = "invalid_request"
	ReasonLimit          = "limit"
	ReasonSlowClient     = "slow_client"
	ReasonDenied         = "permission_denied"
	ReasonError          = "error"
	// ReasonUpstreamUnavailable: the relay had nothing for the stream and
	// its class's control plane was unreachable (unserved.go).
	ReasonUpstreamUnavailable = "upstream_unavailable"
)

// disconnectReason classifies how a stream ended.
func disconnectReason(err error) string {
	switch {
	case err == nil, errors.Is(err, io.EOF):
		return ReasonClientClosed
	case errors.Is(err, ErrDraining):
		return ReasonDrain
	case errors.Is(err, errSlowClient):
		return ReasonSlowClient
	case errors.As(err, new(firstRequestTimeout)):
		return ReasonLimit
	case errors.As(err, new(*unservedError)):
		return ReasonUpstreamUnavailable
	}
	switch status.Code(err) {
	case codes.Canceled, codes.DeadlineExceeded:
		return ReasonClientClosed
	case codes.InvalidArgument, codes.Unimplemented: // a request the relay cannot serve
		return ReasonInvalidRequest
	case codes.ResourceExhausted:
		return ReasonLimit
	case codes.PermissionDenied:
		return ReasonDenied
	}
	return ReasonError
}
