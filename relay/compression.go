package relay

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Compressed requests. A few kilobytes of gzip inflate to megabytes, and
// xDS requests are small: the relay refuses them unless
// Options.AllowCompressedRequests (server.allow_compressed_requests).
// gzip is registered with grpc-go whether the relay wants it or not
// (go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc imports
// google.golang.org/grpc/encoding/gzip), so the refusal is the relay's own.
//
// Allowed, a gRPC message is inflated at most to the server's
// grpc.MaxRecvMsgSize (limits.max_message_bytes) plus one byte, then
// refused with RESOURCE_EXHAUSTED (grpc-go's decompress); a REST body to
// MaxRESTBody, then refused with 413.

// AllowCompressedKey is the configuration key that allows compressed
// requests, named in every refusal.
const AllowCompressedKey = "server.allow_compressed_requests"

// CompressionOptions are the grpc.ServerOptions enforcing the compression
// policy: an interceptor ending every stream whose messages are compressed
// (grpc-encoding other than identity) with UNIMPLEMENTED naming
// AllowCompressedKey, before a message is read; none when allowed.
func (s *Server) CompressionOptions() []grpc.ServerOption {
	if s.opts.AllowCompressedRequests {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainStreamInterceptor(refuseCompressed)}
}

// recvCompressor is the part of grpc-go's server transport stream (in the
// handler's context) that tells the stream's grpc-encoding.
type recvCompressor interface{ RecvCompress() string }

func refuseCompressed(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	rc, ok := grpc.ServerTransportStreamFromContext(ss.Context()).(recvCompressor)
	if ok {
		if enc := rc.RecvCompress(); enc != "" && enc != "identity" {
			return status.Errorf(codes.Unimplemented, "grpc-encoding %q: compressed requests are refused (%s is off); send them uncompressed", truncName(enc), AllowCompressedKey)
		}
	}
	return handler(srv, ss)
}

// truncName bounds an encoding name echoed back.
func truncName(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}
