package upstream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/clientlog"
	"github.com/xds-relay/xds-relay/shard/drop"
	"github.com/xds-relay/xds-relay/shard/wire"
)

const (
	adsMethod      = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
	deltaADSMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
)

// protocolSession is one upstream stream's protocol: SotW or delta. It is
// owned by the class stream's run goroutine (runSession), which calls it
// from that goroutine only.
type protocolSession interface {
	// syncInterest subscribes to what the class needs, per type URL.
	syncInterest() error
	// handle validates and installs one response and answers it; ok is
	// false for a rejected response, err a broken stream.
	handle(b []byte) (ok bool, err error)
	// replyDue is signalled when deferred replies (NACKs, or ACKs to an
	// upstream that repeats itself) are due (nil: never).
	replyDue() <-chan struct{}
	sendDueReplies() error
	// close releases timers.
	close()
	// settled reports whether every type the stream asked for has been
	// answered with a response the relay accepted: the stream delivered a
	// good state.
	settled() bool
}

// Stream states reported by Status.
const (
	StateConnecting = "connecting"
	StateConnected  = "connected"
	StateBackoff    = "backoff"
	// StateWaiting: every upstream connection carries as many streams as
	// its peer allows and no more may be opened (upstream.max_connections).
	StateWaiting = "waiting_for_stream"
	StateStopped = "stopped"
)

// ClassStreamStatus describes one class's upstream stream, for the admin endpoints.
type ClassStreamStatus struct {
	Class      string `json:"class"`
	NodeID     string `json:"node_id"` // the id the relay presents for the class
	State      string `json:"state"`
	LastError  string `json:"last_error,omitempty"`
	Reconnects int    `json:"reconnects"`
	// Failures is the consecutive failed streams: the backoff's step.
	Failures  int               `json:"failures"`
	Responses int               `json:"responses"`
	ACKs      int               `json:"acks"`
	NACKs     int               `json:"nacks"`
	LastNACK  string            `json:"last_nack,omitempty"`
	Versions  map[string]string `json:"versions"`
	// Restarts the relay chose (not failures, not in Reconnects), by
	// reason.
	Restarts RestartCounts `json:"restarts"`
	// ConnectionFailures counts the failures (in Reconnects too) of
	// streams that could not be opened: no connection could be made, or
	// it was not ready.
	ConnectionFailures int `json:"connection_failures"`
	// Member is the upstream member the class's stream is on, or was on
	// last (upstream.affinity: class; empty without it).
	Member string `json:"member,omitempty"`
	// Moves counts the streams opened on another member than the one
	// before: a chosen move (RestartMove) or after the member failed.
	Moves int `json:"moves,omitempty"`
	// UnavailableSince, while set, is since when the upstream is
	// unreachable past Config.UnavailableAfter: the clients the class has
	// nothing for are told UNAVAILABLE (availability.go).
	UnavailableSince *time.Time `json:"unavailable_since,omitempty"`
}

// RestartReason is why the relay restarted a class's upstream stream
// itself: the new stream can ask what the old one could not.
type RestartReason int

const (
	// RestartWildcard: a wildcard wanted after explicit names of the type
	// (SotW: the legacy form exists only before names; delta: the new
	// stream's first request declares what the relay holds).
	RestartWildcard RestartReason = iota
	// RestartClaim (delta): a name subscribed again that the class held
	// across its unsubscription, claimed in initial_resource_versions.
	RestartClaim
	// RestartNamesIgnored (SotW): the upstream left a named request
	// unanswered; the type is asked for as the wildcard (fallback.go).
	RestartNamesIgnored
	// RestartResubscribe (delta): a name the stream unsubscribed is wanted
	// again; an answer sent before the upstream read the unsubscription
	// could still be on its way and be taken for the new subscription's.
	RestartResubscribe
	// RestartResync: the stream lived its resync interval (resync.go).
	RestartResync
	// RestartMove: the member set sends the class to another member
	// (upstream.affinity: class, move.go).
	RestartMove
)

