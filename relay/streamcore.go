package relay

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/drop"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// A downstream stream, SotW or delta, is a stream[S, Req]: the core below
// owns what both protocols share (identity, the node and its class, the
// per-type states, the response queue, the writer, the one shard switch,
// the shard.Watcher side and the release at the end), and the protocol
// (sotwStream, deltaStream) says what a request does and what a queued
// response becomes on the wire.
//
// Goroutines: the gRPC handler goroutine is the stream's reader for its
// whole life (run); a writer goroutine runs only while responses are queued
// (kickLocked), so an idle stream costs the relay one goroutine of its own
// (docs/benchmarks.md, "Memory per stream"). The class's goroutines call
// ShardChanged and ShardHeartbeat after releasing the class lock, one
// update at a time (shard.Watcher).

// perType is a stream's per-type state (*sotwTypeSub, *deltaTypeSub), as
// the core sees it: its common part.
type perType interface {
	comparable
	common() *typeSubBase
}

// typeSubBase is the part of a stream's per-type state both protocols have.
// Guarded by the stream's mu; shard is written only by the stream's reader
// (unlockAndSwitch, release).
type typeSubBase struct {
	typeURL string
	shard   *shard.Shard // nil when subscribed to nothing

	nonce                                        uint64 // last nonce sent for this type; 0 before the first
	acks, nacks, pushes, heartbeats, staleNonces int
	lastNACK                                     string
}

func (b *typeSubBase) common() *typeSubBase { return b }

// status is the type's status as far as the common part goes.
func (b *typeSubBase) status() DownstreamTypeStatus {
	return DownstreamTypeStatus{TypeURL: b.typeURL, Nonce: wire.NonceString(b.nonce), Pushes: b.pushes, Heartbeats: b.heartbeats,
		ACKs: b.acks, NACKs: b.nacks, LastNACK: b.lastNACK, StaleNonces: b.staleNonces}
}

// protocol is what differs between SotW and delta streams. It is the
// protocol's stream type, which the server tracks (downstream: the core's
// methods, promoted).
type protocol[S perType, Req any] interface {
	downstream
	// handle applies one request (reader goroutine, mu not held). A
	// subscription change goes through the core's unlockAndSwitch.
	handle(req Req) error
	// collectLocked stamps the message a queued entry becomes, or returns
	// why none is written (writer goroutine, mu held). The core has
	// checked that e is for its type's current shard.
	collectLocked(e queued[S]) (wire.Stamped, drop.Reason)
	// collectedLocked runs after a batch of messages was collected, before
	// it is written (writer goroutine, mu held).
	collectedLocked()
	// ending runs when the stream ends, before its shards are released
	// (reader goroutine, mu not held).
	ending()
	// releaseHoldsLocked queues what removals held back may go now, and
	// arms the hold timer for the rest (mu held; any goroutine: the hold
	// timer's too). See removalGate.
	releaseHoldsLocked()
	// typeStatusLocked describes one type of the stream (mu held).
	typeStatusLocked(t S) DownstreamTypeStatus
}

// transport is what a stream needs of its gRPC stream; every generated
// server stream of the protocol's request satisfies it.
type transport[Req any] interface {
	Context() context.Context
	Recv() (Req, error)
	SendMsg(any) error
}

