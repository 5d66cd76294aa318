package upstream

import (
	"errors"
	"fmt"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// typeState is what one session sent for a type URL.
type typeState struct {
	sub      shard.Subscription
	explicit bool   // a non-empty resource_names was sent: legacy wildcard is gone
	nonce    string // the latest nonce received

	rejected string      // version of the last NACKed response
	repeats  int         // consecutive re-sends of the rejected version
	deferred *time.Timer // a NACK waiting to be sent; nil if none
	nackAt   time.Time   // when the deferred NACK is due
	nack     *status.Status
}

// session is the SotW protocol of one upstream stream.
type session struct {
	*classStream
	stream grpc.ClientStream
	types  map[string]*typeState
	first  bool // the next request is the stream's first and carries the node
	// due is signalled by a deferred NACK's timer (see nack).
	due dedup.Signal
}

var _ protocolSession = (*session)(nil)

func newSotwSession(s *classStream, st grpc.ClientStream) *session {
	return &session{classStream: s, stream: st, types: map[string]*typeState{}, first: true, due: dedup.NewSignal()}
}

func (ss *session) nackDue() <-chan struct{} { return ss.due.C() }

// syncInterest sends a request for every type whose union interest differs
// from what this stream last asked for.
func (ss *session) syncInterest() error {
	for _, typeURL := range ss.class.TypeURLs() {
		want := ss.class.Interest(typeURL)
		ts := ss.types[typeURL]
		if ts == nil {
			if want.Empty() {
				continue
			}
			ts = &typeState{}
			ss.types[typeURL] = ts
		} else if ts.sub.Equal(ts.asked(want)) {
			continue
		}
		if err := ss.send(typeURL, ts, want, "", nil); err != nil {
			return err
		}
	}
	return nil
}

// asked is the subscription a request for want asks for: want, except that
// once only a legacy wildcard was sent, an empty request would still mean
// "everything", so the subscription (and the class's data) stay as they are
// until the stream restarts.
func (ts *typeState) asked(want shard.Subscription) shard.Subscription {
	if want.Empty() && !ts.explicit && ts.sub.Wildcard {
		return ts.sub
	}
	return want
}

// send writes one request for typeURL subscribing to want (see asked),
// carrying the last ACKed version and, for an ACK or NACK, the response's
// nonce.
func (ss *session) send(typeURL string, ts *typeState, want shard.Subscription, nonce string, nack *status.Status) error {
	want = ts.asked(want)
	req := &discoverygrpc.DiscoveryRequest{
		TypeUrl:       typeURL,
		VersionInfo:   ss.versions[typeURL],
		ResponseNonce: ts.nonce,
		ErrorDetail:   nack,
	}
	if nonce != "" {
		req.ResponseNonce = nonce
	}
	switch {
	case want.Wildcard && len(want.Names) == 0 && !ts.explicit:
		// Legacy wildcard: understood by every control plane.
	case want.Wildcard:
		req.ResourceNames = append([]string{shard.Wildcard}, want.Names...)
	default:
		req.ResourceNames = want.Names
	}
	if len(req.ResourceNames) > 0 {
		ts.explicit = true
	}
	if ss.first {
		req.Node = ss.node
		ss.first = false
	}
	ts.sub = want
	ss.class.Requested(typeURL, want, false)
	if err := ss.stream.SendMsg(req); err != nil {
		return fmt.Errorf("send %s request: %w", typeURL, err)
	}
	return nil
}

// handle validates and installs one response, then ACKs or NACKs it. ok is
// false for a NACKed response; err is a broken stream.
func (ss *session) handle(b []byte) (ok bool, err error) {
	resp, err := wire.ParseResponse(b)
	if err != nil {
		return false, fmt.Errorf("undecodable response: %w", err)
	}
	ss.setStatus(func(st *StreamStatus) { st.Responses++ })
	ts := ss.types[resp.TypeURL]
	if ts == nil {
		// Not subscribed on this stream. Any request for the type, even a
		// NACK, would subscribe to it, so drop the response unanswered.
		ss.log.Warn("dropped upstream response for a type not subscribed to", zap.String("type_url", resp.TypeURL))
		return false, nil
	}
	ts.nonce = resp.Nonce
	ss.cancelDeferred(ts) // a newer response supersedes a NACK still waiting
	ctx, end := ss.traceResponse(resp.TypeURL, resp.VersionInfo, len(resp.Resources))
	replace := shard.FullState(resp.TypeURL)
	cands, beats, verr := unwrapSotW(resp.Resources)
	var resources []*shard.Resource
	if verr == nil {
		resources, verr = ss.valid.resources(resp.TypeURL, cands, replace)
	}
	if verr != nil {
		end(verr)
		return false, ss.nack(resp, ts, verr)
	}
	defer end(nil)
	// A response of heartbeats only (go-control-plane lists just the
	// resources with a TTL) refreshes them; it is not the state of the world.
	heartbeatOnly := len(resources) == 0 && len(beats) > 0
	u := shard.Update{Resources: resources, Heartbeats: beats, Replace: replace && !heartbeatOnly, HeartbeatOnly: heartbeatOnly, Ctx: ctx}
	if ss.valid.passVersions {
		u.Version = resp.VersionInfo
	}
	ss.class.ApplyUpdate(resp.TypeURL, u)
	ss.versions[resp.TypeURL] = resp.VersionInfo
	ts.rejected, ts.repeats = "", 0
	ss.metrics.Response(ss.class.Name, resp.TypeURL, true)
	ss.setStatus(func(st *StreamStatus) {
		st.ACKs++
		st.Versions[resp.TypeURL] = resp.VersionInfo
	})
	return true, ss.send(resp.TypeURL, ts, ss.class.Interest(resp.TypeURL), resp.Nonce, nil)
}

// nack rejects a response. Some control planes (go-control-plane among
// them) answer a NACK by re-sending the same version at once; answering each
// re-send at once would loop at network speed. So a re-send of the version
// just rejected is NACKed after a backoff delay, and logged at debug only.
func (ss *session) nack(resp *wire.RawResponse, ts *typeState, cause error) error {
	var rej *RejectError
	if !errors.As(cause, &rej) {
		return cause
	}
	ss.metrics.Response(ss.class.Name, resp.TypeURL, false)
	ss.setStatus(func(st *StreamStatus) {
		st.NACKs++
		st.LastNACK = fmt.Sprintf("%s %s: %s", resp.TypeURL, resp.VersionInfo, rej.Reason)
	})
	detail := &status.Status{Code: int32(codes.InvalidArgument), Message: rej.Reason}
	if resp.VersionInfo != "" && resp.VersionInfo == ts.rejected {
		delay := ss.bo.Delay(ts.repeats)
		ts.repeats++
		ss.log.Debug("upstream re-sent a rejected version; delaying the NACK", zap.String("type_url", resp.TypeURL),
			zap.String("version", resp.VersionInfo), zap.Int("repeats", ts.repeats), zap.Duration("delay", delay))
		ts.nack, ts.nackAt = detail, time.Now().Add(delay)
		ts.deferred = time.AfterFunc(delay, ss.due.Notify)
		return nil
	}
	ts.rejected, ts.repeats = resp.VersionInfo, 0
	ss.log.Warn("rejected upstream response", zap.String("type_url", resp.TypeURL), zap.String("version", resp.VersionInfo), zap.String("reason", rej.Reason))
	return ss.send(resp.TypeURL, ts, ss.class.Interest(resp.TypeURL), resp.Nonce, detail)
}

// sendDueNACKs sends the deferred NACKs whose timers fired.
func (ss *session) sendDueNACKs() error {
	now := time.Now()
	for typeURL, ts := range ss.types {
		if ts.deferred == nil || now.Before(ts.nackAt) {
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

func (ss *session) cancelDeferred(ts *typeState) {
	if ts.deferred != nil {
		ts.deferred.Stop()
		ts.deferred, ts.nack = nil, nil
	}
}

func (ss *session) close() {
	for _, ts := range ss.types {
		ss.cancelDeferred(ts)
	}
}
