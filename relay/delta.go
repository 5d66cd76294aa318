package relay

import (
	"maps"
	"slices"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/drop"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// deltaTransport is what a delta stream needs of a gRPC stream.
type deltaTransport = transport[*discoveryv3.DeltaDiscoveryRequest]

var _ deltaTransport = (grpc.BidiStreamingServer[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse])(nil)

// deltaStream is one downstream incremental stream (delta ADS or per-type):
// the stream core, and the delta protocol over it. Whatever the upstream
// speaks, the client gets per-resource deltas: the stream remembers which
// version of its shard the client holds and sends only the difference.
type deltaStream struct {
	stream[*deltaTypeSub, *discoveryv3.DeltaDiscoveryRequest]
}

var _ protocol[*deltaTypeSub, *discoveryv3.DeltaDiscoveryRequest] = (*deltaStream)(nil)

// newDeltaStream returns a delta stream serving t for srv; a fake transport
// (tests) is used as it is.
func newDeltaStream(srv *Server, t deltaTransport, fixedType, variant string) *deltaStream {
	st := &deltaStream{}
	st.init(srv, decodingDelta(t), fixedType, variant, st)
	return st
}

func (s *Server) serveDelta(t deltaTransport, fixedType, variant string) error {
	return newDeltaStream(s, t, fixedType, variant).serve()
}

// collectLocked implements protocol: it turns a queued shard version into
// the delta the client lacks, or a heartbeat of the version it holds.
func (s *deltaStream) collectLocked(e queued[*deltaTypeSub]) (wire.Stamped, drop.Reason) {
	d := e.sub
	if e.hb != nil {
		// A TTL refresh, for a client holding exactly that version (one
		// behind gets the TTLs with its update).
		if len(d.over) != 0 || d.base == nil || d.base.Sum != e.hb.Response.Sum {
			return wire.Stamped{}, drop.HeartbeatNotHeld
		}
		d.heartbeats++
		return s.stampLocked(e.hb.DeltaBody(), &d.typeSubBase), 0
	}
	var gate *removalGate
	if g, ok := s.removalGate(d); ok {
		gate = &g
	}
	body, why := d.advance(e.resp, gate)
	if gate != nil && !gate.armAt.IsZero() {
		s.armHoldTimerLocked(gate.armAt)
	}
	if why != 0 {
		return wire.Stamped{}, why
	}
	d.pushes++
	return s.stampLocked(body, &d.typeSubBase), 0
}

// collectedLocked implements protocol: what was just collected may free a
// held removal.
func (s *deltaStream) collectedLocked() { s.releaseHoldsLocked() }

// ending implements protocol: the removal timer stops.
func (s *deltaStream) ending() { s.stopHoldTimer() }

// handle implements protocol: it applies one request (reader goroutine). Subscription changes
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
	d, first, err := s.typeLocked(typeURL, newDeltaTypeSub)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	if n := req.GetResponseNonce(); wire.NonceIs(n, d.nonce) {
		d.answered = d.nonce
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
		s.staleLocked(d) // its ACK or NACK is ignored, its subscription change is not
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
	if !changed {
		s.mu.Unlock()
		return nil
	}
	// The request's marks already describe the new subscription: until its
	// shard is installed, nothing of the old one may be diffed against them
	// (unlockAndSwitch drops what the old shard queues meanwhile).
	return s.unlockAndSwitch(d, old, sub, func(next *shard.Shard) {
		if next != nil {
			// A shard with no answer yet (Current nil) is told nothing now,
			// the spec's wildcard-unsubscribe exception included: until the
			// shard answers, the relay does not know whether the names
			// exist, and its answer (ShardChanged) settles what is owed.
			s.pushLocked(d, next, next.Current(), false)
		}
		s.releaseHoldsLocked() // the client may have dropped a held parent's children
	})
}

// typeStatusLocked implements protocol.
func (s *deltaStream) typeStatusLocked(d *deltaTypeSub) DownstreamTypeStatus {
	ts := d.status()
	ts.Wildcard, ts.Names, ts.SentVersion = d.wildcard, slices.Sorted(maps.Keys(d.names)), versionOf(d.base)
	return ts
}