// stream is one downstream stream; S is the protocol's per-type state, Req
// its request message. The core is the shard.Watcher its class tells.
type stream[S perType, Req any] struct {
	// Read-only after creation.
	id        uint64
	srv       *Server
	proto     protocol[S, Req] // the stream itself, as its protocol
	transport transport[Req]
	fixedType string // per-type services: the only type URL; "" for ADS
	variant   string
	peer      string
	started   time.Time
	ctx       context.Context // the stream's context (peer, certificates)
	// ender ends the stream with a status from any goroutine (see
	// streamEnder); nil for a stream whose owner drives it (tests).
	ender   statusWriter
	stamper wire.Stamper // its arena has a lock of its own
	// writes: a queued response starts a writer goroutine. Set by serve
	// before the stream is shared; false for a stream whose owner calls
	// writeQueued itself (tests).
	writes bool

	// Owned by the reader goroutine.
	limiter *rate.Limiter // the stream's request rate

	// Accessed atomically.
	// acksOwed counts responses written that the client has not answered
	// yet: the writer adds, the reader takes (see admit).
	acksOwed atomic.Int64
	// writers counts the running writer (zero or one): kickLocked adds,
	// the writer is done, the reader waits for it before returning, after
	// which gRPC forbids SendMsg.
	writers sync.WaitGroup

	// Owned by the writer goroutine.
	batch []outgoing // the reusable list of stamped messages (writeQueued)

	// mu guards everything below. Never hold a stream's mu while calling
	// into a class (Subscribe, TrySubscribe, Unsubscribe, Apply): the
	// class's updates call ShardChanged, which takes mu, before Apply
	// returns, and each waits for the telling of the one before it, so a
	// class call made with mu held could wait for itself
	// (docs/architecture.md, "Locks"). unlockAndSwitch is the one place a
	// request calls into the class between two holds of mu.
	mu sync.Mutex
	// Written once by the reader (first request) under mu; the reader reads
	// them without mu, status readers with it. Of the node only its id is
	// kept: an Envoy's Node (its extensions, metadata) is kilobytes.
	nodeID string
	class  *shard.Class
	// resourceInSotW: the client announced FeatureResourceInSotW (written
	// once by the reader before any subscription).
	resourceInSotW bool
	// requested: the stream has sent a request (read by the first-request
	// timer).
	requested bool
	nonce     uint64 // the last nonce stamped, any type
	bytes     int64  // bytes stamped
	// The writer's state: a writer is running; something was queued since
	// it last collected; no writer may start any more.
	writing, rekick, stopped bool
	// endErr is why the stream ended, the first reason wins: the relay
	// ended it (drain, slow client), or its writer or its reader failed.
	endErr error
	// types is the per-type state, by type URL; only the reader adds.
	types typeTable[S]
	queue responseQueue[S]
	// switching is the type whose shard the reader is switching (the zero
	// S when none): its queued entries are dropped until the new shard is
	// installed, since the type's state already describes the new
	// subscription (see unlockAndSwitch).
	switching S
	// holdTimer wakes the stream when a held removal's wait ends (see
	// removalGate); stopped when the stream ends.
	holdTimer *time.Timer
}

var _ shard.Watcher = (*stream[*sotwTypeSub, *discoveryv3.DiscoveryRequest])(nil)

// init sets the stream up to serve t for srv, as protocol p.
func (s *stream[S, Req]) init(srv *Server, t transport[Req], fixedType, variant string, p protocol[S, Req]) {
	ctx := t.Context()
	s.id = srv.nextID.Add(1)
	s.srv = srv
	s.proto = p
	s.transport = t
	s.fixedType = fixedType
	s.variant = variant
	s.peer = peerAddr(ctx)
	s.started = time.Now()
	s.ctx = ctx
	s.ender = streamEnder(ctx)
	s.stamper = wire.NewStamper(s.id)
	s.limiter = rate.NewLimiter(rate.Limit(srv.opts.RequestsPerSecond), srv.opts.RequestBurst)
	s.queue.drops = srv.drops
}

func (s *stream[S, Req]) streamID() uint64 { return s.id }

// serve serves the stream on the gRPC handler goroutine while the server
// tracks it for status, and counts and logs how it ended.
func (s *stream[S, Req]) serve() error {
	if s.ender == nil {
		return errNoEnder
	}
	var addr net.Addr
	if p, ok := peer.FromContext(s.ctx); ok {
		addr = p.Addr
	}
	if err := s.srv.register(s.proto, s.variant, addr); err != nil {
		return err
	}
	s.writes = true
	s.srv.metrics.StreamOpened(s.variant)
	err := s.run()
	reason := disconnectReason(err)
	s.srv.metrics.StreamClosed(s.variant, reason)
	s.srv.logStreamEnd(s.logger, err, reason)
	return err
}

// run reads until the stream ends, then stops the writer, waits for it and
// releases the stream's subscriptions. It returns why the stream ended.
func (s *stream[S, Req]) run() error {
	timer := time.AfterFunc(s.srv.opts.FirstRequestTimeout, s.firstRequestMissed)
	err := s.read()
	timer.Stop()
	s.mu.Lock()
	s.stopped = true
	s.endLocked(err) // a failed request: its status, which also stops a blocked writer
	err = s.endErr
	s.mu.Unlock()
	s.writers.Wait()
	s.release()
	return err
}

