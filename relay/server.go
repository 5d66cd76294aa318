package relay

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// Options tunes the downstream server. Zero values take the defaults.
type Options struct {
	// MaxTypesPerStream bounds the type URLs one ADS stream may subscribe to
	// (default 64): each is a table in the class and a queue slot.
	MaxTypesPerStream int
	// MaxResourceNames bounds resource_names in one request (default 100000).
	MaxResourceNames int
}

func (o Options) withDefaults() Options {
	if o.MaxTypesPerStream <= 0 {
		o.MaxTypesPerStream = 64
	}
	if o.MaxResourceNames <= 0 {
		o.MaxResourceNames = 100000
	}
	return o
}

// Server serves the xDS services to downstream clients from a shard.Registry.
type Server struct {
	// Set at construction, read-only.
	registry *shard.Registry
	log      *zap.Logger
	opts     Options
	nackLog  *rateLimiter

	nextID atomic.Uint64

	mu      sync.Mutex
	streams map[*sotwStream]struct{} // guarded by mu
}

// NewServer returns a server over registry.
func NewServer(registry *shard.Registry, log *zap.Logger, opts Options) *Server {
	return &Server{
		registry: registry,
		log:      log,
		opts:     opts.withDefaults(),
		nackLog:  newRateLimiter(time.Second, 20),
		streams:  map[*sotwStream]struct{}{},
	}
}

// ServerOptions are the grpc.ServerOptions the relay's services need: the
// zero-copy codec and the handler that turns away xDS v2 clients.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(wire.NewCodec()),
		grpc.UnknownServiceHandler(unknownMethod),
	}
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

func (s *Server) serveSotW(t sotwTransport, fixedType, variant string) error {
	st := &sotwStream{
		id:        s.nextID.Add(1),
		srv:       s,
		transport: t,
		fixedType: fixedType,
		variant:   variant,
		peer:      peerAddr(t.Context()),
		started:   time.Now(),
		wake:      dedup.NewSignal(),
		types:     map[string]*typeSub{},
	}
	s.mu.Lock()
	s.streams[st] = struct{}{}
	s.mu.Unlock()
	err := st.serve()
	if err != nil && status.Code(err) != codes.Canceled {
		st.logger().Debug("stream ended", zap.Error(err))
	}
	return err
}

func (s *Server) forget(st *sotwStream) {
	s.mu.Lock()
	delete(s.streams, st)
	s.mu.Unlock()
}

func (s *Server) logNACK(st *sotwStream, typeURL, version, msg string) {
	if s.nackLog.allow() {
		st.logger().Warn("client rejected a response", zap.String("type_url", typeURL), zap.String("version", version), zap.String("error", msg))
	}
}

// StreamStatus describes one downstream stream, for the admin endpoints.
type StreamStatus struct {
	ID      uint64       `json:"id"`
	Variant string       `json:"variant"`
	Peer    string       `json:"peer"`
	Node    string       `json:"node,omitempty"`
	Class   string       `json:"class,omitempty"`
	Started time.Time    `json:"started"`
	Bytes   int64        `json:"bytes_sent"`
	Types   []TypeStatus `json:"types"`
}

// TypeStatus describes one type URL of a stream.
type TypeStatus struct {
	TypeURL      string   `json:"type_url"`
	Wildcard     bool     `json:"wildcard"`
	Names        []string `json:"names,omitempty"`
	SentVersion  string   `json:"sent_version,omitempty"`
	AckedVersion string   `json:"acked_version,omitempty"`
	Nonce        string   `json:"nonce,omitempty"`
	Pushes       int      `json:"pushes"`
	ACKs         int      `json:"acks"`
	NACKs        int      `json:"nacks"`
	LastNACK     string   `json:"last_nack,omitempty"`
	StaleNonces  int      `json:"stale_nonces"`
}

// Streams returns the open downstream streams, by id; at most limit of them
// (0: all).
func (s *Server) Streams(limit int) []StreamStatus {
	s.mu.Lock()
	streams := slices.Collect(maps.Keys(s.streams))
	s.mu.Unlock()
	slices.SortFunc(streams, func(a, b *sotwStream) int { return int(a.id) - int(b.id) })
	if limit > 0 && len(streams) > limit {
		streams = streams[:limit]
	}
	out := make([]StreamStatus, 0, len(streams))
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

func (s *sotwStream) status() StreamStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := StreamStatus{ID: s.id, Variant: s.variant, Peer: s.peer, Started: s.started, Bytes: s.bytes}
	if s.class != nil {
		out.Node, out.Class = s.node.GetId(), s.class.Name
	}
	for _, typeURL := range slices.Sorted(maps.Keys(s.types)) {
		t := s.types[typeURL]
		ts := TypeStatus{TypeURL: typeURL, SentVersion: t.sentVersion, AckedVersion: t.ackedVersion, Nonce: t.nonce,
			Pushes: t.pushes, ACKs: t.acks, NACKs: t.nacks, LastNACK: t.lastNACK, StaleNonces: t.staleNonces}
		if t.shard != nil {
			ts.Wildcard, ts.Names = t.shard.Sub.Wildcard, t.shard.Sub.Names
		}
		out.Types = append(out.Types, ts)
	}
	return out
}
