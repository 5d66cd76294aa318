package relay

import (
	"context"
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/clientlog"
)

// errSlowClient ends a chronic laggard's stream.
var errSlowClient = status.Error(codes.ResourceExhausted, "client too slow: it fell behind the updates too often; reconnect")

// admit applies the stream's request rate limit (reader goroutine). A
// request that carries a nonce answers a response, and the first answer to
// each response written is free: the client's ACKs follow the relay's own
// pushes, so a fast-changing control plane must not get its clients
// disconnected. The client's requests are thus bounded by the limit plus one
// per response it was sent.
func (s *stream[S, Req]) admit(answer bool) error {
	if answer && s.acksOwed.Add(-1) >= 0 {
		return nil
	} else if answer {
		s.acksOwed.Add(1) // nothing was owed: undo
	}
	if !s.limiter.Allow() {
		return status.Errorf(codes.ResourceExhausted, "requests: more than %v a second (burst %d) on this stream", s.limiter.Limit(), s.limiter.Burst())
	}
	return nil
}

// firstRequestTimeout ends a stream that sent no request within
// limits.first_request_timeout: it asks for nothing and holds a slot of
// limits.max_streams.
type firstRequestTimeout struct{ after time.Duration }

func (e firstRequestTimeout) Error() string { return e.GRPCStatus().Message() }

func (e firstRequestTimeout) GRPCStatus() *status.Status {
	return status.Newf(codes.DeadlineExceeded, "limits.first_request_timeout: the stream sent no request within %v", e.after)
}

// firstRequestMissed ends the stream unless it has sent a request (the
// first-request timer's goroutine).
func (s *stream[S, Req]) firstRequestMissed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.requested {
		s.endLocked(firstRequestTimeout{s.srv.opts.FirstRequestTimeout})
	}
}

// classify binds the stream to its node's class on the first request.
func (s *stream[S, Req]) classify(node *corev3.Node) error {
	if s.class != nil {
		return nil
	}
	class, err := s.srv.acquireClass(s.ctx, node) // released by release
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.nodeID, s.class = node.GetId(), class
	s.resourceInSotW = slices.Contains(node.GetClientFeatures(), FeatureResourceInSotW)
	s.mu.Unlock()
	if s.srv.log.Core().Enabled(zap.DebugLevel) {
		if ok, dropped := s.srv.clog.Allow(); ok {
			s.logger().Debug("client connected", dropped)
		}
	}
	return nil
}

// acquireClass checks the node of a stream's first request, authorizes the
// stream's peer (ctx) to claim it, and takes a lease on its class, which
// the caller releases (registry.Release) when the stream ends.
func (s *Server) acquireClass(ctx context.Context, node *corev3.Node) (*shard.Class, error) {
	if node == nil {
		return nil, status.Error(codes.InvalidArgument, "node: the first request of a stream must carry the node")
	}
	className, err := s.checkNode(node)
	if err != nil {
		return nil, err
	}
	if auth := s.opts.Authorize; auth != nil {
		// Before the class exists or anything is subscribed: a client that
		// may not claim this node gets nothing else.
		if err := auth(ctx, node, className); err != nil {
			return nil, err
		}
	}
	if err := s.newClass(ctx, node); err != nil {
		return nil, err
	}
	class, err := s.registry.Acquire(node)
	if err != nil {
		return nil, status.Error(codes.ResourceExhausted, err.Error())
	}
	return class, nil
}

// FeatureResourceInSotW is the client feature that lets SotW responses carry
// resources wrapped in envoy.service.discovery.v3.Resource (for their TTL).
const FeatureResourceInSotW = "xds.config.supports-resource-in-sotw"

// requestType returns a request's type URL, checking it against the service
// the stream was opened on.
func (s *stream[S, Req]) requestType(typeURL string) (string, error) {
	switch {
	case s.fixedType == "" && typeURL == "":
		return "", status.Error(codes.InvalidArgument, "type_url: empty; every request on an aggregated stream must name its resource type")
	case s.fixedType == "":
		return typeURL, s.srv.checkTypeURL(typeURL)
	case typeURL == "":
		return s.fixedType, nil
	case typeURL != s.fixedType:
		return "", status.Errorf(codes.InvalidArgument, "type_url: %q on a stream of %q", clientlog.Truncate(typeURL, echo), s.fixedType)
	}
	return typeURL, nil
}

// noLocators refuses a request that subscribes by resource locators (xDS-TP
// dynamic parameters), which the relay does not implement: ignoring them
// would read a locator-only request as a wildcard subscription.
func noLocators(field string, n int) error {
	if n == 0 {
		return nil
	}
	return status.Errorf(codes.Unimplemented, "%s: resource locators (dynamic parameters) are not supported by xds-relay; subscribe by resource names", field)
}

// nameList is one list of resource names of a request, and its field name.
type nameList struct {
	field string
	names []string
}

// versionList is the versions a request carries, named by their field.
type versionList struct {
	field    string
	versions []string
}

// admitRequest runs the checks every request passes before it touches the
// stream's state, in order: the rate limit (nonce is the response the
// request answers, if any), the type URL (and whether the peer may have it),
// the node (on the first request: classification and authorization), the
// name lists and the versions the client sends (field: what they are). It
// returns the request's type URL.
func (s *stream[S, Req]) admitRequest(nonce, typeURL string, node *corev3.Node, versions versionList, lists ...nameList) (string, error) {
	if !s.requested {
		s.mu.Lock()
		s.requested = true // the first-request timer is off
		s.mu.Unlock()
	}
	if err := s.admit(nonce != ""); err != nil {
		return "", err
	}
	typeURL, err := s.requestType(typeURL)
	if err != nil {
		return "", err
	}
	if err := s.authorizeType(typeURL); err != nil {
		return "", err
	}
	for _, l := range lists {
		if err := s.srv.checkNameBytes(l.field, l.names); err != nil {
			return "", err
		}
	}
	if err := s.srv.checkVersionBytes(versions.field, versions.versions); err != nil {
		return "", err
	}
	if err := s.classify(node); err != nil {
		return "", err
	}
	for _, l := range lists {
		if err := s.checkNames(l.field, l.names); err != nil {
			return "", err
		}
	}
	return typeURL, nil
}

// typeLimitLocked refuses one more type URL on a stream holding n.
func (s *stream[S, Req]) typeLimitLocked(n int) error {
	if max := s.srv.opts.MaxTypesPerStream; n >= max {
		return status.Errorf(codes.ResourceExhausted, "type_url: stream already subscribes to %d types, the limit", max)
	}
	return nil
}

// checkNames applies the per-request name checks to one list of names. An
// empty name is no error: it names nothing (see shard.NewSubscription).
func (s *stream[S, Req]) checkNames(field string, names []string) error {
	if max := s.srv.opts.MaxResourceNames; len(names) > max {
		return status.Errorf(codes.ResourceExhausted, "%s: %d names exceed the limit of %d", field, len(names), max)
	}
	return nil
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

func (s *stream[S, Req]) logger() *zap.Logger {
	l := s.srv.log.With(zap.Uint64("stream", s.id), zap.String("peer", s.peer), zap.String("kind", s.variant))
	if s.class != nil {
		l = l.With(s.srv.clog.String("node", s.nodeID), s.srv.clog.String("class", s.class.Name))
	}
	return l
}
