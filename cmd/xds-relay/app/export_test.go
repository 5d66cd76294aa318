package app

// Accessors for the tests of package app_test: nothing outside the tests
// needs them.

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/trace"

	"github.com/xds-relay/xds-relay/shard"
)

// RESTAddr is the REST-JSON listener's address ("" when disabled).
func (r *Relay) RESTAddr() string {
	if r.restLis == nil {
		return ""
	}
	return r.restLis.Addr().String()
}

// Registry is the class registry.
func (r *Relay) Registry() *shard.Registry { return r.registry }

// StatusPage returns the handler of the admin status page (see statusPage).
func StatusPage(r *Relay) http.Handler { return r.statusPage() }

// WithTracerProvider traces with tp instead of what tracing.* configures:
// the tests use an in-memory recorder.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(r *Relay) { r.tracerProvider = tp }
}

// WithHeapReader has the memory ceiling read the heap from read instead of
// the runtime: the tests drive its marks.
func WithHeapReader(read func() uint64) Option {
	return func(r *Relay) { r.heapRead = read }
}

// WithUpstreamLookup resolves upstream.address's host with lookup, for an
// affinity tier's members: the tests serve a tier on loopback addresses.
func WithUpstreamLookup(lookup func(ctx context.Context, host string) ([]string, error)) Option {
	return func(r *Relay) { r.lookupHost = lookup }
}

// WithFDLimit makes the relay read n as its file descriptor limit
// (RLIMIT_NOFILE), the base of server.max_connections' default.
func WithFDLimit(n uint64) Option {
	return func(r *Relay) { r.fdLimit = func() (uint64, error) { return n, nil } }
}
