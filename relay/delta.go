package relay

import (
	"context"
	"maps"
	"slices"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// deltaTransport is what a delta stream needs of a gRPC stream.
type deltaTransport interface {
	Context() context.Context
	Recv() (*discoveryv3.DeltaDiscoveryRequest, error)
	SendMsg(any) error
}

var _ deltaTransport = (grpc.BidiStreamingServer[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse])(nil)

// deltaStream is one downstream incremental stream (delta ADS or per-type).
// Whatever the upstream speaks, the client gets per-resource deltas: the
// stream remembers which version of its shard the client holds and sends
// only the difference.
type deltaStream struct {
	streamBase
	transport deltaTransport

	types map[string]*deltaSub     // guarded by mu
	queue responseQueue[*deltaSub] // guarded by mu
	// holdTimer wakes the stream when a held parent removal's wait ends
	// (see removalGate); guarded by mu, stopped when the stream ends.
	holdTimer *time.Timer
}

var _ shard.Watcher = (*deltaStream)(nil)

func (s *Server) serveDelta(t deltaTransport, fixedType, variant string) error {
	st := &deltaStream{
		streamBase: newStreamBase(s, t.Context(), fixedType, variant),
		transport:  decodingDelta(t),
		types:      map[string]*deltaSub{},
	}
	return s.track(st, &st.streamBase, st.run)
}

func (s *deltaStream) run() error {
	s.out = s
	return s.serve(
		func() error { return readLoop(s.transport.Recv, s.handle) },
		func() { s.stopHoldTimer(); releaseAll(&s.streamBase, s.types, s, s) })
}

// writeQueued implements queueWriter.
func (s *deltaStream) writeQueued() error {
	return flush(&s.streamBase, s.collect, s.transport.SendMsg)
}

// ShardChanged implements shard.Watcher.
func (s *deltaStream) ShardChanged(sh *shard.Shard) {
	shardChanged(&s.streamBase, s.types, &s.queue, sh)
}

// ShardHeartbeat implements shard.Watcher.
func (s *deltaStream) ShardHeartbeat(sh *shard.Shard, hb *shard.Heartbeat) {
	shardHeartbeat(&s.streamBase, s.types, &s.queue, sh, hb)
}

// collect turns each queued shard version into the delta the client lacks.
func (s *deltaStream) collect(out []outgoing) []outgoing {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue.drain(func(e queued[*deltaSub]) {
		d := e.sub
		if d.shard != e.shard || d.switching {
			e.dropped() // a shard the client is leaving; the new one's state follows
			return
		}
		if e.hb != nil {
			// A TTL refresh, for a client holding exactly that version (one
			// behind gets the TTLs with its update).
			if len(d.over) == 0 && d.base != nil && d.base.Sum == e.hb.Response.Sum {
				m, nonce := s.stampLocked(e.hb.DeltaBody(), d.typeURL)
				d.nonce = nonce
				d.heartbeats++
				out = append(out, outgoing{m: m})
			}
			return
		}
		var gate *removalGate
		if g, ok := s.removalGate(d); ok {
			gate = &g
		}
		body, send := d.advance(e.resp, gate)
		if gate != nil && !gate.armAt.IsZero() {
			s.armHoldTimerLocked(gate.armAt)
		}
		if !send {
			e.dropped()
			return
		}
		m, nonce := s.stampLocked(body, d.typeURL)
		d.nonce = nonce
		d.pushes++
		out = append(out, outgoing{m: m, settles: settle(e)})
	})
	if len(out) > 0 {
		s.releaseHoldsLocked() // what was just written may free a held removal
	}
	return out
}

// handle applies one request (reader goroutine only). Subscription changes
// are honoured whatever the nonce (spec: the server must honor changes to the
// subscription state even if the nonce is stale).
func (s *deltaStream) handle(req *discoveryv3.DeltaDiscoveryRequest) error {
	if err := noLocators("resource_locators_subscribe", len(req.GetResourceLocatorsSubscribe())); err != nil {
		return err
	}
	if err := noLocators("resource_locators_unsubscribe", len(req.GetResourceLocatorsUnsubscribe())); err != nil {
		return err
	}
	initial := req.GetInitialResourceVersions()
	typeURL, err := s.admitRequest(req.GetResponseNonce(), req.GetTypeUrl(), req.GetNode(),
		versionList{"initial_resource_versions", slices.Collect(maps.Values(initial))},
		nameList{"resource_names_subscribe", req.GetResourceNamesSubscribe()},
		nameList{"resource_names_unsubscribe", req.GetResourceNamesUnsubscribe()},
		nameList{"initial_resource_versions", slices.Collect(maps.Keys(initial))})
	if err != nil {
		return err
	}

	s.mu.Lock()
	d := s.types[typeURL]
	first := d == nil
	if first {
		if err := s.typeLimitLocked(len(s.types)); err != nil {
			s.mu.Unlock()
			return err
		}
		d = newDeltaSub(typeURL)
		s.types[typeURL] = d
		s.srv.metrics.TypeSubscribed(s.variant, typeURL)
	}
	if n := req.GetResponseNonce(); wire.NonceIs(n, d.nonce) {
		if e := req.GetErrorDetail(); e != nil {
			// The client keeps what it had; the rejected versions are not
			// re-sent, a later version of those resources is.
			d.nacks++
			d.lastNACK = s.srv.clog.Truncate(e.GetMessage())
			s.srv.logNACK(s.logger, typeURL, versionOf(d.base), e.GetMessage())
			s.srv.metrics.ClientNACK(s.class.Name, typeURL)
		} else {
			d.acks++
			s.srv.metrics.ClientACK(s.class.Name, typeURL)
		}
	} else if n != "" {
		d.staleNonces++
	}
	d.apply(first, req)
	if err := s.deltaNamesLimitLocked(len(req.GetInitialResourceVersions())); err != nil {
		s.mu.Unlock()
		return err
	}
	sub := d.subscription()
	old := d.shard
	changed := first || d.retell || (old == nil) != sub.Empty() || old != nil && !old.Sub.Equal(sub)
	d.retell = false
	// The request's marks already describe the new subscription: until its
	// shard is installed, nothing of the old one may be diffed against them.
	d.switching = changed
	s.mu.Unlock()
	if !changed {
		return nil
	}

	var next *shard.Shard
	if !sub.Empty() {
		if old != nil && old.Sub.Equal(sub) {
			next = old
		} else if next, err = subscribe(s.class, typeURL, sub, s); err != nil {
			return err
		}
	}
	s.mu.Lock()
	d.shard, d.switching = next, false
	if next != nil {
		cur := next.Current()
		if cur == nil && d.mustTell() {
			// The spec's wildcard-unsubscribe exception needs an answer
			// now, and the shard has none yet: by all the relay knows, the
			// name is not there.
			// Answer from what the client holds, so nothing else it holds
			// is forgotten; from the empty state if it holds nothing yet.
			cur = d.base
			if cur == nil {
				cur = &shard.Response{TypeURL: typeURL, Version: dedup.Version(0)}
			}
		}
		s.queue.push(d, next, cur, false)
		s.kickLocked()
	}
	s.releaseHoldsLocked() // the client may have dropped a held parent's children
	s.mu.Unlock()
	if old != nil && old != next {
		s.class.Unsubscribe(old, s)
	}
	return nil
}

func (s *deltaStream) status() StreamStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.statusLocked()
	out.Collapses = s.queue.collapses
	for _, d := range s.types {
		ts := TypeStatus{TypeURL: d.typeURL, Wildcard: d.wildcard, Names: slices.Sorted(maps.Keys(d.names)),
			SentVersion: versionOf(d.base), Nonce: wire.NonceString(d.nonce), Pushes: d.pushes, Heartbeats: d.heartbeats, ACKs: d.acks, NACKs: d.nacks,
			LastNACK: d.lastNACK, StaleNonces: d.staleNonces}
		out.Types = append(out.Types, ts)
	}
	sortTypes(out.Types)
	return out
}
