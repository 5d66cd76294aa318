package relay

import (
	"cmp"
	"context"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/clientlog"
	"github.com/xds-relay/xds-relay/shard/drop"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// Options tunes the downstream server. Zero values take the defaults.
type Options struct {
	// MaxTypesPerStream bounds the type URLs one ADS stream may subscribe to
	// (default 64): each is a table in the class and a queue slot.
	MaxTypesPerStream int
	// MaxResourceNames bounds resource_names in one request (default 100000).
	MaxResourceNames int
	// Metrics receives the counted events (default NopMetrics).
	Metrics Metrics
	// Drops counts, by reason, what the streams did not send a client
	// (superseded, collapsed, already held...); nil: not counted. The
	// relay's upstream side may count into the same counters.
	Drops *drop.Counters
	// MaxStreams bounds concurrent streams (default 200000): more are
	// refused with RESOURCE_EXHAUSTED so the client tries another relay.
	MaxStreams int
	// RequestsPerSecond and RequestBurst rate-limit each stream's requests
	// (defaults 100, 200); excess ends the stream with RESOURCE_EXHAUSTED.
	RequestsPerSecond float64
	RequestBurst      int
	// MaxCollapses disconnects a chronic laggard: a client whose queue
	// overflowed this many times (default 10; negative: never).
	MaxCollapses int
	// FirstRequestTimeout ends a stream that sends no request within it
	// (default 30s), so streams that ask for nothing do not hold a slot of
	// MaxStreams.
	FirstRequestTimeout time.Duration
	// Input bounds, checked before a value is stored, logged or used as a
	// label (see validate.go): MaxTypeURLBytes (default 256),
	// MaxResourceNameBytes (default 2048), MaxNodeBytes (the encoded Node,
	// default 65536), MaxNodeIDBytes (default 1024), MaxClassNameBytes (the
	// class the node maps to, default 256), MaxVersionBytes (a version_info
	// or an initial_resource_versions version, default 1024).
	MaxTypeURLBytes      int
	MaxResourceNameBytes int
	MaxVersionBytes      int
	MaxNodeBytes         int
	MaxNodeIDBytes       int
	MaxClassNameBytes    int
	// ClientLog gates every log line a client triggers (default 20 lines a
	// second, fields cut to 1024 bytes).
	ClientLog *clientlog.Gate
	// Authorize, if set, decides whether the stream's peer (its context
	// holds the peer and its certificates) may claim node for class; an
	// error ends the stream before anything is sent (use PermissionDenied).
	Authorize func(ctx context.Context, node *corev3.Node, class string) error
	// AuthorizeType, if set, decides whether the peer (as for Authorize) may
	// receive resources of typeURL; it is asked on every request, and on
	// every REST poll, before the request touches any state. An error ends
	// the stream (use PermissionDenied).
	AuthorizeType func(ctx context.Context, typeURL string) error
	// ParentRemovalWait bounds how long a removal is held back for the
	// change that makes it safe (default 5s; negative: removals are never
	// held; see removalGate): a delta client's removal of a Cluster
	// (Listener) for the removal of its ClusterLoadAssignment
	// (RouteConfiguration), and a SotW or delta client's removal of a
	// Cluster for the route or Listener change that stops naming it.
	ParentRemovalWait time.Duration
	// AllowCompressedRequests accepts gzip-compressed requests (gRPC
	// grpc-encoding, REST Content-Encoding), inflated within the message
	// limits; otherwise they are refused (compression.go).
	AllowCompressedRequests bool
	// RESTReadTimeout bounds how long a REST request's body may take to
	// arrive (default DefaultRESTReadTimeout); past it the poll gets 408.
	RESTReadTimeout time.Duration
	// MaxHeldPolls bounds the REST polls held at once, each a goroutine
	// and a connection (default DefaultMaxHeldPolls; negative: no cap). A
	// poll that would be held past it gets 429; one answered at once is
	// never refused for it.
	MaxHeldPolls int
	// Admission, if set, is asked before the relay takes on a new stream,
	// subscription or REST poll (see admission.go).
	Admission Admission
	// Peers, if set, accounts each peer's share of streams, stream starts
	// and class creations (see PeerLimits); share it with the ConnGate of
	// the listeners. nil: no per-peer limits.
	Peers *Peers
	// LoadReports, if set, carries each class's load reports to the
	// control plane (LoadReportingService, lrs.go). nil: the service
	// answers UNIMPLEMENTED with NoLoadReports (default
	// DefaultNoLoadReports).
	LoadReports   LoadUpstream
	NoLoadReports string
	// LoadLimits bound the load-reporting clients.
	LoadLimits LoadLimits
}

// DefaultParentRemovalWait is Options.ParentRemovalWait's default.
const DefaultParentRemovalWait = 5 * time.Second

func (o Options) withDefaults() Options {
	if o.MaxTypesPerStream <= 0 {
		o.MaxTypesPerStream = 64
	}
	if o.MaxResourceNames <= 0 {
		o.MaxResourceNames = 100000
	}
	if o.Metrics == nil {
		o.Metrics = NopMetrics{}
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = 200000
	}
	if o.RequestsPerSecond <= 0 {
		o.RequestsPerSecond = 100
	}
	if o.RequestBurst <= 0 {
		o.RequestBurst = 200
	}
	if o.MaxCollapses == 0 {
		o.MaxCollapses = 10
	}
	if o.FirstRequestTimeout <= 0 {
		o.FirstRequestTimeout = 30 * time.Second
	}
	for _, d := range []struct {
		v   *int
		def int
	}{{&o.MaxTypeURLBytes, 256}, {&o.MaxResourceNameBytes, 2048}, {&o.MaxNodeBytes, 64 << 10}, {&o.MaxNodeIDBytes, 1024}, {&o.MaxClassNameBytes, 256}, {&o.MaxVersionBytes, 1024}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if o.ClientLog == nil {
		o.ClientLog = clientlog.NewGate(20, 1024)
	}
	if o.ParentRemovalWait == 0 {
		o.ParentRemovalWait = DefaultParentRemovalWait
	}
	if o.RESTReadTimeout <= 0 {
		o.RESTReadTimeout = DefaultRESTReadTimeout
	}
	if o.MaxHeldPolls == 0 {
		o.MaxHeldPolls = DefaultMaxHeldPolls
	}
	if o.NoLoadReports == "" {
		o.NoLoadReports = DefaultNoLoadReports
	}
	o.LoadLimits = o.LoadLimits.withDefaults()
	return o
}

// Server serves the xDS services to downstream clients from a shard.Registry.
type Server struct {
	// Read-only after creation.
	registry *shard.Registry
	log      *zap.Logger
	opts     Options
	metrics  Metrics
	drops    *drop.Counters  // nil: not counted
	clog     *clientlog.Gate // every client-triggered log line passes it

	// Accessed atomically.
	nextID atomic.Uint64 // the last stream id given
	// conns: remote address -> *trackedConn (see TrackConnections);
	// a sync.Map, safe for concurrent use.
	conns sync.Map
	held  heldPolls // REST polls held now, within Options.MaxHeldPolls
	// loadStreams counts the open load-report streams, within
	// LoadLimits.MaxStreams.
	loadStreams atomic.Int64

	loads loadHubs // the classes' load reporting (lrs_hub.go)

	mu sync.Mutex
	// streams: the open streams, each with what returns its peer's share
	// (see Options.Peers). Guarded by mu.
	streams map[downstream]func()
	// draining: a drain began (StartDrain); from then on register refuses
	// every stream, so none opens after Drain listed the streams it ends.
	// Guarded by mu.
	draining bool

	drain drainState // what the drain refused, and the signal held polls wait on
}

// downstream is a client stream of any variant, as the server tracks it.
type downstream interface {
	streamID() uint64
	status() DownstreamStatus
	closeStream()
	// endUnserved ends the stream if it is of class c and the relay
	// cannot serve it (unserved.go).
	endUnserved(c *shard.Class)
}

// NewServer returns a server over registry.
func NewServer(registry *shard.Registry, log *zap.Logger, opts Options) *Server {
	opts = opts.withDefaults()
	s := &Server{
		registry: registry,
		log:      log,
		opts:     opts,
		metrics:  opts.Metrics,
		drops:    opts.Drops,
		clog:     opts.ClientLog,
		streams:  map[downstream]func(){},
		drain:    drainState{started: make(chan struct{})},
	}
	s.held.max = int64(max(opts.MaxHeldPolls, -1))
	if registry != nil {
		registry.OnUpstreamUnavailable(s.classUnavailable)
	}
	return s
}

// ServerOptions are the grpc.ServerOptions the relay's services need: the
// zero-copy codec, the handler that turns away xDS v2 clients, and
// TransportOptions.
func ServerOptions() []grpc.ServerOption {
	return append([]grpc.ServerOption{
		grpc.ForceServerCodecV2(wire.NewCodec()),
		grpc.UnknownServiceHandler(unknownMethod),
	}, TransportOptions()...)
}

// TransportOptions are the per-connection buffer settings of a server holding
// tens of thousands of mostly idle connections (docs/benchmarks.md, "Memory
// per stream"):
//   - no read buffer: clients send small, rare requests (ACKs), so a read
//     costs a second syscall now and then instead of 32 KiB per connection;
//   - a shared write buffer: taken from a pool for a write and returned
//     after the flush, so an idle connection holds none.
func TransportOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ReadBufferSize(0), grpc.SharedWriteBuffer(true)}
}

