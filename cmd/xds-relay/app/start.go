package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	sampleconfig "github.com/xds-relay/xds-relay/deploy/sample-config"
	"github.com/xds-relay/xds-relay/relay"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/clientlog"
	"github.com/xds-relay/xds-relay/shard/drop"
	"github.com/xds-relay/xds-relay/shard/store"
	"github.com/xds-relay/xds-relay/upstream"
	"github.com/xds-relay/xds-relay/upstream/filesource"
)

// undoStack is what a Start has set up, each step's cleanup pushed as it
// succeeds. A failed Start unwinds it at once; a started relay's Close
// unwinds it: in reverse, so nothing is stopped before what uses it.
type undoStack []func()

func (u *undoStack) push(undo func()) { *u = append(*u, undo) }

// unwind runs the cleanups, last pushed first, and empties the stack.
func (u *undoStack) unwind() {
	for i := len(*u) - 1; i >= 0; i-- {
		(*u)[i]()
	}
	*u = nil
}

// starting is what Start's steps hand to the next ones.
type starting struct {
	tracer        trace.Tracer
	serverTLS     *tls.Config // nil: plaintext
	upstreamDial  []grpc.DialOption
	upstreamCreds credentials.TransportCredentials
	src           source
	clientLog     *clientlog.Gate
}

// Start builds the relay from cfg and starts serving. Keys left at their
// zero value take their defaults. Listen addresses with port 0 pick a free
// port (see Addr and AdminAddr). When Start fails, whatever it had started
// is stopped: no goroutine, watcher or listener outlives it.
func Start(cfg Config, log *zap.Logger, opts ...Option) (_ *Relay, err error) {
	cfg.applyDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg, log: log, drops: &drop.Counters{}, store: store.New()}
	for _, o := range opts {
		o(r)
	}
	defer func() {
		if err != nil {
			r.stop.unwind()
		}
	}()
	var st starting
	for _, step := range []func(*starting) error{
		r.startTelemetry,   // tracing and metrics
		r.startCredentials, // TLS file watchers
		r.startSource,      // the upstream client or the file source
		r.buildServers,     // registry, downstream server, gRPC server
		r.listen,           // xDS, admin and REST listeners
	} {
		if err := step(&st); err != nil {
			return nil, err
		}
	}
	r.serve()
	log.Info("relay serving", zap.String("listen", r.Addr()), zap.String("admin", r.AdminAddr()),
		zap.String("upstream", cfg.Upstream.Address), zap.String("source", sourceDir(cfg)))
	return r, nil
}

// startTelemetry starts the tracer provider (unless WithTracerProvider gave
// one) and the metrics.
func (r *Relay) startTelemetry(st *starting) error {
	if r.tracerProvider == nil {
		tp, stopTracing, err := newTracerProvider(r.cfg.Tracing)
		if err != nil {
			return fmt.Errorf("tracing: %w", err)
		}
		r.tracerProvider = tp
		r.stop.push(stopTracing)
	}
	st.tracer = r.tracerProvider.Tracer(tracerName)
	tel, err := newTelemetry(gauges{
		drops:            r.drops.Snapshot,
		classesAndShards: func() (int, int) { return r.registry.Counts() },
		storeCounts:      r.store.Counts,
		lingers:          func() shard.LingerStats { return r.registry.Lingers() },
		overload:         r.overloadStatus,
		peers: func() relay.PeerStats {
			if r.peers == nil {
				return relay.PeerStats{}
			}
			return r.peers.Stats()
		},
		members: func() []upstream.MemberStatus {
			if r.upstream == nil {
				return nil
			}
			return r.upstream.Members()
		},
		upstreamUp: func() map[string]bool {
			if r.upstream == nil {
				return nil
			}
			up := map[string]bool{}
			for _, s := range r.upstream.Status() {
				up[s.Class] = s.State == upstream.StateConnected
			}
			return up
		},
	}, st.tracer)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	r.tel = tel
	r.tel.classes.max = r.cfg.Limits.MaxMetricClasses
	r.stop.push(r.tel.shutdown)
	return nil
}

