package upstream

import (
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/clientlog"
	"github.com/xds-relay/xds-relay/shard/drop"
)

// Config configures the upstream client.
type Config struct {
	// Address is the control plane's HOST:PORT.
	Address string
	// Fallbacks are more control planes, in order of preference after
	// Address: the connection uses the first that accepts it, and fails over
	// to the next when its server goes away.
	Fallbacks []string
	// RelayID is the node id the relay presents upstream. Empty: one per
	// class, of Istio's shape (see relaySelf.relayID).
	RelayID string
	// Backoff paces reconnection. Zero means DefaultBackoff.
	Backoff Backoff
	// StreamWindow and ConnWindow are the connection's fixed HTTP/2
	// flow-control windows, a class stream's and the connection's, in
	// bytes (at least 64 KiB). Zero means DefaultStreamWindow and
	// DefaultConnWindow.
	StreamWindow, ConnWindow int32
	// MaxMessageBytes is the largest upstream response accepted; one over
	// it is NACKed naming the key (msgsize.go). Zero means
	// DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Resync is how long, on average, a class stream lives before a new one
	// replaces it to reconcile what the class holds with the upstream
	// (resync.go; the app's default is DefaultResyncInterval). Zero: a
	// stream lives until it fails.
	Resync time.Duration
	// Delta selects the incremental protocol (DeltaAggregatedResources)
	// instead of state of the world.
	Delta bool
	// PassVersions passes the upstream's versions through to clients (SotW
	// version_info; a delta upstream's resource versions) instead of
	// content hashes, for operators who correlate what a client holds with
	// their control plane.
	PassVersions bool
	// AskWildcard asks every type for all of its resources (SotW: the
	// legacy wildcard, delta: "*") and selects the names clients subscribe
	// to in the relay, never asking by name. For control planes that answer
	// a named request only when it names every resource of the type
	// (go-control-plane's snapshot cache in ADS mode): such a cache answers
	// a stream's first request when the type is empty, then falls silent
	// once the type grows, which no wait can tell from "nothing changed".
	AskWildcard bool
	// SiteWildcard: the control plane's wildcard is a set of its choosing
	// (upstream.wildcard: site_specific; shard.WildcardSiteSpecific), not
	// every resource. Names a class's clients ask beside a wildcard are
	// asked too (SotW: ["*", names...]; delta: "*" and the names, as
	// always), and the class serves wildcard shards the wildcard's set only.
	// The registry must be told the same (shard.Registry.SetWildcardScope).
	SiteWildcard bool
	// Metrics receives the counted events (default NopMetrics).
	Metrics Metrics
	// Drops counts the upstream answers the relay does not pass on or
	// answer at once, by reason (nil: not counted).
	Drops *drop.Counters
	// LogGate gates the warnings the control plane's messages cause (a
	// NACK, an unsolicited push, a failed stream) and cuts the upstream's
	// values in the log and in Status (upstreamlog.go). Nil: a gate of
	// DefaultUpstreamLinesPerSecond and DefaultUpstreamFieldBytes.
	LogGate *clientlog.Gate
	// Tracer traces each upstream response (default: no tracing); the span's
	// context goes with the update, so its fan-out can be traced under it.
	Tracer trace.Tracer
	// Creds are the connections' transport credentials (nil: plaintext).
	Creds credentials.TransportCredentials
	// MaxConnections caps the upstream connections (pool.go). Zero means
	// DefaultMaxConnections.
	MaxConnections int
	// ConnectTimeout bounds each connection attempt: dialing, the
	// handshake and the server's HTTP/2 preface (gRPC's MinConnectTimeout;
	// a later attempt may take up to the backoff's current delay). A class
	// stream that finds its connection not ready fails at once and backs
	// off; the connection's own attempts go on. Zero means
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// UnavailableAfter is how long a class's upstream may be unreachable
	// (no answer, and no open stream) before the class is marked so
	// (shard.Class.SetUpstreamUnavailable): its downstream clients the
	// relay has nothing for are then told UNAVAILABLE (availability.go).
	// Zero: never marked.
	UnavailableAfter time.Duration
	// Affinity sends each class to one member of a tier of upstreams
	// (upstream.affinity: class): the live member rendezvous hashing picks
	// for the class's name, so every relay in front of the tier sends a
	// class to the same member (members.go). Fallbacks are not used with
	// it. Off: every class goes to Address (and its fallbacks).
	Affinity bool
	// Members are the tier's HOST:PORTs (upstream.members). Empty with
	// Affinity: every address Address's host resolves to, with Address's
	// port, re-resolved every ResolveInterval (resolve.go).
	Members []string
	// ResolveInterval is how often Address is resolved again for its
	// members. Zero means DefaultResolveInterval.
	ResolveInterval time.Duration
	// LookupHost resolves a host name to its addresses (A and AAAA); nil
	// means net.DefaultResolver's.
	LookupHost func(ctx context.Context, host string) ([]string, error)
	// DialOptions are added to the defaults (Creds, keepalive). A
	// grpc.WithTransportCredentials among them replaces Creds, and with
	// them the reading of the peer's stream limit: each connection then
	// carries one class stream.
	DialOptions []grpc.DialOption
}

