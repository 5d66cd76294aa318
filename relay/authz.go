package relay

import (
	"context"
	"net"
	"net/http"
	"net/netip"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// authorizeType applies Options.AuthorizeType to a request's type URL.
func (s *stream[S, Req]) authorizeType(typeURL string) error {
	if auth := s.srv.opts.AuthorizeType; auth != nil {
		return auth(s.ctx, typeURL)
	}
	return nil
}

// restAuthorize applies Options.AuthorizeType and Options.Authorize to a
// REST poll, exactly as to a gRPC stream: the request's TLS state is put in
// its context as the gRPC peer's, so identity rules see the same verified
// certificate. It returns the HTTP status to refuse with, or 0.
func (s *Server) restAuthorize(r *http.Request, typeURL string, node *corev3.Node) (int, error) {
	ctx := restPeerContext(r)
	if auth := s.opts.AuthorizeType; auth != nil {
		if err := auth(ctx, typeURL); err != nil {
			return httpStatus(err), err
		}
	}
	if auth := s.opts.Authorize; auth != nil {
		if err := auth(ctx, node, s.registry.Classify(node)); err != nil {
			return httpStatus(err), err
		}
	}
	return 0, nil
}

// restPeerContext is r's context holding a gRPC peer for the REST client:
// its address and, over TLS, the connection state with the verified chains.
func restPeerContext(r *http.Request) context.Context {
	p := &peer.Peer{Addr: restAddr(r.RemoteAddr)}
	if r.TLS != nil {
		p.AuthInfo = credentials.TLSInfo{
			State:          *r.TLS,
			CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity},
		}
	}
	return peer.NewContext(r.Context(), p)
}

// restAddr is a REST client's address as a net.Addr.
func restAddr(remote string) net.Addr {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return net.TCPAddrFromAddrPort(ap)
	}
	return &net.TCPAddr{}
}

// httpStatus is the HTTP status answering a gRPC status error.
func httpStatus(err error) int {
	switch status.Code(err) {
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}