// startCredentials loads the downstream and upstream TLS files and starts
// watching them.
func (r *Relay) startCredentials(st *starting) error {
	serverTLS, serverWatch, err := serverTLSConfig(r.cfg.TLS, r.log.Named("tls"))
	if err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	r.stop.push(func() { _ = serverWatch.Close() })
	st.serverTLS = serverTLS
	creds, upstreamWatch, err := upstreamCredentials(r.cfg.Upstream.TLS, r.log.Named("upstream-tls"))
	if err != nil {
		return fmt.Errorf("upstream.tls: %w", err)
	}
	r.stop.push(func() { _ = upstreamWatch.Close() })
	st.upstreamCreds = creds // nil: plaintext
	return nil
}

// startSource makes the upstream client or, without an upstream, the file
// source (which runs once serving starts).
func (r *Relay) startSource(st *starting) error {
	cfg, log := r.cfg, r.log
	if cfg.Upstream.Address != "" {
		c, err := upstream.New(upstream.Config{
			Address:         cfg.Upstream.Address,
			Fallbacks:       cfg.Upstream.Fallbacks,
			DialOptions:     st.upstreamDial,
			RelayID:         cfg.Upstream.RelayID,
			Delta:           cfg.Upstream.Protocol == "delta",
			PassVersions:    cfg.Upstream.Versions == "upstream",
			AskWildcard:     cfg.Upstream.Ask == "wildcard",
			SiteWildcard:    cfg.Upstream.Wildcard == "site_specific",
			Metrics:         r.tel,
			Drops:           r.drops,
			LogGate:         clientlog.NewGate(cfg.Log.UpstreamLinesPerSecond, cfg.Log.MaxFieldBytes),
			Tracer:          st.tracer,
			Backoff:         upstream.Backoff{Initial: cfg.Upstream.Backoff.Initial, Max: cfg.Upstream.Backoff.Max},
			StreamWindow:    int32(cfg.Upstream.StreamWindow),
			ConnWindow:      int32(cfg.Upstream.ConnectionWindow),
			MaxMessageBytes: cfg.Upstream.MaxMessageBytes,
			Creds:           st.upstreamCreds,
			MaxConnections:  cfg.Upstream.MaxConnections,
			Resync:          offIfNegative(cfg.Upstream.ResyncInterval),
			ConnectTimeout:  cfg.Upstream.ConnectTimeout,
			// Negative: never (0 in upstream.Config).
			UnavailableAfter: offIfNegative(cfg.Upstream.UnavailableAfter),
			Affinity:         cfg.Upstream.Affinity == "class",
			Members:          cfg.Upstream.Members,
			ResolveInterval:  cfg.Upstream.ResolveInterval,
			LookupHost:       r.lookupHost,
		}, log.Named("upstream"))
		if err != nil {
			return fmt.Errorf("upstream: %w", err)
		}
		r.upstream, st.src = c, c
	} else {
		var (
			files *filesource.Source
			err   error
		)
		if cfg.Source.Dir == "" {
			files, err = filesource.NewFixed(sampleconfig.FS, sampleconfig.Name, log.Named("source"))
		} else {
			files, err = filesource.New(cfg.Source.Dir, log.Named("source"))
		}
		if err != nil {
			return fmt.Errorf("source: %w", err)
		}
		r.files, st.src = files, files
	}
	src := st.src
	r.stop.push(func() { _ = src.Close() })
	return nil
}

