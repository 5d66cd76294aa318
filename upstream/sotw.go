package upstream

import (
	"errors"
	"fmt"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/drop"
	"github.com/xds-relay/xds-relay/shard/wire"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// sotwTypeState is what one SotW stream asked for, and was answered, for a
// type URL. Owned by the run goroutine.
type sotwTypeState struct {
	sub   shard.Subscription
	names shard.SotWNames // the legacy wildcard's rule, as this stream's requests went
	nonce string          // the latest nonce received

	good     bool   // a response of the type was accepted on this stream
	rejected string // version of the last NACKed response
	repeats  int    // consecutive re-sends of the rejected version

	// The storm guard (see storm.go): the last accepted response, and how
	// many in a row repeated it in answer to an ACK.
	lastVersion string
	lastDigest  uint64
	accepted    bool // lastVersion and lastDigest are set
	pureACK     bool // the last request sent was an ACK that changed nothing
	same        int
	afterBeat   bool // the last accepted response was heartbeats only
	warnedAt    time.Time

	// The wait for an answer to the stream's first named request of the
	// type (see fallback.go): nil when none runs.
	silence  *time.Timer
	silentAt time.Time

	// A reply (a NACK, or a storm's ACK) waiting to be sent; nil if none.
	deferred *time.Timer
	replyAt  time.Time      // when the deferred reply is due
	nack     *status.Status // the deferred reply's error_detail; nil for an ACK
}

// sotwSession is the state-of-the-world protocol of one upstream stream: per
// type URL it re-sends the union of the class's interest, ACKs or NACKs every
// response, and defers the replies a misbehaving upstream would loop on.
type sotwSession struct {
	// Read-only after creation.
	*classStream
	stream grpc.ClientStream
	// due is signalled by a deferred reply's timer (see deferReply), the
	// only other goroutine that touches the session.
	due dedup.Signal

	// Owned by the run goroutine.
	types map[string]*sotwTypeState
	first bool // the next request is the stream's first and carries the node
}

var _ protocolSession = (*sotwSession)(nil)

func newSotwSession(s *classStream, st grpc.ClientStream) *sotwSession {
	return &sotwSession{classStream: s, stream: st, types: map[string]*sotwTypeState{}, first: true, due: dedup.NewSignal()}
}

func (ss *sotwSession) replyDue() <-chan struct{} { return ss.due.C() }

// syncInterest sends a request for every type whose union interest differs
// from what this stream last asked for.
func (ss *sotwSession) syncInterest() error {
	for _, typeURL := range ss.class.TypeURLs() {
		want := ss.class.Interest(typeURL)
		if want.Empty() {
			// Nothing wanted: a later interest by name is asked by name
			// again (and falls back again only if ignored again).
			delete(ss.namesIgnored, typeURL)
		}
		ts := ss.types[typeURL]
		if ts == nil {
			if want.Empty() {
				// This stream asks nothing of the type: the class may drop
				// what an earlier stream was asked for (and free the type).
				ss.class.UpstreamHoldsNothing(typeURL)
				ss.class.Requested(typeURL, want, false)
				continue
			}
			ts = &sotwTypeState{}
			ss.types[typeURL] = ts
		} else if ts.sub.Equal(ss.asked(typeURL, ts, want)) {
			continue
		}
		if err := ss.send(typeURL, ts, want, "", nil); err != nil {
			return err
		}
	}
	return nil
}

// asked is the subscription a request for want asks for. A wildcard is only
// ever asked alone, as the legacy empty list: go-control-plane's snapshot
// cache (and others) filter a response by the request's literal names, so
// ["*", names...] would be answered with the names alone, and ["*"] with
// nothing; the wildcard covers the names anyway. Once the legacy wildcard
// was asked for on this stream it cannot be withdrawn (any non-empty list
// would end it, and an empty one still means "everything"), so it is kept,
// with the class's data for it, until the stream restarts.
//
// byWildcard: names too are asked for as the wildcard (see byWildcard).
//
// A site-specific wildcard (Config.SiteWildcard) covers only the control
// plane's choice of names: the names beside it are asked too, as
// ["*", names...] (the explicit wildcard, from the type's first request on),
// and byWildcard does not apply (the configuration refuses
// upstream.ask: wildcard with it, and a wildcard request is always answered,
// so the silence fallback never engages).
func (ss *sotwSession) asked(typeURL string, ts *sotwTypeState, want shard.Subscription) shard.Subscription {
	if ss.siteWild {
		return want
	}
	if want.Wildcard || (ts.sub.Wildcard && !ts.names.Listed()) || (ss.byWildcard(typeURL) && !want.Empty()) {
		return shard.Subscription{Wildcard: true}
	}
	return want
}

// byWildcard reports whether names of typeURL are asked for as the
// wildcard: the operator said so (Config.AskWildcard), or the upstream did
// not answer the type by name (fallback.go).
func (ss *sotwSession) byWildcard(typeURL string) bool {
	return ss.askWild || ss.namesIgnored[typeURL]
}

// send writes one request for typeURL subscribing to want (see asked),
// carrying the last ACKed version and, for an ACK or NACK, the response's
// nonce.
//
// A wildcard wanted on a stream that already sent explicit names for the
// type can no longer be asked in the legacy form. send then sends nothing
// and returns a *wildcardRestart: the class stream opens a new stream at
// once, whose first request for the type is the legacy empty list, at no
// version (what the relay holds is the narrower request's state). The class
// is not told of a wildcard request meanwhile, so its wildcard shards wait
// for the new stream's answer.
func (ss *sotwSession) send(typeURL string, ts *sotwTypeState, want shard.Subscription, nonce string, nack *status.Status) error {
	want = ss.asked(typeURL, ts, want)
	names, ok := ts.names.Write(want, ss.siteWild)
	if !ok {
		delete(ss.versions, typeURL)
		return &wildcardRestart{typeURL: typeURL}
	}
	req := &discoverygrpc.DiscoveryRequest{
		TypeUrl:       typeURL,
		VersionInfo:   ss.versions[typeURL],
		ResponseNonce: ts.nonce,
		ErrorDetail:   nack,
	}
	if nonce != "" {
		req.ResponseNonce = nonce
	}
	if req.ResponseNonce == "" {
		// Nothing answered on this stream yet: claim no version, so the
		// upstream sends the type's whole state. A control plane that keeps
		// what a stream holds by its version (go-control-plane's linear
		// cache) otherwise stays silent about a change it made while the
		// relay was away, such as a deletion that left the type empty. The
		// class suppresses what did not change, so clients see nothing.
		req.VersionInfo = ""
	}
	req.ResourceNames = names
	if len(names) > 0 && !want.Wildcard {
		ss.armSilence(ts)
	}
	if ss.first {
		req.Node = ss.node
		ss.first = false
	}
	asksAnew := !ts.sub.Equal(want)
	ts.pureACK = nonce != "" && nack == nil && !asksAnew
	if ts.deferred != nil && ts.nack == nil && req.ResponseNonce == ts.nonce {
		ss.cancelDeferred(ts) // this request ACKs what the deferred ACK would have
	}
	ts.sub = want
	if req.ResponseNonce == "" {
		// Nothing of the type answered on this stream: the upstream
		// believes the class holds nothing of it (shard's shadow.go).
		ss.class.UpstreamHoldsNothing(typeURL)
	}
	ss.class.Requested(typeURL, want, false)
	if asksAnew && !want.Wildcard && req.VersionInfo != "" && ss.class.AwaitsNames(typeURL) {
		// A Listener or Cluster newly asked for that the class lacks: claim
		// no version, which go-control-plane answers with the state of
		// every name asked. At the version the stream holds, its caches
		// answer only for a name they believe the stream lacks, and an
		// answer the class read after it stopped asking for a name (it
		// crossed the request) made them believe it held, though the class
		// dropped it: the name waited out shard.PendingGrace and was served
		// as absent (conformance snapshot-sotw-crossed-cluster.json). Any
		// answer resolves the names, so its ACK claims the version again.
		req.VersionInfo = ""
	}
	if err := ss.stream.SendMsg(req); err != nil {
		return fmt.Errorf("send %s request: %w", typeURL, err)
	}
	return nil
}

// handle validates and installs one response, then ACKs or NACKs it. ok is
// false for a NACKed response; err is a broken stream.
func (ss *sotwSession) handle(b []byte) (ok bool, err error) {
	sc := getSotwScratch()
	defer sc.release()
	resp := &sc.resp
	if err := wire.ParseResponseInto(b, resp); err != nil {
		return false, fmt.Errorf("undecodable response: %w", err)
	}
	ss.setStatus(func(st *ClassStreamStatus) { st.Responses++ })
	ts := ss.types[resp.TypeURL]
	if ts == nil {
		ss.dropUnsubscribed(resp.TypeURL)
		return false, nil
	}
	ts.nonce = resp.Nonce
	ts.answered()
	if ts.deferred != nil {
		// A newer response supersedes the reply still waiting: this one's
		// reply answers both.
		ss.drops.Add(drop.UpstreamReplySuperseded)
		ss.cancelDeferred(ts)
	}
	ctx, end := ss.traceResponse(resp.TypeURL, resp.VersionInfo, len(resp.Resources))
	replace := xdstype.FullState(resp.TypeURL)
	// A response over the key is rejected unvalidated (msgsize.go).
	var beats []shard.HeartbeatEntry
	verr := oversized(len(b), ss.maxMsg)
	if verr == nil {
		beats, verr = sc.validate(ss.valid)
	}
	resources := sc.out
	if verr != nil {
		end(verr)
		return false, ss.nack(resp, ts, verr)
	}
	defer end(nil)
	// A response of heartbeats only (go-control-plane lists just the
	// resources with a TTL) refreshes them; it is not the state of the world.
	heartbeatOnly := len(resources) == 0 && len(beats) > 0
	kind := shard.UpdateMerge
	switch {
	case heartbeatOnly:
		kind = shard.UpdateHeartbeats
	case replace:
		kind = shard.UpdateFull
	}
	for _, r := range resources {
		if !ts.sub.Covers(r.Name, r.Aliases()) {
			// An answer to a request the stream has since changed: the class
			// keeps only what was last asked for (shard's keepAsked).
			ss.drops.Add(drop.UpstreamUnsubscribed)
		}
	}
	u := shard.Update{Kind: kind, Resources: resources, Heartbeats: beats, Ctx: ctx, Asked: true, Distinct: true}
	if ss.valid.passVersions {
		u.Version = resp.VersionInfo
	}
	ss.class.ApplyUpdate(resp.TypeURL, u)
	ss.versions[resp.TypeURL] = resp.VersionInfo
	ts.rejected, ts.repeats, ts.good = "", 0, true
	ss.metrics.Response(ss.class.Name, resp.TypeURL, true)
	ss.setStatus(func(st *ClassStreamStatus) {
		st.ACKs++
		st.Versions[resp.TypeURL] = ss.cut(resp.VersionInfo)
	})
	if delay, storm := ss.repeated(ts, resp, heartbeatOnly); storm {
		ss.deferReply(ts, nil, delay)
		return true, nil
	}
	return true, ss.send(resp.TypeURL, ts, ss.class.Interest(resp.TypeURL), resp.Nonce, nil)
}

// nack rejects a response. Some control planes (go-control-plane among
// them) answer a NACK by re-sending the same version at once; answering each
// re-send at once would loop at network speed. So a re-send of the version
// just rejected is NACKed after a backoff delay, and logged at debug only.
func (ss *sotwSession) nack(resp *wire.RawResponse, ts *sotwTypeState, cause error) error {
	var rej *RejectError
	if !errors.As(cause, &rej) {
		return cause
	}
	resent := resp.VersionInfo != "" && resp.VersionInfo == ts.rejected
	detail := ss.rejected(resp.TypeURL, resp.VersionInfo, rej, !resent)
	ts.afterBeat = false // what answers a NACK echoes no heartbeat
	if resent {
		delay := ss.bo.Delay(ts.repeats)
		ts.repeats++
		ss.log.Debug("upstream re-sent a rejected version; delaying the NACK", ss.field("type_url", resp.TypeURL),
			ss.field("version", resp.VersionInfo), zap.Int("repeats", ts.repeats), zap.Duration("delay", delay))
		ss.deferReply(ts, detail, delay)
		return nil
	}
	ts.rejected, ts.repeats = resp.VersionInfo, 0
	return ss.send(resp.TypeURL, ts, ss.class.Interest(resp.TypeURL), resp.Nonce, detail)
}

// deferReply schedules the reply to the type's latest response (a NACK with
// detail, or an ACK when detail is nil) after delay; sendDueReplies sends it.
// A newer response cancels it.
func (ss *sotwSession) deferReply(ts *sotwTypeState, detail *status.Status, delay time.Duration) {
	ts.nack, ts.replyAt = detail, time.Now().Add(delay)
	ts.deferred = time.AfterFunc(delay, ss.due.Notify)
}

// sendDueReplies sends the deferred replies whose timers fired, or, when a
// named request went unanswered through its grace, falls back to the
// wildcard (fallback.go) instead.
func (ss *sotwSession) sendDueReplies() error {
	now := time.Now()
	if err := ss.fallBackIfSilent(now); err != nil {
		return err
	}
	for typeURL, ts := range ss.types {
		if ts.deferred == nil || now.Before(ts.replyAt) {
			continue // none, or another type's timer fired
		}
		ts.deferred = nil
		nack := ts.nack
		ts.nack = nil
		if err := ss.send(typeURL, ts, ss.class.Interest(typeURL), ts.nonce, nack); err != nil {
			return err
		}
	}
	return nil
}

func (ss *sotwSession) cancelDeferred(ts *sotwTypeState) {
	if ts.deferred != nil {
		ts.deferred.Stop()
		ts.deferred, ts.nack = nil, nil
	}
}

func (ss *sotwSession) close() {
	for _, ts := range ss.types {
		ss.cancelDeferred(ts)
		ts.answered()
	}
}

func (ss *sotwSession) settled() bool {
	for _, ts := range ss.types {
		if !ts.good {
			return false
		}
	}
	return true
}