func (r RestartReason) String() string {
	switch r {
	case RestartWildcard:
		return "wildcard"
	case RestartClaim:
		return "claim"
	case RestartNamesIgnored:
		return "names_ignored"
	case RestartResubscribe:
		return "resubscribe"
	case RestartResync:
		return "resync"
	case RestartMove:
		return "move"
	}
	return "unknown"
}

// RestartCounts counts a class stream's chosen restarts by reason.
type RestartCounts struct {
	Wildcard     int `json:"wildcard"`
	Claim        int `json:"claim"`
	NamesIgnored int `json:"names_ignored"`
	Resubscribe  int `json:"resubscribe"`
	Resync       int `json:"resync"`
	Move         int `json:"move"`
}

// add counts one restart for r.
func (c *RestartCounts) add(r RestartReason) {
	switch r {
	case RestartWildcard:
		c.Wildcard++
	case RestartClaim:
		c.Claim++
	case RestartNamesIgnored:
		c.NamesIgnored++
	case RestartResubscribe:
		c.Resubscribe++
	case RestartResync:
		c.Resync++
	case RestartMove:
		c.Move++
	}
}

// Total is every chosen restart.
func (c RestartCounts) Total() int {
	return c.Wildcard + c.Claim + c.NamesIgnored + c.Resubscribe + c.Resync + c.Move
}

// classStream is the upstream ADS stream of one class, run by one goroutine
// (run) that the Client starts and stops.
//
// It holds no lock while calling into its class (Interest, Requested,
// ApplyUpdate): statusMu is held only to copy or update status.
type classStream struct {
	// Read-only after creation.
	class   *shard.Class
	members *memberSet // the upstreams the class may go to (members.go)
	node    *corev3.Node
	log     *zap.Logger
	wake    dedup.Signal // the class's interest changed
	bo      Backoff
	maxMsg  int     // Config.MaxMessageBytes
	waiting bool    // owned by run: waiting for a connection with room, logged
	on      *member // owned by run: the member of the session, or of the last
	delta   bool    // speak incremental ADS upstream
	askWild bool    // ask every type as the wildcard (Config.AskWildcard)
	// siteWild: the wildcard leaves names out, so names beside it are
	// asked too (Config.SiteWildcard).
	siteWild bool
	resync   time.Duration // Config.Resync: a stream's mean life (0: unbounded)
	metrics  Metrics
	drops    *drop.Counters  // nil-safe
	gate     *clientlog.Gate // upstream-caused warnings and values (upstreamlog.go)
	tracer   trace.Tracer
	avail    *availability // whether the upstream counts as unreachable

	// Owned by the run goroutine (and the session it runs).
	valid *validator
	// Survive reconnects: the last ACKed version per type URL (SotW), and
	// the version of each resource held per type URL (delta, sent back as
	// initial_resource_versions).
	versions      map[string]string
	deltaVersions map[string]*heldVersions
	// Types the upstream did not answer by name (SotW, fallback.go): asked
	// for as the wildcard from then on, for the life of the class stream,
	// until the class wants nothing of the type.
	namesIgnored map[string]bool

	// Guarded by statusMu: written by the run goroutine, read by Status.
	statusMu sync.Mutex
	status   ClassStreamStatus
}

func (s *classStream) snapshot() ClassStreamStatus {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	st := s.status
	st.Versions = maps.Clone(st.Versions)
	return st
}

// snapshotState is the status without its versions.
func (s *classStream) snapshotState() ClassStreamStatus {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	st := s.status
	st.Versions = nil
	return st
}

func (s *classStream) setStatus(f func(*ClassStreamStatus)) {
	s.statusMu.Lock()
	f(&s.status)
	s.statusMu.Unlock()
}

// wildcardRestart ends a session that must ask for a wildcard of typeURL
// after it asked for explicit names of the type: SotW can no longer ask in
// the legacy form (sotw.go, send), and a delta stream's upstream may believe
// it already sent what it has not (delta.go, syncInterest). The class
// stream opens a new stream at once, asking for the wildcard first.
//
// namesIgnored: the wildcard is asked because the upstream did not answer
// the type by name (fallback.go); the fallback logged and counted it.
type wildcardRestart struct {
	typeURL      string
	namesIgnored bool
}