// Client holds the connections to the control plane (as many as the
// classes' streams need, pool.go) and one ADS stream per attached class.
type Client struct {
	// Read-only after creation.
	cfg     Config
	self    relaySelf  // the relay's own host name and IP, for default node ids
	members *memberSet // the upstreams classes go to
	pool    *connPool  // without affinity, the one member's pool (else nil)
	log     *zap.Logger
	ctx     context.Context
	cancel  context.CancelFunc

	// wg counts the class streams' run goroutines and the resolver's,
	// which the client owns: Add under mu while !closed (the resolver's in
	// New); Close waits.
	wg sync.WaitGroup

	// Guarded by mu.
	mu      sync.Mutex
	streams map[*shard.Class]*attachment
	closed  bool
}

// attachment is one attached class's stream and how to stop it. Read-only
// after creation; done is closed by the stream's run goroutine.
type attachment struct {
	stream *classStream
	cancel context.CancelFunc
	done   chan struct{} // closed when the stream's goroutine returned
}

// The upstream connection's HTTP/2 flow-control windows by default, fixed
// (Config.StreamWindow, ConnWindow; upstream.stream_window and
// upstream.connection_window). What the control plane may send a class
// stream before the relay has read it is at most the stream's window
// (grpc-go replenishes the connection's window as bytes arrive, so the
// connection's paces the connection but bounds no memory). gRPC's default windows start at 64 KiB and grow with its
// bandwidth estimate up to 16 MiB a stream; with them, a control plane
// that sends every class's state at once (a relay's start, a change to
// every class) left the relay's RSS 15-26 MiB higher at 100 classes of
// 125 KB responses than with these windows, which carry 1 MiB a stream
// and 4 MiB the connection a round trip (100 and 400 MB/s to a control
// plane 10 ms away; bench/results/issue14-targets, "The control plane in
// a process of its own"). A control plane much farther away, sending states of many
// megabytes, may want larger ones.
const (
	DefaultStreamWindow = 1 << 20
	DefaultConnWindow   = 4 << 20
)

