package app

import (
	"context"
	stdlog "log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	sampleconfig "github.com/xds-relay/xds-relay/deploy/sample-config"
	"github.com/xds-relay/xds-relay/relay"
	"github.com/xds-relay/xds-relay/relay/overload"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/drop"
	"github.com/xds-relay/xds-relay/shard/store"
	"github.com/xds-relay/xds-relay/upstream"
	"github.com/xds-relay/xds-relay/upstream/filesource"
)

// source feeds classes with resources: the ADS upstream client or the
// filesystem source.
type source interface {
	Attach(*shard.Class) func(typeURL string)
	Detach(*shard.Class)
	Close() error
}

var (
	_ source = (*upstream.Client)(nil)
	_ source = (*filesource.Source)(nil)
)

// Relay is a running relay process: listeners, servers, upstream.
//
// Ownership: Start builds it on one goroutine and returns it; no field is
// written after that, except ready. Its goroutines (the gRPC, admin and
// REST servers, the file source's run loop) are owned by the relay and end
// in Close, which waits for them. Locks: the relay has none of its own; it
// calls into the registry and servers, which take theirs.
type Relay struct {
	// Read-only after Start.
	cfg      Config
	log      *zap.Logger
	registry *shard.Registry
	server   *relay.Server
	grpcSrv  *grpc.Server
	adminSrv *http.Server
	restSrv  *http.Server // nil when rest.listen is empty
	lis      net.Listener
	adminLis net.Listener
	restLis  net.Listener
	upstream *upstream.Client   // nil when serving from files
	files    *filesource.Source // nil when an upstream is set
	level    *zap.AtomicLevel   // nil: the log level is not adjustable at run time
	adminTok *adminToken        // nil: the admin endpoints are open (admin_token_file unset)
	tel      *telemetry         // metrics, served on /metrics
	drops    *drop.Counters     // what the relay did not send, by reason (upstream and downstream)
	store    *store.Store       // the resources of every class, once per content
	overload *overload.Monitor  // the memory ceiling; nil when there is none
	heapRead func() uint64      // the monitor's heap reading (nil: the live heap); tests set it
	peers    *relay.Peers       // each peer's share of the limits
	gate     *relay.ConnGate    // the xDS and REST listeners' connection cap
	// fdLimit reads the process's file descriptor limit (RLIMIT_NOFILE),
	// the base of server.max_connections' default.
	fdLimit func() (uint64, error)
	// lookupHost resolves upstream.address for an affinity tier's members
	// (nil: the system resolver); tests set it.
	lookupHost func(ctx context.Context, host string) ([]string, error)
	// tracerProvider traces upstream responses and fan-outs.
	tracerProvider trace.TracerProvider
	cancel         context.CancelFunc // stops the file source and cuts a drain short
	closing        context.Context    // ended by cancel (Close)

	// Accessed atomically.
	ready atomic.Bool // the downstream listener serves

	// Owned by Close (run once), or by a failing Start.
	stop      undoStack      // every part's cleanup, in start order (see start.go)
	wg        sync.WaitGroup // the serving goroutines; stop waits for them
	closeOnce sync.Once
}

// Option adjusts Start.
type Option func(*Relay)

// WithLogLevel exposes level on the admin port (/debug/logging: GET shows
// it, PUT {"level":"debug"} changes it at run time).
func WithLogLevel(level zap.AtomicLevel) Option { return func(r *Relay) { r.level = &level } }

// restErrorLog logs the REST server's own errors (mostly clients' failed TLS
// handshakes, which any client can cause at will) at debug level.
func restErrorLog(log *zap.Logger) *stdlog.Logger {
	l, err := zap.NewStdLogAt(log.Named("rest"), zap.DebugLevel)
	if err != nil {
		return zap.NewStdLog(zap.NewNop())
	}
	return l
}

func sourceDir(cfg Config) string {
	switch {
	case cfg.Upstream.Address != "":
		return ""
	case cfg.Source.Dir == "":
		return sampleconfig.Name
	}
	return cfg.Source.Dir
}

// Addr is the downstream xDS listener's address.
func (r *Relay) Addr() string { return r.lis.Addr().String() }

// AdminAddr is the admin HTTP listener's address.
func (r *Relay) AdminAddr() string { return r.adminLis.Addr().String() }

// Server is the downstream server (for status).
func (r *Relay) Server() *relay.Server { return r.server }

// Shutdown drains the relay, then closes it: it stops being ready, stops
// taking on streams and REST polls (a stream opened from now on is refused
// with UNAVAILABLE, a poll answered 503), stops accepting (GOAWAY on every
// connection), and ends the open streams spread over period so their
// clients move to other relays gradually. It returns what the drain did:
// the streams spread, refused, and cut (early by Close, or at the end,
// still open 5 s after the drain).
func (r *Relay) Shutdown(period time.Duration) relay.DrainReport {
	r.ready.Store(false)
	// Before the GOAWAY: a client that sees its stream end before the
	// GOAWAY reopens it on the same connection, and must be refused.
	r.server.StartDrain()
	r.log.Info("draining", zap.Int("streams", r.server.StreamCount()), zap.Duration("period", period))
	stopped := make(chan struct{})
	go func() {
		r.grpcSrv.GracefulStop() // returns once every stream has ended
		close(stopped)
	}()
	// Close (a second signal) cuts the drain short: the rest end at once.
	ctx, cancel := context.WithTimeout(r.closing, period)
	rep := r.server.Drain(ctx, period)
	cancel()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		rep.CutAtEnd = r.server.StreamCount()
		r.log.Warn("streams still open after the drain; closing them", zap.Int("streams", rep.CutAtEnd))
	}
	r.Close()
	<-stopped
	rep.Refused, rep.PollsRefused = r.server.DrainRefusals()
	return rep
}

// Close stops serving: downstream streams end (clients reconnect to another
// relay), the upstream streams close, and every goroutine has returned when
// Close returns. It undoes Start's steps in reverse (see start.go).
func (r *Relay) Close() {
	r.closeOnce.Do(func() {
		r.ready.Store(false)
		r.stop.unwind()
	})
}

// classLimits are the node classes' limits; a file source has no upstream
// request to bound.
func classLimits(cfg Config) shard.Limits {
	l := shard.Limits{MaxNamesPerType: cfg.Limits.MaxClassNamesPerType, MaxTypes: cfg.Limits.MaxClassTypes}
	if cfg.Upstream.Address != "" {
		l.MaxRequestBytes = cfg.Limits.MaxUpstreamRequestBytes
		l.IncrementalUpstream = cfg.Upstream.Protocol == "delta"
	}
	return l
}