// read hands each request to the protocol until either fails (reader
// goroutine).
func (s *stream[S, Req]) read() error {
	for {
		req, err := s.transport.Recv()
		if err != nil {
			return err
		}
		if err := s.proto.handle(req); err != nil {
			return err
		}
		if err := s.checkServed(); err != nil {
			return err
		}
	}
}

// typeLocked returns the stream's state for typeURL, made by newSub if the
// stream has none yet (first), within the stream's limit of types (reader
// goroutine, mu held).
func (s *stream[S, Req]) typeLocked(typeURL string, newSub func(string) S) (t S, first bool, err error) {
	if t, ok := s.types.get(typeURL); ok {
		return t, false, nil
	}
	if err := s.typeLimitLocked(s.types.len()); err != nil {
		return t, false, err
	}
	t = newSub(typeURL)
	s.types.put(typeURL, t)
	s.srv.metrics.TypeSubscribed(s.variant, typeURL)
	return t, true, nil
}

// staleLocked counts a request of t answering a nonce older than t's
// latest (mu held).
func (s *stream[S, Req]) staleLocked(t S) {
	t.common().staleNonces++
	s.srv.drops.Add(drop.StaleNonce)
}

// unlockAndSwitch moves t from shard old to the shard of sub (none when sub
// is empty): the one window in which a request calls into the class. It is
// called by the reader with mu held, releases it, subscribes (before it
// unsubscribes, so a shared name never drops out of the class's upstream
// interest in between), and installs the new shard under mu again, where
// installedLocked (mu held) queues what the client is owed of it (next nil:
// none). Until then t is the switching type: what the old shard queues
// meanwhile is dropped, since t's state already describes the new
// subscription. A refused subscription is the error, and ends the stream.
func (s *stream[S, Req]) unlockAndSwitch(t S, old *shard.Shard, sub shard.Subscription, installedLocked func(next *shard.Shard)) error {
	s.switching = t
	s.mu.Unlock()
	next := old
	if sub.Empty() {
		next = nil
	} else if old == nil || !old.Sub.Equal(sub) {
		if err := s.srv.refuseGrowth(s.class, t.common().typeURL, old, sub); err != nil {
			return err
		}
		var err error
		if next, err = subscribe(s.class, t.common().typeURL, sub, s); err != nil {
			return err
		}
	}
	s.mu.Lock()
	var none S
	t.common().shard, s.switching = next, none
	installedLocked(next)
	s.mu.Unlock()
	if old != nil && old != next {
		s.class.Unsubscribe(old, s)
	}
	return nil
}

// pushLocked queues resp (nil: nothing) of t's shard sh and has it written
// (mu held); tracked as for queued.
func (s *stream[S, Req]) pushLocked(t S, sh *shard.Shard, resp *shard.Response, tracked bool) {
	if s.queue.push(t, sh, resp, tracked) {
		s.collapsedLocked()
	}
	s.kickLocked()
}

// ShardChanged implements shard.Watcher: it queues the shard's new response
// resp for the type subscribed to it. The class tells it after releasing
// its lock, so resp may be older than the shard's Current by now: then a
// later update's telling follows (or the stream queued Current when it
// installed the shard), and resp is dropped, so that the stream never
// queues a shard's responses out of order.
func (s *stream[S, Req]) ShardChanged(sh *shard.Shard, resp *shard.Response) {
	s.mu.Lock()
	t, ok := s.types.get(sh.TypeURL)
	switch {
	case !ok || t.common().shard != sh:
		// A shard the stream is leaving (or left: told of an update
		// collected before it did): nothing to write. (The shard a
		// switch is joining is not installed yet; its current response
		// is queued when it is, so nothing of it is dropped.)
		if !ok || t != s.switching {
			s.srv.drops.Add(drop.Unsubscribed)
		}
	case resp != sh.Current():
		s.srv.drops.Add(drop.Superseded)
	default:
		s.pushLocked(t, sh, resp, true)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	resp.FanoutStep()
}

// ShardHeartbeat implements shard.Watcher: it queues a TTL heartbeat for
// the type subscribed to sh, unless the shard has a newer response since
// (which carries the TTLs itself).
func (s *stream[S, Req]) ShardHeartbeat(sh *shard.Shard, hb *shard.Heartbeat) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.types.get(sh.TypeURL)
	switch {
	case ok && t.common().shard == sh && hb.Response != sh.Current():
		s.srv.drops.Add(drop.Superseded)
	case ok && t.common().shard == sh:
		if s.queue.pushHeartbeat(t, sh, hb) {
			s.collapsedLocked()
		}
		s.kickLocked()
	case ok && t == s.switching:
		s.srv.drops.Add(drop.HeartbeatNotHeld) // of a shard the client holds nothing of yet
	default:
		s.srv.drops.Add(drop.Unsubscribed)
	}
}