// buildServers makes the class registry, the downstream xDS server and the
// gRPC server it is registered on. Nothing is served yet.
func (r *Relay) buildServers(st *starting) error {
	cfg, log := r.cfg, r.log
	classifier, err := cfg.classifier()
	if err != nil {
		return err
	}
	binder, err := cfg.binder()
	if err != nil {
		return err
	}
	var authorize func(context.Context, *corev3.Node, string) error
	if len(cfg.Identity.Rules) > 0 {
		authorize = binder.Authorize
	}
	// One gate for every log line a client triggers, here and downstream.
	clientLog := clientlog.NewGate(cfg.Log.ClientLinesPerSecond, cfg.Log.MaxFieldBytes)
	if err := r.buildPeers(clientLog); err != nil {
		return err
	}
	src := st.src
	r.registry = shard.NewRegistryWith(classifier, func(c *shard.Class) func(string) {
		if ok, dropped := clientLog.Allow(); ok {
			log.Info("new node class", clientLog.String("class", c.Name), clientLog.String("first_node", c.Node.GetId()), dropped)
		}
		r.tel.classCreated(c.Name)
		return src.Attach(c)
	}, shard.Lifecycle{
		Linger:     cfg.NodeClasses.Linger,
		MaxClasses: cfg.Limits.MaxClasses,
		Drop: func(c *shard.Class) {
			src.Detach(c) // the upstream stream is closed when it returns
			r.tel.classDropped(c.Name)
			if ok, dropped := clientLog.Allow(); ok {
				log.Info("node class dropped", clientLog.String("class", c.Name), zap.Duration("linger", cfg.NodeClasses.Linger), dropped)
			}
		},
	})
	// No class is dropped once the registry is closed: the source closes
	// after it (it was pushed before).
	r.stop.push(r.registry.Close)
	r.registry.ObserveFanout(r.tel.Fanout)
	r.registry.SetClassLimits(classLimits(cfg))
	r.registry.SetStore(r.store) // identical resources of all classes held once
	if cfg.Upstream.Wildcard == "site_specific" {
		r.registry.SetWildcardScope(shard.WildcardSiteSpecific)
	}
	r.overload = r.startOverload()
	var admission relay.Admission
	if r.overload != nil {
		admission = r.overload
	}
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
		Drops:             r.drops,
		Admission:         admission,
		Peers:             r.peers,

		FirstRequestTimeout:  cfg.Limits.FirstRequestTimeout,
		MaxTypeURLBytes:      cfg.Limits.MaxTypeURLBytes,
		MaxResourceNameBytes: cfg.Limits.MaxResourceNameBytes,
		MaxVersionBytes:      cfg.Limits.MaxVersionBytes,
		MaxNodeBytes:         cfg.Limits.MaxNodeBytes,
		MaxNodeIDBytes:       cfg.Limits.MaxNodeIDBytes,
		MaxClassNameBytes:    cfg.Limits.MaxClassNameBytes,
		ClientLog:            clientLog,

		AllowCompressedRequests: cfg.Server.AllowCompressedRequests,
		RESTReadTimeout:         cfg.REST.ReadTimeout,
		MaxHeldPolls:            cfg.REST.MaxHeldPolls,

		LoadReports:   r.loadUpstream(),
		NoLoadReports: noLoadReports,
		LoadLimits: relay.LoadLimits{
			MaxStreams:           cfg.LoadReporting.MaxStreams,
			ReportsPerSecond:     cfg.LoadReporting.ReportsPerSecond,
			ReportBurst:          cfg.LoadReporting.ReportBurst,
			MaxClustersPerReport: cfg.LoadReporting.MaxClustersPerReport,
			MaxStatsPerReport:    cfg.LoadReporting.MaxStatsPerReport,
			MaxClassReportBytes:  cfg.LoadReporting.MaxClassReportBytes,
			// A control plane that refused load reports is asked again
			// as a failed stream would be, at the backoff's cap.
			RefusalHold: cfg.Upstream.Backoff.Max,
		},
	})
	r.grpcSrv = grpc.NewServer(r.grpcOptions(st.serverTLS)...)
	r.server.Register(r.grpcSrv)
	r.stop.push(r.grpcSrv.Stop)
	return nil
}

// noLoadReports is what a load-reporting client of a relay serving from
// files is told: there is no control plane, so no load reporting service.
const noLoadReports = "xds-relay serves resources from files (source.dir), with no control plane: " +
	"there is no load reporting service to forward load reports to (set upstream.address to a control plane serving LoadReportingService)"

// loadUpstream is the upstream client as the downstream server's
// LoadUpstream; nil when serving from files.
func (r *Relay) loadUpstream() relay.LoadUpstream {
	if r.upstream == nil {
		return nil
	}
	return loadReporter{r.upstream}
}

// loadReporter adapts the upstream client to relay.LoadUpstream (the two
// packages name the feed's interface each for itself).
type loadReporter struct{ c *upstream.Client }

func (l loadReporter) ReportLoad(class *shard.Class, sendAll bool, feed relay.LoadFeed) func(abort bool) {
	return l.c.ReportLoad(class, sendAll, feed)
}