func (e *wildcardRestart) Error() string {
	if e.namesIgnored {
		return "names of " + e.typeURL + " went unanswered: restarting the stream to ask for the wildcard"
	}
	return "a wildcard of " + e.typeURL + " is wanted after explicit names: restarting the stream"
}

// run keeps a session open until ctx ends, backing off between failures. A
// failure is logged at warn when the stream was healthy, then at most every
// tenth consecutive attempt, so a long outage does not flood the log.
func (s *classStream) run(ctx context.Context) {
	s.versions = map[string]string{}
	s.deltaVersions = map[string]*heldVersions{}
	s.namesIgnored = map[string]bool{}
	defer s.setStatus(func(st *ClassStreamStatus) { st.State = StateStopped })
	defer s.avail.stop()
	s.avail.down() // no answer yet
	failures := 0
	var lastRestart time.Time
	for {
		healthy, err := s.runSession(ctx)
		if ctx.Err() != nil {
			return
		}
		s.avail.down()
		if healthy {
			failures = 0
			s.setStatus(func(st *ClassStreamStatus) { st.Failures = 0 })
		}
		var claim *claimRestart
		var resub *resubscribeRestart
		var restart *wildcardRestart
		var resync resyncRestart
		var move *moveRestart
		var reason RestartReason
		chosen := true
		switch {
		case errors.As(err, &claim):
			// Not a failure: the new stream claims what the class holds.
			s.log.Info("restarting the upstream stream to claim a resource held across an unsubscription",
				zap.String("type_url", claim.typeURL), zap.String("name", claim.name))
			reason = RestartClaim
		case errors.As(err, &resub):
			// Not a failure: no answer of the old stream can cross the
			// new stream's subscription.
			s.log.Info("restarting the upstream stream to subscribe again to a name it unsubscribed",
				zap.String("type_url", resub.typeURL), zap.String("name", resub.name), zap.Bool("forgetting", resub.overflow))
			reason = RestartResubscribe
		case errors.As(err, &restart) && restart.namesIgnored:
			// Logged (per type) by the fallback.
			reason = RestartNamesIgnored
		case errors.As(err, &restart):
			// Not a failure: the new stream asks for the wildcard in the
			// legacy form. Clients keep what they hold meanwhile.
			s.log.Info("restarting the upstream stream to subscribe to a wildcard after explicit names",
				zap.String("type_url", restart.typeURL))
			reason = RestartWildcard
		case errors.As(err, &move):
			s.log.Info("moving the upstream stream to the member the class now goes to",
				zap.String("from", move.from), zap.String("to", move.to))
			reason = RestartMove
		case errors.As(err, &resync):
			// Periodic: counted, logged at debug only.
			s.log.Debug("restarting the upstream stream to resync", zap.Duration("interval", s.resync))
			reason = RestartResync
		default:
			chosen = false
		}
		if chosen {
			s.metrics.Restarted(s.class.Name, reason)
			s.setStatus(func(st *ClassStreamStatus) { st.Restarts.add(reason) })
			if !sleepCtx(ctx, restartWait(lastRestart, time.Now())) {
				return
			}
			lastRestart = time.Now()
			continue
		}
		delay := s.bo.Delay(failures)
		var conn *connectFailure
		msg := "upstream stream failed; retrying"
		if errors.As(err, &conn) {
			// Counted as the class's failure like any other, and apart.
			msg = "cannot reach the upstream; retrying"
			s.metrics.ConnectionFailed(s.class.Name)
		}
		if failures%10 == 0 {
			s.warn(msg, s.errField(err), zap.Int("attempt", failures+1), zap.Duration("backoff", delay))
		} else {
			s.log.Debug(msg, s.errField(err), zap.Int("attempt", failures+1), zap.Duration("backoff", delay))
		}
		failures++
		s.metrics.Reconnecting(s.class.Name)
		s.setStatus(func(st *ClassStreamStatus) {
			st.State, st.LastError = StateBackoff, s.cut(err.Error())
			st.Reconnects++
			st.Failures = failures
			if conn != nil {
				st.ConnectionFailures++
			}
		})
		s.avail.check()
		var ready <-chan struct{}
		if conn != nil {
			ready = conn.ready
		}
		if !sleepUntil(ctx, delay, ready) {
			return
		}
	}
}