// unknownMethod answers any method the relay does not serve; v2 transport
// methods get a message saying v3 is required.
func unknownMethod(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	if strings.HasPrefix(method, "/envoy.api.v2.") || strings.HasPrefix(method, "/envoy.service.discovery.v2.") {
		return status.Errorf(codes.Unimplemented, "%s: xDS transport API v2 is not supported; configure the client for transport_api_version V3", method)
	}
	return status.Errorf(codes.Unimplemented, "unknown method %s", method)
}

// register tracks a stream from peer addr for status while it is served,
// within MaxStreams and the peer's share (Options.Peers); forget ends that.
func (s *Server) register(st downstream, variant string, addr net.Addr) error {
	refused := func(err error) error {
		s.countRefused(variant, ReasonLimit)
		return err
	}
	full := func() error {
		return status.Errorf(codes.ResourceExhausted, "xds-relay serves its limit of %d streams: try another relay", s.opts.MaxStreams)
	}
	if s.Draining() {
		return s.refuseDraining(variant)
	}
	if s.StreamCount() >= s.opts.MaxStreams {
		return refused(full()) // before the peer's rate is charged
	}
	if err := s.refuseNew("new stream"); err != nil {
		return refused(err)
	}
	done := func() {}
	if s.opts.Peers != nil {
		var err error
		if done, err = s.opts.Peers.openStream(addr); err != nil {
			return refused(err)
		}
	}
	s.mu.Lock()
	if s.draining { // the drain began meanwhile: it did not list st
		s.mu.Unlock()
		done()
		return s.refuseDraining(variant)
	}
	if len(s.streams) >= s.opts.MaxStreams { // others registered meanwhile
		s.mu.Unlock()
		done() // Peers.mu is never taken under mu
		return refused(full())
	}
	s.streams[st] = done
	s.mu.Unlock()
	return nil
}

