package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	sampleconfig "github.com/xds-relay/xds-relay/deploy/sample-config"
	"github.com/xds-relay/xds-relay/relay"
	"github.com/xds-relay/xds-relay/relay/clientlog"
	"github.com/xds-relay/xds-relay/shard"
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
type Relay struct {
	// Set at construction, read-only.
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
	cancel   context.CancelFunc // stops the file source and cuts a drain short
	closing  context.Context    // ended by cancel (Close)
	ready    atomic.Bool        // the downstream listener serves
	level    *zap.AtomicLevel   // nil: the log level is not adjustable at run time
	adminTok *adminToken        // nil: the admin endpoints are open (admin_token_file unset)
	tel      *telemetry         // metrics, served on /metrics
	// tracerProvider traces upstream responses and fan-outs; stopTracing
	// flushes it.
	tracerProvider trace.TracerProvider
	stopTracing    func()
	// closers stop the certificate watchers (TLS files reloaded on change).
	closers []io.Closer

	wg        sync.WaitGroup // grpc Serve, admin Serve, file source Run
	closeOnce sync.Once
}

// Option adjusts Start.
type Option func(*Relay)

// WithLogLevel exposes level on the admin port (/debug/logging: GET shows
// it, PUT {"level":"debug"} changes it at run time).
func WithLogLevel(level zap.AtomicLevel) Option { return func(r *Relay) { r.level = &level } }

