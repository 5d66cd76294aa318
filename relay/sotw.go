package relay

import (
	"context"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// sotwTransport is what a SotW stream needs of a gRPC stream; every
// generated Stream* server stream satisfies it.
type sotwTransport interface {
	Context() context.Context
	Recv() (*discoveryv3.DiscoveryRequest, error)
	SendMsg(any) error
}

var _ sotwTransport = (grpc.BidiStreamingServer[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse])(nil)

// sotwStream is one downstream SotW stream (ADS or per-type).
type sotwStream struct {
	// Set at construction, read-only.
	id        uint64
	srv       *Server
	transport sotwTransport
	fixedType string // per-type services: the only type URL; "" for ADS
	variant   string
	peer      string
	started   time.Time
	wake      dedup.Signal // writer wake-up: a type became dirty

	// Written once by the reader goroutine (first request) under mu; the
	// reader reads them without mu, status readers with it.
	node  *corev3.Node
	class *shard.Class

	mu        sync.Mutex
	types     map[string]*typeSub // guarded by mu
	pending   []pendingResponse   // guarded by mu: responses to write, in update order
	collapses int                 // guarded by mu: times pending overflowed (see enqueueLocked)
	nonce     uint64              // guarded by mu
	bytes     int64               // guarded by mu
}

// pendingResponse is a response of a shard captured when the shard changed,
// waiting for the stream's writer.
type pendingResponse struct {
	t     *typeSub
	shard *shard.Shard
	resp  *shard.Response
}

// maxPending bounds a stream's queue. A client that keeps up never has more
// than a few entries; one that falls this far behind is served the latest
// state instead of every step (see collapseLocked).
const maxPending = 64

var _ shard.Watcher = (*sotwStream)(nil)

// ShardChanged implements shard.Watcher: the shard has a new response. It is
// called right after the response is stored, under the class lock, so
// Current is exactly this update's response.
func (s *sotwStream) ShardChanged(sh *shard.Shard) {
	s.mu.Lock()
	t := s.types[sh.TypeURL]
	if t == nil || t.shard != sh {
		s.mu.Unlock()
		return // a shard this stream is leaving
	}
	s.enqueueLocked(t, sh, sh.Current())
	s.mu.Unlock()
	s.wake.Notify()
}

// enqueueLocked queues resp for the writer, keeping the class's update order
// across types (make-before-break on ADS): a response supersedes a queued one
// only when it is of the same type and nothing was queued after it, so every
// step the upstream ordered across types reaches the client in that order.
// A queue that reaches maxPending collapses (collapseLocked).
func (s *sotwStream) enqueueLocked(t *typeSub, sh *shard.Shard, resp *shard.Response) {
	if resp == nil {
		return
	}
	e := pendingResponse{t: t, shard: sh, resp: resp}
	if n := len(s.pending); n > 0 && s.pending[n-1].t == t {
		s.pending[n-1] = e
		return
	}
	s.pending = append(s.pending, e)
	if len(s.pending) > maxPending {
		s.collapseLocked()
	}
}

// collapseLocked reduces the queue of a client far behind to one entry per
// type: each at the position of the type's first entry, with its latest
// response. The client then jumps to the latest state; cross-type order is
// kept only as far as first-queued order allows. Counted in collapses.
func (s *sotwStream) collapseLocked() {
	latest := make(map[*typeSub]pendingResponse, len(s.types))
	order := make([]*typeSub, 0, len(s.types))
	for _, e := range s.pending {
		if _, ok := latest[e.t]; !ok {
			order = append(order, e.t)
		}
		latest[e.t] = e
	}
	clear(s.pending)
	s.pending = s.pending[:0]
	for _, t := range order {
		s.pending = append(s.pending, latest[t])
	}
	s.collapses++
}

// serve runs the stream: the calling (gRPC handler) goroutine writes, a
// reader goroutine reads. The reader owns subscriptions and releases them
// when it exits, which it does once the stream's context ends.
func (s *sotwStream) serve() error {
	ctx := s.transport.Context()
	readErr := make(chan error, 1)
	go func() {
		defer s.release()
		readErr <- s.readLoop()
	}()
	for {
		select {
		case err := <-readErr:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-s.wake.C():
			if err := s.flush(); err != nil {
				return err
			}
		}
	}
}

// flush writes every pending type's latest response, in queue order.
func (s *sotwStream) flush() error {
	for {
		batch := s.collect()
		if len(batch) == 0 {
			return nil
		}
		for _, m := range batch {
			if err := s.transport.SendMsg(m); err != nil {
				return err
			}
		}
	}
}

// collect stamps a nonce on each queued response the client does not hold
// yet. No protobuf work: the body is shared, the suffix is the stream's.
func (s *sotwStream) collect() []*wire.Stamped {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*wire.Stamped
	for _, e := range s.pending {
		t := e.t
		if t.shard != e.shard {
			continue // queued for a subscription the client has since changed
		}
		if !t.force && e.resp.Version == t.sentVersion {
			continue
		}
		if len(e.resp.Names) == 0 && !shard.FullState(t.typeURL) {
			// An empty response is a no-op for a SotW client of a type
			// without full-state semantics (spec "Deleting Resources").
			continue
		}
		s.nonce++
		t.nonce = strconv.FormatUint(s.nonce, 36)
		t.sentVersion, t.force = e.resp.Version, false
		t.pushes++
		m := &wire.Stamped{Body: e.resp.Body, Suffix: wire.NonceSuffix(t.nonce)}
		s.bytes += int64(m.Len())
		out = append(out, m)
	}
	clear(s.pending)
	s.pending = s.pending[:0]
	return out
}

func (s *sotwStream) readLoop() error {
	for {
		req, err := s.transport.Recv()
		if err != nil {
			return err
		}
		if err := s.handle(req); err != nil {
			return err
		}
	}
}

// handle applies one request (reader goroutine only).
func (s *sotwStream) handle(req *discoveryv3.DiscoveryRequest) error {
	typeURL, err := s.requestType(req)
	if err != nil {
		return err
	}
	if s.class == nil {
		if req.GetNode() == nil {
			return status.Error(codes.InvalidArgument, "node: the first request of a stream must carry the node")
		}
		class := s.srv.registry.ClassFor(req.GetNode())
		s.mu.Lock() // status readers take mu; the reader owns the fields
		s.node, s.class = req.GetNode(), class
		s.mu.Unlock()
	}
	for i, n := range req.GetResourceNames() {
		if n == "" {
			return status.Errorf(codes.InvalidArgument, "resource_names[%d]: empty resource name", i)
		}
	}
	if max := s.srv.opts.MaxResourceNames; max > 0 && len(req.GetResourceNames()) > max {
		return status.Errorf(codes.ResourceExhausted, "resource_names: %d names exceed the limit of %d", len(req.GetResourceNames()), max)
	}

	s.mu.Lock()
	t := s.types[typeURL]
	first := t == nil
	if first {
		if max := s.srv.opts.MaxTypesPerStream; len(s.types) >= max {
			s.mu.Unlock()
			return status.Errorf(codes.ResourceExhausted, "type_url: stream already subscribes to %d types, the limit", max)
		}
		t = &typeSub{typeURL: typeURL}
		s.types[typeURL] = t
	} else if t.nonce != "" && req.GetResponseNonce() != t.nonce {
		// Stale: the client has not seen our latest response yet; it will
		// send a newer request once it has (spec: "Requests become stale").
		t.staleNonces++
		s.mu.Unlock()
		return nil
	}
	if req.GetResponseNonce() != "" && !first {
		if d := req.GetErrorDetail(); d != nil {
			t.nacks++
			t.lastNACK = d.GetMessage()
			s.srv.logNACK(s, typeURL, t.sentVersion, d.GetMessage())
		} else {
			t.acks++
			t.ackedVersion = req.GetVersionInfo()
		}
	}
	sub, explicit := nextSubscription(t.explicitSeen, req.GetResourceNames())
	t.explicitSeen = explicit
	old := t.shard
	changed := first || old == nil || !old.Sub.Equal(sub)
	s.mu.Unlock()
	if !changed || (sub.Empty() && old == nil) {
		return nil
	}

	// Subscribe before unsubscribing, so a shared name never drops out of
	// the class's upstream interest in between.
	var next *shard.Shard
	if !sub.Empty() {
		next = s.class.Subscribe(typeURL, sub, s)
	}
	s.mu.Lock()
	t.shard = next
	if next != nil {
		t.updateSend(first, old, req.GetVersionInfo())
		s.enqueueLocked(t, next, next.Current())
	}
	s.mu.Unlock()
	if old != nil {
		s.class.Unsubscribe(old, s)
	}
	s.wake.Notify()
	return nil
}

// requestType returns the request's type URL, checking it against the
// service the stream was opened on.
func (s *sotwStream) requestType(req *discoveryv3.DiscoveryRequest) (string, error) {
	typeURL := req.GetTypeUrl()
	switch {
	case s.fixedType == "" && typeURL == "":
		return "", status.Error(codes.InvalidArgument, "type_url: empty; every request on an aggregated stream must name its resource type")
	case s.fixedType == "":
		return typeURL, nil
	case typeURL == "":
		return s.fixedType, nil
	case typeURL != s.fixedType:
		return "", status.Errorf(codes.InvalidArgument, "type_url: %q on a stream of %q", typeURL, s.fixedType)
	}
	return typeURL, nil
}

// release drops every subscription (reader goroutine, at exit).
func (s *sotwStream) release() {
	s.mu.Lock()
	var held []*shard.Shard
	for _, t := range s.types {
		if t.shard != nil {
			held = append(held, t.shard)
			t.shard = nil
		}
	}
	s.mu.Unlock()
	for _, sh := range held {
		sh.Class.Unsubscribe(sh, s)
	}
	s.srv.forget(s)
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

func (s *sotwStream) logger() *zap.Logger {
	l := s.srv.log.With(zap.Uint64("stream", s.id), zap.String("peer", s.peer))
	if s.node != nil {
		l = l.With(zap.String("node", s.node.GetId()))
	}
	return l
}