// grpcOptions are the downstream gRPC server's limits and credentials.
func (r *Relay) grpcOptions(serverTLS *tls.Config) []grpc.ServerOption {
	cfg := r.cfg
	opts := append(relay.ServerOptions(),
		grpc.MaxConcurrentStreams(uint32(cfg.Limits.MaxStreamsPerConnection)),
		grpc.MaxRecvMsgSize(cfg.Limits.MaxMessageBytes),
	)
	opts = append(opts, relay.ConnLimits{
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
	opts = append(opts, r.server.CompressionOptions()...)
	if serverTLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(serverTLS)))
	}
	return opts
}

// listen opens the xDS, admin and REST listeners and makes the HTTP
// servers (not serving yet).
func (r *Relay) listen(st *starting) error {
	cfg, log := r.cfg, r.log
	lis, err := r.listenTCP("listen", cfg.Listen)
	if err != nil {
		return err
	}
	r.lis = lis
	if r.adminLis, err = r.listenTCP("admin listen", cfg.Admin); err != nil {
		return err
	}
	if cfg.AdminTokenFile != "" {
		if r.adminTok, err = newAdminToken(cfg.AdminTokenFile, log.Named("admin")); err != nil {
			return err
		}
	} else if !loopback(cfg.Admin) {
		log.Warn("the admin port is not on loopback and has no admin_token_file: anyone who reaches it can read /debug/, pprof and change the log level",
			zap.String("admin", cfg.Admin))
	}
	r.adminSrv = &http.Server{Handler: requireToken(r.adminTok, r.adminHandler()), ReadHeaderTimeout: 10 * time.Second}
	if cfg.REST.Listen == "" {
		return nil
	}
	if r.restLis, err = r.listenTCP("rest listen", cfg.REST.Listen); err != nil {
		return err
	}
	maxHold := offIfNegative(cfg.REST.MaxHold) // 0: every poll is answered at once
	// A held long poll must not be cut off by the write timeout.
	r.restSrv = &http.Server{Handler: r.server.RESTHandler(maxHold),
		ReadHeaderTimeout: cfg.REST.ReadTimeout, IdleTimeout: cfg.REST.IdleTimeout,
		WriteTimeout: maxHold + 30*time.Second,
		ErrorLog:     restErrorLog(log)}
	if st.serverTLS != nil && !cfg.REST.Plaintext {
		// REST follows the xDS listener: the same certificate, client
		// CAs and reloads; Authorize applies to it as to gRPC.
		r.restSrv.TLSConfig = withNextProtos(st.serverTLS, "h2", "http/1.1")
	}
	return nil
}

// listenTCP listens on addr and pushes closing the listener; what names the
// listener in the error.
func (r *Relay) listenTCP(what, addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, addr, err)
	}
	// A server that served l has closed it already; closing again is
	// harmless.
	r.stop.push(func() { _ = l.Close() })
	return l, nil
}

// serve starts the goroutines: the file source's run loop, the REST, admin
// and gRPC servers. Nothing fails from here on. Their cleanup, pushed last
// and so run first, stops them and waits for them.
func (r *Relay) serve() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.closing = cancel, ctx
	log := r.log
	if r.files != nil {
		r.goServe(func() {
			if err := r.files.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("file source stopped", zap.Error(err))
			}
		})
	}
	if r.restSrv != nil {
		r.goServe(func() {
			serve := r.restSrv.Serve
			if r.restSrv.TLSConfig != nil {
				serve = func(l net.Listener) error { return r.restSrv.ServeTLS(l, "", "") }
			}
			if err := serve(r.gate.Listener(r.restLis)); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("REST server stopped", zap.Error(err))
			}
		})
	}
	if r.overload != nil {
		r.goServe(func() { r.overload.Run(ctx) })
	}
	r.goServe(func() {
		if err := r.adminSrv.Serve(r.adminLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server stopped", zap.Error(err))
		}
	})
	r.goServe(func() {
		if err := r.grpcSrv.Serve(r.server.TrackConnections(r.gate.Listener(r.lis))); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			log.Error("xDS server stopped", zap.Error(err))
		}
	})
	r.stop.push(func() {
		cancel() // a Shutdown in progress ends its drain; the file source stops
		r.grpcSrv.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.adminSrv.Shutdown(ctx)
		if r.restSrv != nil {
			_ = r.restSrv.Close() // held polls end; clients poll again, elsewhere
		}
		r.wg.Wait()
	})
	r.ready.Store(true)
}

// goServe runs f on a goroutine the relay waits for when it stops.
func (r *Relay) goServe(f func()) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
}
