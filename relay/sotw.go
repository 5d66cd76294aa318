package relay

import (
	"slices"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/drop"
	"github.com/xds-relay/xds-relay/shard/wire"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// sotwTransport is what a SotW stream needs of a gRPC stream; every
// generated Stream* server stream satisfies it.
type sotwTransport = transport[*discoveryv3.DiscoveryRequest]

var _ sotwTransport = (grpc.BidiStreamingServer[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse])(nil)

// sotwStream is one downstream SotW stream (ADS or per-type): the stream
// core, and the SotW protocol over it.
type sotwStream struct {
	stream[*sotwTypeSub, *discoveryv3.DiscoveryRequest]
}

var _ protocol[*sotwTypeSub, *discoveryv3.DiscoveryRequest] = (*sotwStream)(nil)

// newSotWStream returns a SotW stream serving t for srv; a fake transport
// (tests) is used as it is.
func newSotWStream(srv *Server, t sotwTransport, fixedType, variant string) *sotwStream {
	st := &sotwStream{}
	st.init(srv, decodingSotW(t), fixedType, variant, st)
	return st
}

func (s *Server) serveSotW(t sotwTransport, fixedType, variant string) error {
	return newSotWStream(s, t, fixedType, variant).serve()
}

// collectLocked implements protocol: it stamps a queued response the client
// does not hold yet, or a heartbeat of the version it holds and accepted.
func (s *sotwStream) collectLocked(e queued[*sotwTypeSub]) (wire.Stamped, drop.Reason) {
	t := e.sub
	if e.hb != nil {
		// A TTL refresh of the version the client holds and accepted
		// (a client recognises a heartbeat by its accepted version);
		// only clients that take Resource wrappers get TTLs at all.
		if v := e.hb.Response.Version; !s.resourceInSotW || v != t.sentVersion || v != t.ackedVersion {
			return wire.Stamped{}, drop.HeartbeatNotHeld
		}
		t.heartbeats++
		return s.stampLocked(e.hb.SotWBody(), &t.typeSubBase), 0
	}
	if t.holds(e.resp) {
		return wire.Stamped{}, drop.AlreadyHeld
	}
	if len(e.resp.Names) == 0 && !xdstype.FullState(t.typeURL) {
		// An empty response is a no-op for a SotW client of a type
		// without full-state semantics (spec "Deleting Resources").
		return wire.Stamped{}, drop.EmptyResponse
	}
	version, sum := e.resp.Version, e.resp.Sum
	var body wire.Body
	kept := s.keptLocked(t, e.resp)
	if len(kept) > 0 {
		// Clusters whose removal waits for a route change (removalGate).
		body, version = s.keptBody(e.resp, kept)
		sum = 0
	} else {
		body = e.resp.Body()
		if s.resourceInSotW {
			body = e.resp.WrappedBody() // carries the TTLs; Body when there are none
		}
	}
	m := s.stampLocked(body, &t.typeSubBase)
	t.carried = t.carriedAfter(e.resp)
	t.sentVersion, t.sentSum, t.force, t.claimed = version, sum, false, false
	t.sent, t.kept = e.resp, kept
	for n := range t.removals {
		if _, ok := slices.BinarySearchFunc(kept, n, byName); !ok {
			delete(t.removals, n) // sent
		}
	}
	t.pushes++
	return m, 0
}

// collectedLocked implements protocol: what was just collected (a route
// change) may free a held removal.
func (s *sotwStream) collectedLocked() { s.releaseHoldsLocked() }

// ending implements protocol: the removal timer stops.
func (s *sotwStream) ending() { s.stopHoldTimer() }

// handle implements protocol: it applies one request (reader goroutine).
func (s *sotwStream) handle(req *discoveryv3.DiscoveryRequest) error {
	if err := noLocators("resource_locators", len(req.GetResourceLocators())); err != nil {
		return err
	}
	typeURL, err := s.admitRequest(req.GetResponseNonce(), req.GetTypeUrl(), req.GetNode(),
		versionList{"version_info", []string{req.GetVersionInfo()}}, nameList{"resource_names", req.GetResourceNames()})
	if err != nil {
		return err
	}

	s.mu.Lock()
	t, first, err := s.typeLocked(typeURL, newSotWTypeSub)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	if !first && t.nonce != 0 && !wire.NonceIs(req.GetResponseNonce(), t.nonce) {
		// Stale: the client has not seen our latest response yet; it will
		// send a newer request once it has (spec: "Requests become stale").
		// Its names are ignored, but not the fact that it set them: the
		// legacy wildcard ends with the first request of the type that set
		// resource_names, whatever its nonce (spec: "How the client
		// specifies what resources to return"), so a later empty list means
		// nothing, as the client means it.
		s.staleLocked(t)
		t.names.Note(req.GetResourceNames())
		s.mu.Unlock()
		return nil
	}
	if req.GetResponseNonce() != "" && !first {
		if d := req.GetErrorDetail(); d != nil {
			t.nacks++
			t.lastNACK = s.srv.clog.Truncate(d.GetMessage())
			s.srv.logNACK(s.logger, typeURL, t.sentVersion, d.GetMessage())
			s.srv.metrics.ClientNACK(s.class.Name, typeURL)
		} else {
			t.acks++
			t.ackedVersion = req.GetVersionInfo()
			s.srv.metrics.ClientACK(s.class.Name, typeURL)
		}
	}
	names := t.names
	sub := names.Read(req.GetResourceNames())
	if err := s.sotwNamesLimitLocked(t, sub); err != nil {
		s.mu.Unlock()
		return err
	}
	t.names = names
	old := t.shard
	changed := first || old == nil || !old.Sub.Equal(sub)
	if !changed || (sub.Empty() && old == nil) {
		s.mu.Unlock()
		return nil
	}
	return s.unlockAndSwitch(t, old, sub, func(next *shard.Shard) {
		if next != nil {
			t.updateSend(first, old, req.GetVersionInfo())
			s.pushLocked(t, next, next.Current(), false)
		}
		s.releaseHoldsLocked() // the client may have dropped a referrer of a held removal
	})
}

// typeStatusLocked implements protocol.
func (s *sotwStream) typeStatusLocked(t *sotwTypeSub) DownstreamTypeStatus {
	ts := t.status()
	ts.SentVersion, ts.AckedVersion = t.sentVersion, t.ackedVersion
	if t.shard != nil {
		ts.Wildcard, ts.Names = t.shard.Sub.Wildcard, t.shard.Sub.Names
	}
	return ts
}