// New creates the client. The connection is established lazily, so a control
// plane that is down at start is retried like one that goes away later.
func New(cfg Config, log *zap.Logger) (*Client, error) {
	if cfg.Address == "" {
		return nil, errors.New("upstream: address is empty")
	}
	if cfg.Backoff.Initial <= 0 || cfg.Backoff.Max <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NopMetrics{}
	}
	if cfg.StreamWindow <= 0 {
		cfg.StreamWindow = DefaultStreamWindow
	}
	if cfg.ConnWindow <= 0 {
		cfg.ConnWindow = DefaultConnWindow
	}
	if cfg.LogGate == nil {
		cfg.LogGate = clientlog.NewGate(DefaultUpstreamLinesPerSecond, DefaultUpstreamFieldBytes)
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("")
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.ResolveInterval <= 0 {
		cfg.ResolveInterval = DefaultResolveInterval
	}
	if cfg.LookupHost == nil {
		cfg.LookupHost = net.DefaultResolver.LookupHost
	}
	creds := cfg.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := append([]grpc.DialOption{
		// The connection's own reconnection follows the configured backoff
		// too: grpc's default would wait up to 120 s after a long outage.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: cfg.Backoff.Initial, Multiplier: 1.6, Jitter: 0.2, MaxDelay: cfg.Backoff.Max},
			MinConnectTimeout: cfg.ConnectTimeout,
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		// Fixed flow-control windows bound what the control plane can
		// have sent a class stream unread (see DefaultStreamWindow).
		grpc.WithInitialWindowSize(cfg.StreamWindow), grpc.WithInitialConnWindowSize(cfg.ConnWindow),
		// gRPC reads up to the transport ceiling, above the key, so a
		// response over the key can still be NACKed by its nonce.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(transportCeiling(cfg.MaxMessageBytes))),
	}, cfg.DialOptions...)
	// Each connection has its own credentials (to learn its peer's stream
	// limit) and resolver (a manual resolver serves one connection).
	dialer := func(addr string, fallbacks []string, more ...grpc.DialOption) func(*streamLimit) (*grpc.ClientConn, error) {
		return func(limit *streamLimit) (*grpc.ClientConn, error) {
			o := append([]grpc.DialOption{grpc.WithTransportCredentials(sniffCreds{TransportCredentials: creds, limit: limit})}, opts...)
			return dialUpstream(addr, fallbacks, append(o, more...))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{cfg: cfg, self: lookupSelf(), log: log, ctx: ctx, cancel: cancel, streams: map[*shard.Class]*attachment{}}
	if !cfg.Affinity {
		// The first connection is made now, so a bad target fails New.
		c.pool = newConnPool(cfg.MaxConnections, dialer(cfg.Address, cfg.Fallbacks))
		if err := c.pool.open(); err != nil {
			cancel()
			return nil, err
		}
		c.members = fixedMembers(cfg.Address, c.pool)
		return c, nil
	}
	var more []grpc.DialOption
	if len(cfg.Members) == 0 {
		// A resolved member is an IP: its certificate is verified against
		// the tier's name, as a connection to Address would be.
		more = append(more, grpc.WithAuthority(cfg.Address))
	}
	c.members = affinityMembers(func(addr string, onFirst func(*grpc.ClientConn, connectivity.State)) *connPool {
		p := newConnPool(cfg.MaxConnections, dialer(addr, nil, more...))
		p.onFirst = onFirst
		return p
	})
	if len(cfg.Members) > 0 {
		if err := c.members.set(cfg.Members); err != nil {
			cancel()
			_ = c.members.close()
			return nil, err
		}
		return c, nil
	}
	c.resolveMembers() // a name that does not resolve yet leaves the set empty: classes wait
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.runResolver()
	}()
	return c, nil
}

// dialUpstream makes one connection to the control plane at addr (and its
// fallbacks).
func dialUpstream(addr string, fallbacks []string, opts []grpc.DialOption) (*grpc.ClientConn, error) {
	target := addr
	if len(fallbacks) > 0 {
		// One connection over an ordered address list: pick_first (gRPC's
		// default policy) connects to the first that answers, and on its
		// failure tries them again in order.
		r := manual.NewBuilderWithScheme("xds-relay-upstream")
		state := resolver.State{}
		for _, a := range append([]string{addr}, fallbacks...) {
			// Each control plane's certificate is verified against its own
			// name, not the list's target.
			state.Addresses = append(state.Addresses, resolver.Address{Addr: a, ServerName: a})
		}
		r.InitialState(state)
		opts = append(opts, grpc.WithResolvers(r))
		target = r.Scheme() + ":///control-plane"
	}
	return grpc.NewClient(target, opts...)
}

// Attach starts the class's upstream stream and returns the hook the class
// calls when its interest changes. It never blocks.
func (c *Client) Attach(class *shard.Class) func(typeURL string) {
	node := c.classNode(class)
	s := &classStream{
		class:    class,
		members:  c.members,
		node:     node,
		log:      c.log.With(zap.String("class", class.Name)),
		wake:     dedup.NewSignal(),
		bo:       c.cfg.Backoff,
		maxMsg:   c.cfg.MaxMessageBytes,
		valid:    &validator{passVersions: c.cfg.PassVersions, store: class.Store()},
		delta:    c.cfg.Delta,
		askWild:  c.cfg.AskWildcard,
		siteWild: c.cfg.SiteWildcard,
		resync:   c.cfg.Resync,
		metrics:  c.cfg.Metrics,
		drops:    c.cfg.Drops,
		gate:     c.cfg.LogGate,
		tracer:   c.cfg.Tracer,
		status:   ClassStreamStatus{Class: class.Name, NodeID: node.Id, State: StateConnecting, Versions: map[string]string{}},
	}
	s.avail = &availability{s: s, after: max(c.cfg.UnavailableAfter, 0)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return func(string) {}
	}
	ctx, cancel := context.WithCancel(c.ctx)
	a := &attachment{stream: s, cancel: cancel, done: make(chan struct{})}
	c.streams[class] = a
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(a.done)
		s.run(ctx)
	}()
	return func(string) { s.wake.Notify() }
}

// Detach closes the class's upstream stream and waits for its goroutine:
// the class was dropped. A later class of the same name is attached anew,
// with a fresh stream, so nothing the upstream remembers of this stream can
// hide a change from it.
func (c *Client) Detach(class *shard.Class) {
	c.mu.Lock()
	a := c.streams[class]
	delete(c.streams, class)
	c.mu.Unlock()
	if a == nil {
		return
	}
	a.cancel()
	<-a.done
}

// Status returns each class stream's state, sorted by class.
func (c *Client) Status() []ClassStreamStatus {
	c.mu.Lock()
	streams := slices.Collect(maps.Values(c.streams))
	c.mu.Unlock()
	out := make([]ClassStreamStatus, 0, len(streams))
	for _, a := range streams {
		out = append(out, a.stream.snapshot())
	}
	slices.SortFunc(out, func(a, b ClassStreamStatus) int {
		if a.Class < b.Class {
			return -1
		}
		if a.Class > b.Class {
			return 1
		}
		return 0
	})
	return out
}

// Close stops every class stream, waits for their goroutines and closes the
// connection.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	return c.members.close()
}

// Members is the affinity tier's members, with the classes on each (nil
// without upstream.affinity: class).
func (c *Client) Members() []MemberStatus {
	out := c.members.status()
	if out == nil {
		return nil
	}
	on := map[string]int{}
	for _, s := range c.Status() {
		if s.Member != "" && s.State != StateStopped {
			on[s.Member]++
		}
	}
	for i := range out {
		out[i].Classes = on[out[i].Address]
	}
	return out
}