// connectFailure is a class stream that could not be opened: no
// connection (the pool's dial failed), or the connection could not be made
// or was not ready and failed the new stream. ready, if not nil, is closed
// once the connection is READY (it was not when the stream failed): the
// backoff ends then, as the wait of a WaitForReady stream would have.
type connectFailure struct {
	err   error
	ready <-chan struct{}
}

func (e *connectFailure) Error() string { return "no upstream connection: " + e.err.Error() }
func (e *connectFailure) Unwrap() error { return e.err }

// sleepUntil waits d, or until ready is closed (nil: never) or ctx ends; it
// reports whether ctx is still live.
func sleepUntil(ctx context.Context, d time.Duration, ready <-chan struct{}) bool {
	if ready == nil {
		return sleepCtx(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-ready:
	}
	return true
}

// RestartPace is the least time between two restarts the relay chooses
// (a wildcard after names, a claim, the names-ignored fallback): they
// follow subscription changes clients make, so without it a client
// churning its subscription could make its class reconnect to the control
// plane as fast as it sends requests. The first restart is at once.
const RestartPace = time.Second

// restartWait is how long a restart at now waits after one at last (zero:
// none yet).
func restartWait(last, now time.Time) time.Duration {
	if last.IsZero() {
		return 0
	}
	return max(0, RestartPace-now.Sub(last))
}

// sleepCtx waits d, or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// received is one message from the upstream. Its bytes are pooled: the
// run loop frees them once the message is handled (handle copies what it
// keeps).
type received struct {
	raw wire.Pooled
	err error
}

// runSession runs one upstream stream until it fails. healthy reports whether
// it delivered a good state (every type it asked for answered with a
// response the relay accepted) or stayed open at least the maximum backoff
// (time spent getting a connection does not count: a stream that could not
// be opened is a failure, connectFailure), either of which resets the
// backoff. A stream that fails on its first
// response of some type, after others were accepted, is no success: the
// backoff grows across such streams. (An upstream that is another relay, in
// sync with us, rightly sends nothing after we resubscribe at its current
// versions: such a stream is healthy once it lived the maximum backoff.)
func (s *classStream) runSession(ctx context.Context) (healthy bool, err error) {
	var opened time.Time // when the stream was open; zero: never
	defer func() {
		if !healthy && !opened.IsZero() && time.Since(opened) >= s.bo.Max {
			healthy = true
		}
	}()
	m := s.members.pick(s.class.Name)
	if m == nil {
		// Its backoff ends early when the member set changes.
		return false, &connectFailure{err: errNoMember, ready: s.members.watch()}
	}
	s.onMember(m)
	pc, err := m.pool.acquire(ctx, s.waitingForStream)
	if err != nil {
		return false, &connectFailure{err: fmt.Errorf("get a connection: %w", err)}
	}
	defer m.pool.release(pc) // after the stream ended (below)
	if s.waiting {
		s.waiting = false
		s.avail.slotFound()
		s.log.Info("upstream stream got a connection with room")
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	s.setStatus(func(st *ClassStreamStatus) { st.State = StateConnecting })
	s.avail.check()
	desc, method := &discoverygrpc.AggregatedDiscoveryService_ServiceDesc.Streams[0], adsMethod
	if s.delta {
		desc, method = &discoverygrpc.AggregatedDiscoveryService_ServiceDesc.Streams[1], deltaADSMethod
	}
	// Not WaitForReady: a connection that cannot be made (refused, no
	// answer within Config.ConnectTimeout, a failed handshake) fails the
	// stream, and the class backs off, shows the error and counts it,
	// instead of waiting in "connecting" for as long as the outage lasts.
	// Its backoff ends early once the connection is READY (connectFailure).
	readyCh, wasReady := pc.ready.get()
	st, err := pc.cc.NewStream(ctx, desc, method, grpc.ForceCodecV2(wire.NewCodec()))
	if err != nil {
		f := &connectFailure{err: err}
		if !wasReady {
			f.ready = readyCh
		}
		return false, f
	}
	opened = time.Now()

	// The receiver hands each message over unbuffered: while the run loop
	// applies one, the receiver reads at most the next (backpressure
	// upstream; the stream's flow-control window bounds the rest).
	recv := make(chan received)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			var r received
			r.err = st.RecvMsg(&r.raw)
			select {
			case recv <- r:
			case <-ctx.Done():
				return
			}
			if r.err != nil {
				return
			}
		}
	}()

	var sess protocolSession
	if s.delta {
		sess = newDeltaSession(s, st)
	} else {
		sess = newSotwSession(s, st)
	}
	var resync <-chan time.Time
	if after := resyncAfter(s.resync); after > 0 {
		t := time.NewTimer(after)
		defer t.Stop()
		resync = t.C
	}
	defer sess.close()
	if err := sess.syncInterest(); err != nil {
		return false, err
	}
	// The stream is open on a ready connection and subscribed.
	s.setStatus(func(st *ClassStreamStatus) { st.State, st.LastError = StateConnected, "" })
	s.avail.connected()
	mv := newMover(s, m, s.bo.Max)
	defer mv.stop()
	answered := false
	for {
		select {
		case <-ctx.Done():
			return healthy, ctx.Err()
		case <-mv.watch:
			mv.changed()
		case <-mv.due:
			if move := mv.fire(); move != nil {
				return healthy, move
			}
		case <-mv.ready:
			if move := mv.readied(); move != nil {
				return healthy, move
			}
		case <-s.wake.C():
			if err := sess.syncInterest(); err != nil {
				return healthy, err
			}
		case <-sess.replyDue():
			if err := sess.sendDueReplies(); err != nil {
				return healthy, err
			}
		case <-resync:
			return healthy, resyncRestart{}
		case r := <-recv:
			if r.err != nil {
				return healthy, receiveError(r.err, s.maxMsg)
			}
			if !answered {
				answered = true
				s.avail.answered()
			}
			ok, err := sess.handle(r.raw.Bytes)
			r.raw.Free()
			if err != nil {
				return healthy, err
			}
			healthy = healthy || (ok && sess.settled())
		}
	}
}