// Start builds the relay from cfg and starts serving. Keys left at their
// zero value take their defaults. Listen addresses with port 0 pick a free
// port (see Addr and AdminAddr).
func Start(cfg Config, log *zap.Logger, opts ...Option) (_ *Relay, err error) {
	cfg.applyDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	classifier, err := cfg.classifier()
	if err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg, log: log}
	for _, o := range opts {
		o(r)
	}
	if r.tracerProvider == nil {
		if r.tracerProvider, r.stopTracing, err = newTracerProvider(cfg.Tracing); err != nil {
			return nil, fmt.Errorf("tracing: %w", err)
		}
	} else {
		r.stopTracing = func() {}
	}
	tracer := r.tracerProvider.Tracer(tracerName)
	r.tel, err = newTelemetry(gauges{
		classesAndShards: func() (int, int) { return r.registry.Counts() },
		upstreamUp: func() map[string]bool {
			if r.upstream == nil {
				return nil
			}
			up := map[string]bool{}
			for _, st := range r.upstream.Status() {
				up[st.Class] = st.State == upstream.StateConnected
			}
			return up
		},
	}, tracer)
	if err != nil {
		r.stopTracing()
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer func() {
		if err != nil { // undo what started so far: nothing may outlive a failed Start
			r.closeAll()
			r.tel.shutdown()
			r.stopTracing()
		}
	}()
	serverTLS, closer, err := serverTLSConfig(cfg.TLS, log.Named("tls"))
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	r.closers = append(r.closers, closer)
	upstreamCreds, closer, err := upstreamCredentials(cfg.Upstream.TLS, log.Named("upstream-tls"))
	if err != nil {
		return nil, fmt.Errorf("upstream.tls: %w", err)
	}
	r.closers = append(r.closers, closer)
	var upstreamDial []grpc.DialOption
	if upstreamCreds != nil {
		upstreamDial = append(upstreamDial, grpc.WithTransportCredentials(upstreamCreds)) // overrides the plaintext default
	}
	binder, err := cfg.binder()
	if err != nil {
		return nil, err
	}
	var authorize func(context.Context, *corev3.Node, string) error
	if len(cfg.Identity.Rules) > 0 {
		authorize = binder.Authorize
	}
	var src source
	if cfg.Upstream.Address != "" {
		r.upstream, err = upstream.New(upstream.Config{
			Address:      cfg.Upstream.Address,
			Fallbacks:    cfg.Upstream.Fallbacks,
			DialOptions:  upstreamDial,
			RelayID:      cfg.Upstream.RelayID,
			Delta:        cfg.Upstream.Protocol == "delta",
			PassVersions: cfg.Upstream.Versions == "upstream",
			Metrics:      r.tel,
			Tracer:       tracer,
			Backoff:      upstream.Backoff{Initial: cfg.Upstream.Backoff.Initial, Max: cfg.Upstream.Backoff.Max},
		}, log.Named("upstream"))
		if err != nil {
			return nil, fmt.Errorf("upstream: %w", err)
		}
		src = r.upstream
	} else {
		if cfg.Source.Dir == "" {
			r.files, err = filesource.NewFixed(sampleconfig.FS, sampleconfig.Name, log.Named("source"))
		} else {
			r.files, err = filesource.New(cfg.Source.Dir, log.Named("source"))
		}
		if err != nil {
			return nil, fmt.Errorf("source: %w", err)
		}
		src = r.files
	}
	// One gate for every log line a client triggers, here and downstream.
	clientLog := clientlog.NewGate(cfg.Log.ClientLinesPerSecond, cfg.Log.MaxFieldBytes)
	r.tel.classes.max = cfg.Limits.MaxMetricClasses
	r.registry = shard.NewRegistryWith(classifier, func(c *shard.Class) func(string) {
		if ok, dropped := clientLog.Allow(); ok {
			log.Info("new node class", clientLog.String("class", c.Name), clientLog.String("first_node", c.Node.GetId()), dropped)
		}
		return src.Attach(c)
	}, shard.Lifecycle{
		Linger:     cfg.NodeClasses.Linger,
		MaxClasses: cfg.Limits.MaxClasses,
		Drop: func(c *shard.Class) {
			src.Detach(c) // the upstream stream is closed when it returns
			if ok, dropped := clientLog.Allow(); ok {
				log.Info("node class dropped", clientLog.String("class", c.Name), zap.Duration("linger", cfg.NodeClasses.Linger), dropped)
			}
		},
	})
	r.registry.ObserveFanout(r.tel.Fanout)
	r.registry.SetClassLimits(classLimits(cfg))
	r.server = relay.NewServer(r.registry, log.Named("downstream"), relay.Options{
		MaxTypesPerStream: cfg.Limits.MaxTypesPerStream,
		MaxResourceNames:  cfg.Limits.MaxResourceNames,
		MaxStreams:        cfg.Limits.MaxStreams,
		RequestsPerSecond: cfg.Limits.RequestsPerSecond,
		RequestBurst:      cfg.Limits.RequestBurst,
		MaxCollapses:      cfg.Limits.MaxCollapses,     // negative: never, as in the file
		ParentRemovalWait: cfg.Delta.ParentRemovalWait, // negative: never held, as in the file
		Authorize:         authorize,
		AuthorizeType:     secretsGate(cfg.TLS.AllowSecretsWithoutClientCert),
		Metrics:           r.tel,

		FirstRequestTimeout:  cfg.Limits.FirstRequestTimeout,
		MaxTypeURLBytes:      cfg.Limits.MaxTypeURLBytes,
		MaxResourceNameBytes: cfg.Limits.MaxResourceNameBytes,
		MaxVersionBytes:      cfg.Limits.MaxVersionBytes,
		MaxNodeBytes:         cfg.Limits.MaxNodeBytes,
		MaxNodeIDBytes:       cfg.Limits.MaxNodeIDBytes,
		MaxClassNameBytes:    cfg.Limits.MaxClassNameBytes,
		ClientLog:            clientLog,
	})
	grpcOpts := append(relay.ServerOptions(),
		grpc.MaxConcurrentStreams(uint32(cfg.Limits.MaxStreamsPerConnection)),
		grpc.MaxRecvMsgSize(cfg.Limits.MaxMessageBytes),
	)
	grpcOpts = append(grpcOpts, relay.ConnLimits{
		MaxHeaderListBytes: cfg.Server.MaxHeaderListBytes,
		ConnectionTimeout:  cfg.Server.ConnectionTimeout,
		KeepaliveTime:      cfg.Server.KeepaliveTime,
		KeepaliveTimeout:   cfg.Server.KeepaliveTimeout,
		KeepaliveMinTime:   cfg.Server.KeepaliveMinTime,
		MaxConnectionIdle:  cfg.Server.MaxConnectionIdle,
		// drain.max_connection_age: see docs/operations.md, "Rebalancing".
		// gRPC's 0 is the file's negative: no limit.
		MaxConnectionAge:      offIfNegative(cfg.Drain.MaxConnectionAge),
		MaxConnectionAgeGrace: offIfNegative(cfg.Drain.MaxConnectionAgeGrace),
	}.ServerOptions()...)
	if serverTLS != nil {
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(serverTLS)))
	}
	r.grpcSrv = grpc.NewServer(grpcOpts...)
	r.server.Register(r.grpcSrv)

	if r.lis, err = net.Listen("tcp", cfg.Listen); err != nil {
		_ = src.Close()
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	if r.adminLis, err = net.Listen("tcp", cfg.Admin); err != nil {
		_ = r.lis.Close()
		_ = src.Close()
		return nil, fmt.Errorf("admin listen %s: %w", cfg.Admin, err)
	}
	if cfg.AdminTokenFile != "" {
		if r.adminTok, err = newAdminToken(cfg.AdminTokenFile, log.Named("admin")); err != nil {
			_ = r.lis.Close()
			_ = r.adminLis.Close()
			_ = src.Close()
			return nil, err
		}
	} else if !loopback(cfg.Admin) {
		log.Warn("the admin port is not on loopback and has no admin_token_file: anyone who reaches it can read /debug/, pprof and change the log level",
			zap.String("admin", cfg.Admin))
	}
	r.adminSrv = &http.Server{Handler: requireToken(r.adminTok, r.adminHandler()), ReadHeaderTimeout: 10 * time.Second}
	if cfg.REST.Listen != "" {
		if r.restLis, err = net.Listen("tcp", cfg.REST.Listen); err != nil {
			_ = r.lis.Close()
			_ = r.adminLis.Close()
			_ = src.Close()
			return nil, fmt.Errorf("rest listen %s: %w", cfg.REST.Listen, err)
		}
		// A held long poll must not be cut off by the write timeout.
		maxHold := offIfNegative(cfg.REST.MaxHold) // 0: every poll is answered at once
		r.restSrv = &http.Server{Handler: r.server.RESTHandler(maxHold),
			ReadHeaderTimeout: 10 * time.Second, WriteTimeout: maxHold + 30*time.Second,
			ErrorLog: restErrorLog(log)}
		if serverTLS != nil && !cfg.REST.Plaintext {
			// REST follows the xDS listener: the same certificate, client
			// CAs and reloads; Authorize applies to it as to gRPC.
			r.restSrv.TLSConfig = withNextProtos(serverTLS, "h2", "http/1.1")
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.closing = cancel, ctx
	if r.files != nil {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := r.files.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("file source stopped", zap.Error(err))
			}
		}()
	}
	if r.restSrv != nil {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			serve := r.restSrv.Serve
			if r.restSrv.TLSConfig != nil {
				serve = func(l net.Listener) error { return r.restSrv.ServeTLS(l, "", "") }
			}
			if err := serve(r.restLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("REST server stopped", zap.Error(err))
			}
		}()
	}
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		if err := r.adminSrv.Serve(r.adminLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server stopped", zap.Error(err))
		}
	}()
	go func() {
		defer r.wg.Done()
		if err := r.grpcSrv.Serve(r.server.TrackConnections(r.lis)); err != nil {
			log.Error("xDS server stopped", zap.Error(err))
		}
	}()
	r.ready.Store(true)
	log.Info("relay serving", zap.String("listen", r.Addr()), zap.String("admin", r.AdminAddr()),
		zap.String("upstream", cfg.Upstream.Address), zap.String("source", sourceDir(cfg)))
	return r, nil
}

