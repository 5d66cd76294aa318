package relay

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/relay/clientlog"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// streamBase is what SotW and delta streams share: identity, the node and
// its class, nonces, and the stream's two roles. The gRPC handler goroutine
// reads requests for the stream's whole life; a writer goroutine runs only
// while responses are queued (kickLocked). An idle stream thus costs the
// relay one goroutine of its own (docs/benchmarks.md, "Memory per stream").
type streamBase struct {
	// Set at construction, read-only.
	id        uint64
	srv       *Server
	fixedType string // per-type services: the only type URL; "" for ADS
	variant   string
	peer      string
	started   time.Time
	limiter   *rate.Limiter // owned by the reader: its request rate
	// acksOwed counts responses written that the client has not answered
	// yet: the writer adds, the reader takes (see admit).
	acksOwed atomic.Int64
	ctx      context.Context // the stream's context (peer, certificates)
	// ender ends the stream with a status from any goroutine (see
	// streamEnder); nil for a stream whose owner drives it (tests).
	ender   statusWriter
	stamper wire.Stamper
	// out writes what is queued (writer goroutine); nil for a stream whose
	// writes are driven by its owner (tests call flush themselves).
	out queueWriter
	// writers counts the running writer (zero or one): the handler waits
	// for it before returning, after which gRPC forbids SendMsg.
	writers sync.WaitGroup

	// batch is the writer's reusable list of stamped messages (writer
	// goroutine only; see flush).
	batch []outgoing

	mu sync.Mutex
	// Written once by the reader (first request) under mu; the reader reads
	// them without mu, status readers with it. Of the node only its id is
	// kept: an Envoy's Node (its extensions, metadata) is kilobytes.
	nodeID string
	class  *shard.Class
	// resourceInSotW: the client announced FeatureResourceInSotW (written
	// once by the reader, under mu, before any subscription).
	resourceInSotW bool
	nonce          uint64 // guarded by mu
	bytes          int64  // guarded by mu
	// The writer's state, guarded by mu: a writer is running; something was
	// queued since it last collected; no writer may start any more.
	writing, rekick, stopped bool
	// endErr is why the stream ended, the first reason wins (guarded by
	// mu): the relay ended it (drain, slow client), or its writer or its
	// reader failed.
	endErr error
	// requested: the stream has sent a request (written by the reader
	// under mu, read by the first-request timer under mu).
	requested bool
}

// queueWriter writes a stream's queued responses until none is left
// (writer goroutine).
type queueWriter interface{ writeQueued() error }

func newStreamBase(srv *Server, ctx context.Context, fixedType, variant string) streamBase {
	id := srv.nextID.Add(1)
	return streamBase{
		id:        id,
		srv:       srv,
		fixedType: fixedType,
		variant:   variant,
		peer:      peerAddr(ctx),
		started:   time.Now(),
		ctx:       ctx,
		ender:     streamEnder(ctx),
		stamper:   wire.NewStamper(id),
		limiter:   rate.NewLimiter(rate.Limit(srv.opts.RequestsPerSecond), srv.opts.RequestBurst),
	}
}

// errSlowClient ends a chronic laggard's stream.
var errSlowClient = status.Error(codes.ResourceExhausted, "client too slow: it fell behind the updates too often; reconnect")

// admit applies the stream's request rate limit (reader goroutine). A
// request that carries a nonce answers a response, and the first answer to
// each response written is free: the client's ACKs follow the relay's own
// pushes, so a fast-changing control plane must not get its clients
// disconnected. The client's requests are thus bounded by the limit plus one
// per response it was sent.
func (b *streamBase) admit(answer bool) error {
	if answer && b.acksOwed.Add(-1) >= 0 {
		return nil
	} else if answer {
		b.acksOwed.Add(1) // nothing was owed: undo
	}
	if !b.limiter.Allow() {
		return status.Errorf(codes.ResourceExhausted, "requests: more than %v a second (burst %d) on this stream", b.limiter.Limit(), b.limiter.Burst())
	}
	return nil
}

// collapsed handles a queue overflow (mu held): counted, and a client that
// overflows MaxCollapses times is disconnected.
func (b *streamBase) collapsed(total int) {
	b.srv.metrics.QueueCollapsed(b.variant)
	if max := b.srv.opts.MaxCollapses; max > 0 && total >= max {
		b.endLocked(errSlowClient)
		// What its writer already handed to gRPC waits for the client's
		// flow-control window, and the stream's status behind it: close the
		// client's connection to free both.
		go b.srv.closeConnection(b.peer)
	}
}