// traceResponse starts the span of one upstream response; end finishes it,
// marking a rejected response as an error.
func (s *classStream) traceResponse(typeURL, version string, resources int) (ctx context.Context, end func(rejected error)) {
	ctx, span := s.tracer.Start(context.Background(), "xds-relay.upstream.response", trace.WithAttributes(
		attribute.String("xds.class", s.class.Name),
		attribute.String("xds.type_url", typeURL),
		attribute.String("xds.version", s.cut(version)),
		attribute.Int("xds.resources", resources),
	))
	return ctx, func(rejected error) {
		if rejected != nil {
			span.SetStatus(otelcodes.Error, rejected.Error())
		}
		span.End()
	}
}

// dropUnsubscribed drops, unanswered, a response for a type the stream is
// not subscribed to: any request for the type, even a NACK, would
// subscribe to it.
func (s *classStream) dropUnsubscribed(typeURL string) {
	s.warn("dropped upstream response for a type not subscribed to", s.field("type_url", typeURL))
	s.drops.Add(drop.UpstreamUnsubscribed)
}

// waitingForStream shows that the class waits for a connection with room:
// in its status each time, and in a metric and the log once a wait.
func (s *classStream) waitingForStream() {
	s.setStatus(func(st *ClassStreamStatus) { st.State = StateWaiting })
	s.avail.check() // not unreachable: the connections are full
	if !s.waiting {
		s.waiting = true
		s.metrics.WaitingForStream(s.class.Name)
		s.log.Warn("upstream stream waits: every upstream connection carries the streams its peer allows, and no more connections may be opened",
			zap.Int("connections", s.on.pool.connections()), zap.String("key", "upstream.max_connections"))
	}
}

// onMember records that the session about to open goes to m: shown in the
// status, and counted as a move when the last session went elsewhere.
func (s *classStream) onMember(m *member) {
	moved := s.on != nil && s.on.addr != m.addr && s.members.affinity
	s.on = m
	if moved {
		s.metrics.Moved(s.class.Name)
	}
	if !s.members.affinity {
		return
	}
	s.setStatus(func(st *ClassStreamStatus) {
		st.Member = m.addr
		if moved {
			st.Moves++
		}
	})
}