// collapsedLocked handles a queue overflow (mu held): counted, and a client
// that overflows MaxCollapses times is disconnected.
func (s *stream[S, Req]) collapsedLocked() {
	s.srv.metrics.QueueCollapsed(s.variant)
	if max := s.srv.opts.MaxCollapses; max > 0 && s.queue.collapses >= max {
		s.endLocked(errSlowClient)
		// What its writer already handed to gRPC waits for the client's
		// flow-control window, and the stream's status behind it: close the
		// client's connection to free both.
		go s.srv.closeConnection(s.peer)
	}
}

// release leaves every subscription of the stream at its end (reader
// goroutine, after the writer stopped) and forgets the stream. Its shards
// linger for the class's linger (shard.Class.Leave); nothing calls back
// into the stream from then on.
func (s *stream[S, Req]) release() {
	s.proto.ending()
	s.mu.Lock()
	var held []*shard.Shard
	for typeURL, t := range s.types.all() {
		c := t.common()
		if c.shard != nil {
			held = append(held, c.shard)
			c.shard = nil
		}
		s.srv.metrics.TypeUnsubscribed(s.variant, typeURL)
	}
	s.srv.drops.AddN(drop.StreamEnded, s.queue.discard())
	s.mu.Unlock()
	if s.class != nil {
		// First: a class left by its last stream lingers with its shards.
		s.srv.registry.Release(s.class)
	}
	for _, sh := range held {
		// The shard lingers with its upstream interest: a client
		// reconnecting re-subscribes to it without the upstream being
		// told to unsubscribe and subscribe again in between.
		sh.Class.Leave(sh, s)
	}
	s.srv.forget(s.proto)
}

// ErrDraining ends the streams of a draining relay; clients reconnect, to
// another relay of the tier.
var ErrDraining = status.Error(codes.Unavailable, "xds-relay is draining: reconnect to another relay")

// closeStream ends the stream with ErrDraining (any goroutine, idempotent).
func (s *stream[S, Req]) closeStream() { s.end(ErrDraining) }

// end ends the stream with err (any goroutine; the first reason wins).
func (s *stream[S, Req]) end(err error) {
	s.mu.Lock()
	s.endLocked(err)
	s.mu.Unlock()
}

// endLocked records why the stream ends, if nothing did before, and has
// gRPC end it with that status (mu held). Ending the stream cancels its
// context: the reader returns from Recv, a writer from a SendMsg waiting on
// flow control.
func (s *stream[S, Req]) endLocked(err error) {
	if s.endErr != nil {
		return
	}
	s.endErr = err
	if s.ender != nil {
		// An error here means gRPC had already ended the stream.
		_ = s.ender.WriteStatus(status.Convert(err))
	}
}

// status describes the stream, for the admin endpoints.
func (s *stream[S, Req]) status() DownstreamStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := DownstreamStatus{ID: s.id, Variant: s.variant, Peer: s.peer, Started: s.started, Bytes: s.bytes, Collapses: s.queue.collapses}
	if s.class != nil {
		out.Node, out.Class = s.nodeID, s.class.Name
	}
	for _, t := range s.types.all() {
		out.Types = append(out.Types, s.proto.typeStatusLocked(t))
	}
	sortTypes(out.Types)
	return out
}