// restErrorLog logs the REST server's own errors (mostly clients' failed TLS
// handshakes, which any client can cause at will) at debug level.
func restErrorLog(log *zap.Logger) *stdlog.Logger {
	l, err := zap.NewStdLogAt(log.Named("rest"), zap.DebugLevel)
	if err != nil {
		return zap.NewStdLog(zap.NewNop())
	}
	return l
}

func (r *Relay) closeAll() {
	for _, c := range r.closers {
		_ = c.Close()
	}
	r.closers = nil
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

// RESTAddr is the REST-JSON listener's address ("" when disabled).
func (r *Relay) RESTAddr() string {
	if r.restLis == nil {
		return ""
	}
	return r.restLis.Addr().String()
}

// AdminAddr is the admin HTTP listener's address.
func (r *Relay) AdminAddr() string { return r.adminLis.Addr().String() }

// Server is the downstream server (for status).
func (r *Relay) Server() *relay.Server { return r.server }

// Registry is the class registry (for status).
func (r *Relay) Registry() *shard.Registry { return r.registry }

// Shutdown drains the relay, then closes it: it stops being ready, stops
// accepting (GOAWAY on every connection), and ends the open streams spread
// over period so their clients move to other relays gradually.
func (r *Relay) Shutdown(period time.Duration) {
	r.ready.Store(false)
	r.log.Info("draining", zap.Int("streams", r.server.StreamCount()), zap.Duration("period", period))
	stopped := make(chan struct{})
	go func() {
		r.grpcSrv.GracefulStop() // returns once every stream has ended
		close(stopped)
	}()
	// Close (a second signal) cuts the drain short: the rest end at once.
	ctx, cancel := context.WithTimeout(r.closing, period)
	r.server.Drain(ctx, period)
	cancel()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		r.log.Warn("streams still open after the drain; closing them")
	}
	r.Close()
	<-stopped
}

// Close stops serving: downstream streams end (clients reconnect to another
// relay), the upstream streams close, and every goroutine has returned when
// Close returns.
func (r *Relay) Close() {
	r.closeOnce.Do(func() {
		r.ready.Store(false)
		r.cancel() // a Shutdown in progress ends its drain
		r.grpcSrv.Stop()
		r.registry.Close() // no class is dropped any more: the sources close next
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.adminSrv.Shutdown(ctx)
		if r.restSrv != nil {
			_ = r.restSrv.Close() // held polls end; clients poll again, elsewhere
		}
		if r.upstream != nil {
			_ = r.upstream.Close()
		}
		if r.files != nil {
			_ = r.files.Close()
		}
		r.wg.Wait()
		r.tel.shutdown()
		r.stopTracing()
		r.closeAll()
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