// newClass charges the creation of a class to the peer of ctx, unless the
// node's class exists (a race with another creation charges both: the
// share errs on the side of the other peers).
func (s *Server) newClass(ctx context.Context, node *corev3.Node) error {
	if s.opts.Peers == nil || s.registry.Has(s.registry.Classify(node)) {
		return nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	return s.opts.Peers.newClass(p.Addr)
}

// logStreamEnd logs why a stream ended: at info when the relay ended it for
// what its client did (a request it cannot serve, a limit, a denied
// identity), so an operator sees refused clients without debug logging; at
// debug when the client left or the relay drained it. Both are client
// triggered, so both pass the client-log gate.
func (s *Server) logStreamEnd(logger func() *zap.Logger, err error, reason string) {
	refused := reason == ReasonInvalidRequest || reason == ReasonLimit || reason == ReasonDenied
	if !refused && !s.log.Core().Enabled(zap.DebugLevel) {
		return
	}
	ok, dropped := s.clog.Allow()
	if !ok {
		return
	}
	fields := []zap.Field{zap.String("reason", reason), dropped}
	if err != nil {
		fields = append(fields, zap.Stringer("code", status.Code(err)), s.clog.String("error", status.Convert(err).Message()))
	}
	if refused {
		logger().Info("stream ended by the relay", fields...)
		return
	}
	logger().Debug("client left", fields...)
}

// countRefused counts a stream refused before it was served, for reason:
// a disconnect, and no change to the open streams.
func (s *Server) countRefused(variant, reason string) {
	s.metrics.StreamOpened(variant)
	s.metrics.StreamClosed(variant, reason)
}

func (s *Server) forget(st downstream) {
	s.mu.Lock()
	done := s.streams[st]
	delete(s.streams, st)
	s.mu.Unlock()
	if done != nil {
		done()
	}
}

func (s *Server) logNACK(logger func() *zap.Logger, typeURL, version, msg string) {
	if ok, dropped := s.clog.Allow(); ok {
		logger().Warn("client rejected a response", s.clog.String("type_url", typeURL), s.clog.String("version", version), s.clog.String("error", msg), dropped)
	}
}

// DownstreamStatus describes one downstream stream, for the admin
// endpoints.
type DownstreamStatus struct {
	ID      uint64    `json:"id"`
	Variant string    `json:"variant"`
	Peer    string    `json:"peer"`
	Node    string    `json:"node,omitempty"`
	Class   string    `json:"class,omitempty"`
	Started time.Time `json:"started"`
	Bytes   int64     `json:"bytes_sent"`
	// Collapses counts the times the stream's queue overflowed and the
	// client was moved straight to the latest state.
	Collapses int                    `json:"queue_collapses"`
	Types     []DownstreamTypeStatus `json:"types"`
	// LoadReports counts the reports of a load-report stream (variant
	// lrs).
	LoadReports int `json:"load_reports,omitempty"`
}

// DownstreamTypeStatus describes one type URL of a downstream stream.
type DownstreamTypeStatus struct {
	TypeURL      string   `json:"type_url"`
	Wildcard     bool     `json:"wildcard"`
	Names        []string `json:"names,omitempty"`
	SentVersion  string   `json:"sent_version,omitempty"`
	AckedVersion string   `json:"acked_version,omitempty"`
	Nonce        string   `json:"nonce,omitempty"`
	Pushes       int      `json:"pushes"`
	Heartbeats   int      `json:"heartbeats"`
	ACKs         int      `json:"acks"`
	NACKs        int      `json:"nacks"`
	LastNACK     string   `json:"last_nack,omitempty"`
	StaleNonces  int      `json:"stale_nonces"`
}

// Streams returns the open downstream streams, by id; at most limit of them
// (0: all).
func (s *Server) Streams(limit int) []DownstreamStatus {
	s.mu.Lock()
	streams := slices.Collect(maps.Keys(s.streams))
	s.mu.Unlock()
	slices.SortFunc(streams, func(a, b downstream) int { return cmp.Compare(a.streamID(), b.streamID()) })
	if limit > 0 && len(streams) > limit {
		streams = streams[:limit]
	}
	out := make([]DownstreamStatus, 0, len(streams))
	for _, st := range streams {
		out = append(out, st.status())
	}
	return out
}

// StreamCount is the number of open downstream streams.
func (s *Server) StreamCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

func sortTypes(ts []DownstreamTypeStatus) {
	slices.SortFunc(ts, func(a, b DownstreamTypeStatus) int { return cmp.Compare(a.TypeURL, b.TypeURL) })
}

// Drain ends every open stream with ErrDraining, spread evenly over period
// in random order, so the clients' reconnections do not hit the other
// relays of the tier at once. It begins the drain first (StartDrain): a
// stream opened from then on is refused with UNAVAILABLE (ErrDrainRefused)
// and a REST poll answered 503, so the drain covers every stream, those its
// clients reopen at once on the same connection included (a client sees
// the end of its stream before the GOAWAY that grpc.Server.GracefulStop
// sends). A stream that ends by itself meanwhile takes no time: each wait
// is the time left divided among the streams still open. When ctx ends
// before the period (a deadline of ctx earlier than period counts as the
// period's end), the remaining streams are ended at once, and counted as
// cut. Drain returns when every stream it covers has been told to end, with
// what it did.
func (s *Server) Drain(ctx context.Context, period time.Duration) DrainReport {
	s.StartDrain()
	s.mu.Lock()
	streams := slices.Collect(maps.Keys(s.streams))
	s.mu.Unlock()
	rand.Shuffle(len(streams), func(i, j int) { streams[i], streams[j] = streams[j], streams[i] })
	rep := DrainReport{Streams: len(streams)}
	deadline := time.Now().Add(period)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i, st := range streams {
		s.mu.Lock()
		_, open := s.streams[st]
		// Open streams not yet told to end: this one and those after it,
		// as far as the count of all open streams can tell (those told
		// earlier are gone or about to be).
		left := min(len(s.streams), len(streams)-i)
		s.mu.Unlock()
		if !open {
			rep.Left++
			continue
		}
		if wait := time.Until(deadline) / time.Duration(max(left, 1)); wait > 0 && ctx.Err() == nil {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil && time.Now().Before(deadline) {
			rep.Cut++ // before its turn: the drain was cut short
		} else {
			rep.Spread++
		}
		st.closeStream()
	}
	rep.Refused, rep.PollsRefused = s.DrainRefusals()
	return rep
}