// ErrDraining ends the streams of a draining relay; clients reconnect, to
// another relay of the tier.
var ErrDraining = status.Error(codes.Unavailable, "xds-relay is draining: reconnect to another relay")

// closeStream ends the stream with ErrDraining (any goroutine, idempotent).
func (b *streamBase) closeStream() { b.end(ErrDraining) }

// end ends the stream with err (any goroutine; the first reason wins).
func (b *streamBase) end(err error) {
	b.mu.Lock()
	b.endLocked(err)
	b.mu.Unlock()
}

// endLocked records why the stream ends, if nothing did before, and has
// gRPC end it with that status (mu held). Ending the stream cancels its
// context: the handler returns from Recv, a writer from a SendMsg waiting
// on flow control.
func (b *streamBase) endLocked(err error) {
	if b.endErr != nil {
		return
	}
	b.endErr = err
	if b.ender != nil {
		// An error here means gRPC had already ended the stream.
		_ = b.ender.WriteStatus(status.Convert(err))
	}
}

// serve runs a stream on the gRPC handler goroutine: it reads until the
// stream ends, then stops the writer, waits for it and releases the
// stream's subscriptions. It returns why the stream ended.
func (b *streamBase) serve(read func() error, release func()) error {
	timer := time.AfterFunc(b.srv.opts.FirstRequestTimeout, b.firstRequestMissed)
	err := read()
	timer.Stop()
	b.mu.Lock()
	b.stopped = true
	b.endLocked(err) // a failed request: its status, which also stops a blocked writer
	err = b.endErr
	b.mu.Unlock()
	b.writers.Wait()
	release()
	return err
}

// firstRequestTimeout ends a stream that sent no request within
// limits.first_request_timeout: it asks for nothing and holds a slot of
// limits.max_streams.
type firstRequestTimeout struct{ after time.Duration }

func (e firstRequestTimeout) Error() string { return e.GRPCStatus().Message() }

func (e firstRequestTimeout) GRPCStatus() *status.Status {
	return status.Newf(codes.DeadlineExceeded, "limits.first_request_timeout: the stream sent no request within %v", e.after)
}

// firstRequestMissed ends the stream unless it has sent a request (the
// first-request timer's goroutine).
func (b *streamBase) firstRequestMissed() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.requested {
		b.endLocked(firstRequestTimeout{b.srv.opts.FirstRequestTimeout})
	}
}

// kickLocked has what was just queued written (mu held): it starts a writer
// unless one is running, which then collects once more before it stops.
func (b *streamBase) kickLocked() {
	switch {
	case b.stopped || b.out == nil:
	case b.writing:
		b.rekick = true
	default:
		b.writing = true
		b.writers.Add(1)
		go b.write()
	}
}

// write is the writer goroutine: it writes until nothing is queued. A
// failed write ends the stream.
func (b *streamBase) write() {
	defer b.writers.Done()
	for {
		err := b.out.writeQueued()
		b.mu.Lock()
		if err != nil {
			b.stopped = true
			b.endLocked(err)
		}
		if b.stopped || !b.rekick {
			b.writing = false
			b.mu.Unlock()
			return
		}
		b.rekick = false
		b.mu.Unlock()
	}
}

