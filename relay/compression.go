package relay

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"

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

// restBody is a REST request's body, inflated when it is gzip and
// compressed requests are allowed; the HTTP status and error name the
// problem otherwise. Either way at most MaxRESTBody bytes are read from
// the wire and at most MaxRESTBody+1 inflated.
func (s *Server) restBody(w http.ResponseWriter, r *http.Request) ([]byte, int, error) {
	body := http.MaxBytesReader(w, r.Body, MaxRESTBody)
	switch enc := r.Header.Get("Content-Encoding"); {
	case enc == "" || enc == "identity":
		return readRESTBody(body)
	case !s.opts.AllowCompressedRequests:
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("Content-Encoding %q: compressed requests are refused (%s is off); send the body uncompressed", truncName(enc), AllowCompressedKey)
	case enc != "gzip":
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("Content-Encoding %q: only gzip is accepted", truncName(enc))
	default:
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, http.StatusBadRequest, fmt.Errorf("Content-Encoding gzip: %v", err)
		}
		defer zr.Close()
		data, code, err := readRESTBody(io.LimitReader(zr, MaxRESTBody+1))
		if err == nil && len(data) > MaxRESTBody {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body inflates past %d bytes", MaxRESTBody)
		}
		return data, code, err
	}
}

// readRESTBody reads r whole; a body over http.MaxBytesReader's limit is
// 413, another failure 400.
func readRESTBody(r io.Reader) ([]byte, int, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body exceeds %d bytes", mbe.Limit)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("reading the request body: %v", err)
	}
	return data, 0, nil
}