// classify binds the stream to its node's class on the first request.
func (b *streamBase) classify(node *corev3.Node) error {
	if b.class != nil {
		return nil
	}
	if node == nil {
		return status.Error(codes.InvalidArgument, "node: the first request of a stream must carry the node")
	}
	className, err := b.srv.checkNode(node)
	if err != nil {
		return err
	}
	if auth := b.srv.opts.Authorize; auth != nil {
		// Before the class exists or anything is subscribed: a client that
		// may not claim this node gets nothing else.
		if err := auth(b.ctx, node, className); err != nil {
			return err
		}
	}
	class, err := b.srv.registry.Acquire(node) // released by releaseAll
	if err != nil {
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	b.mu.Lock()
	b.nodeID, b.class = node.GetId(), class
	b.resourceInSotW = slices.Contains(node.GetClientFeatures(), FeatureResourceInSotW)
	b.mu.Unlock()
	if b.srv.log.Core().Enabled(zap.DebugLevel) {
		if ok, dropped := b.srv.clog.Allow(); ok {
			b.logger().Debug("client connected", dropped)
		}
	}
	return nil
}

// FeatureResourceInSotW is the client feature that lets SotW responses carry
// resources wrapped in envoy.service.discovery.v3.Resource (for their TTL).
const FeatureResourceInSotW = "xds.config.supports-resource-in-sotw"

// requestType returns a request's type URL, checking it against the service
// the stream was opened on.
func (b *streamBase) requestType(typeURL string) (string, error) {
	switch {
	case b.fixedType == "" && typeURL == "":
		return "", status.Error(codes.InvalidArgument, "type_url: empty; every request on an aggregated stream must name its resource type")
	case b.fixedType == "":
		return typeURL, b.srv.checkTypeURL(typeURL)
	case typeURL == "":
		return b.fixedType, nil
	case typeURL != b.fixedType:
		return "", status.Errorf(codes.InvalidArgument, "type_url: %q on a stream of %q", clientlog.Truncate(typeURL, echo), b.fixedType)
	}
	return typeURL, nil
}

// noLocators refuses a request that subscribes by resource locators (xDS-TP
// dynamic parameters), which the relay does not implement: ignoring them
// would read a locator-only request as a wildcard subscription.
func noLocators(field string, n int) error {
	if n == 0 {
		return nil
	}
	return status.Errorf(codes.Unimplemented, "%s: resource locators (dynamic parameters) are not supported by xds-relay; subscribe by resource names", field)
}

// nameList is one list of resource names of a request, and its field name.
type nameList struct {
	field string
	names []string
}

// versionList is the versions a request carries, named by their field.
type versionList struct {
	field    string
	versions []string
}

// admitRequest runs the checks every request passes before it touches the
// stream's state, in order: the rate limit (nonce is the response the
// request answers, if any), the type URL (and whether the peer may have it),
// the node (on the first request: classification and authorization), the
// name lists and the versions the client sends (field: what they are). It
// returns the request's type URL.
func (b *streamBase) admitRequest(nonce, typeURL string, node *corev3.Node, versions versionList, lists ...nameList) (string, error) {
	if !b.requested {
		b.mu.Lock()
		b.requested = true // the first-request timer is off
		b.mu.Unlock()
	}
	if err := b.admit(nonce != ""); err != nil {
		return "", err
	}
	typeURL, err := b.requestType(typeURL)
	if err != nil {
		return "", err
	}
	if err := b.authorizeType(typeURL); err != nil {
		return "", err
	}
	for _, l := range lists {
		if err := b.srv.checkNameBytes(l.field, l.names); err != nil {
			return "", err
		}
	}
	if err := b.srv.checkVersionBytes(versions.field, versions.versions); err != nil {
		return "", err
	}
	if err := b.classify(node); err != nil {
		return "", err
	}
	for _, l := range lists {
		if err := b.checkNames(l.field, l.names); err != nil {
			return "", err
		}
	}
	return typeURL, nil
}

// typeLimitLocked refuses one more type URL on a stream holding n.
func (b *streamBase) typeLimitLocked(n int) error {
	if max := b.srv.opts.MaxTypesPerStream; n >= max {
		return status.Errorf(codes.ResourceExhausted, "type_url: stream already subscribes to %d types, the limit", max)
	}
	return nil
}

// checkNames applies the per-request name checks to one list of names. An
// empty name is no error: it names nothing (see shard.NewSubscription).
func (b *streamBase) checkNames(field string, names []string) error {
	if max := b.srv.opts.MaxResourceNames; len(names) > max {
		return status.Errorf(codes.ResourceExhausted, "%s: %d names exceed the limit of %d", field, len(names), max)
	}
	return nil
}

// stampLocked assigns the next nonce and stamps it on body for the wire,
// counting it as a push of typeURL. Called with mu held; it allocates
// nothing.
func (b *streamBase) stampLocked(body wire.Body, typeURL string) (wire.Stamped, uint64) {
	b.nonce++
	b.acksOwed.Add(1)
	m := b.stamper.Stamp(body, b.nonce)
	b.bytes += int64(m.Len())
	b.srv.metrics.Pushed(b.variant, typeURL, m.Len())
	return m, b.nonce
}

// settle returns e's response as the one an outgoing message settles, if
// the stream owes it a fan-out step.
func settle[S comparable](e queued[S]) *shard.Response {
	if e.tracked {
		return e.resp
	}
	return nil
}

// outgoing is a stamped message and the tracked response it delivers (nil
// if none), which is settled once written.
type outgoing struct {
	m       wire.Stamped
	settles *shard.Response
}

// flush writes what collect stamps, in order, until nothing is left
// (writer goroutine; collect takes the lock, sending happens without it).
// collect appends to the batch it is given, which flush reuses: gRPC's
// SendMsg has encoded a message (the buffers, not copies) when it returns.
func flush(b *streamBase, collect func([]outgoing) []outgoing, send func(any) error) error {
	for {
		b.batch = collect(b.batch[:0])
		if len(b.batch) == 0 {
			return nil
		}
		for i := range b.batch {
			o := &b.batch[i]
			if err := send(&o.m); err != nil {
				return err
			}
			if o.settles != nil {
				o.settles.FanoutStep()
			}
			*o = outgoing{} // nothing of a written message stays reachable
		}
	}
}

// readLoop hands each request to handle until either fails (reader
// goroutine).
func readLoop[Req any](recv func() (Req, error), handle func(Req) error) error {
	for {
		req, err := recv()
		if err != nil {
			return err
		}
		if err := handle(req); err != nil {
			return err
		}
	}
}

// shardHolder is a stream's per-type state as far as shards go.
type shardHolder interface {
	comparable
	// subscribed returns the shard the type is subscribed to (nil if none).
	subscribed() *shard.Shard
	// detach clears and returns the shard held (nil if none).
	detach() *shard.Shard
}

// shardHeartbeat queues a TTL heartbeat for the type subscribed to sh.
func shardHeartbeat[S shardHolder](b *streamBase, types map[string]S, q *responseQueue[S], sh *shard.Shard, hb *shard.Heartbeat) {
	b.mu.Lock()
	t, ok := types[sh.TypeURL]
	if !ok || t.subscribed() != sh {
		b.mu.Unlock()
		return
	}
	if q.pushHeartbeat(t, sh, hb) {
		b.collapsed(q.collapses)
	}
	b.kickLocked()
	b.mu.Unlock()
}

// shardChanged queues a shard's new response for the type subscribed to it
// (shard.Watcher.ShardChanged of both stream kinds). It is called right after
// the response is stored, under the class lock, so Current is exactly this
// update's response.
func shardChanged[S shardHolder](b *streamBase, types map[string]S, q *responseQueue[S], sh *shard.Shard) {
	b.mu.Lock()
	t, ok := types[sh.TypeURL]
	if !ok || t.subscribed() != sh {
		b.mu.Unlock()
		sh.Current().FanoutStep() // a shard this stream is leaving: nothing to write
		return
	}
	if q.push(t, sh, sh.Current(), true) {
		b.collapsed(q.collapses)
	}
	b.kickLocked()
	b.mu.Unlock()
}

// releaseAll drops every subscription of a stream at its end (reader
// goroutine) and forgets the stream.
func releaseAll[S shardHolder](b *streamBase, types map[string]S, w shard.Watcher, st downstream) {
	b.mu.Lock()
	var held []*shard.Shard
	for typeURL, t := range types {
		if sh := t.detach(); sh != nil {
			held = append(held, sh)
		}
		b.srv.metrics.TypeUnsubscribed(b.variant, typeURL)
	}
	b.mu.Unlock()
	if b.class != nil {
		// First: a class left by its last stream lingers with its shards.
		b.srv.registry.Release(b.class)
	}
	for _, sh := range held {
		sh.Class.Unsubscribe(sh, w)
	}
	b.srv.forget(st)
}

func (b *streamBase) statusLocked() StreamStatus {
	out := StreamStatus{ID: b.id, Variant: b.variant, Peer: b.peer, Started: b.started, Bytes: b.bytes}
	if b.class != nil {
		out.Node, out.Class = b.nodeID, b.class.Name
	}
	return out
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

func (b *streamBase) logger() *zap.Logger {
	l := b.srv.log.With(zap.Uint64("stream", b.id), zap.String("peer", b.peer), zap.String("kind", b.variant))
	if b.class != nil {
		l = l.With(b.srv.clog.String("node", b.nodeID), b.srv.clog.String("class", b.class.Name))
	}
	return l
}
