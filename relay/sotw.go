package relay

import (
	"context"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

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
	streamBase
	transport sotwTransport

	types map[string]*typeSub     // guarded by mu
	queue responseQueue[*typeSub] // guarded by mu
}

var _ shard.Watcher = (*sotwStream)(nil)

func (s *sotwStream) run() error {
	s.out = s
	return s.serve(
		func() error { return readLoop(s.transport.Recv, s.handle) },
		func() { releaseAll(&s.streamBase, s.types, s, s) })
}

// writeQueued implements queueWriter.
func (s *sotwStream) writeQueued() error {
	return flush(&s.streamBase, s.collect, s.transport.SendMsg)
}

// ShardChanged implements shard.Watcher.
func (s *sotwStream) ShardChanged(sh *shard.Shard) {
	shardChanged(&s.streamBase, s.types, &s.queue, sh)
}

// ShardHeartbeat implements shard.Watcher.
func (s *sotwStream) ShardHeartbeat(sh *shard.Shard, hb *shard.Heartbeat) {
	shardHeartbeat(&s.streamBase, s.types, &s.queue, sh, hb)
}

// collect stamps a nonce on each queued response the client does not hold
// yet. No protobuf work: the body is shared, the suffix is the stream's.
func (s *sotwStream) collect(out []outgoing) []outgoing {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue.drain(func(e queued[*typeSub]) {
		t := e.sub
		if t.shard != e.shard {
			e.dropped() // queued for a subscription the client has since changed
			return
		}
		if e.hb != nil {
			// A TTL refresh of the version the client holds and accepted
			// (a client recognises a heartbeat by its accepted version);
			// only clients that take Resource wrappers get TTLs at all.
			if v := e.hb.Response.Version; s.resourceInSotW && v == t.sentVersion && v == t.ackedVersion {
				m, nonce := s.stampLocked(e.hb.SotWBody(), t.typeURL)
				t.nonce = nonce
				t.heartbeats++
				out = append(out, outgoing{m: m})
			}
			return
		}
		if !t.force && e.resp.Version == t.sentVersion && !(t.claimed && e.resp.UpstreamVersioned) {
			// The client holds it. (A version the client only claimed is
			// trusted if it is a content hash: an upstream's version_info
			// may name other content on another relay's upstream stream.)
			e.dropped()
			return
		}
		if len(e.resp.Names) == 0 && !shard.FullState(t.typeURL) {
			// An empty response is a no-op for a SotW client of a type
			// without full-state semantics (spec "Deleting Resources").
			e.dropped()
			return
		}
		body := e.resp.Body
		if s.resourceInSotW {
			body = e.resp.WrappedBody() // carries the TTLs; Body when there are none
		}
		m, nonce := s.stampLocked(body, t.typeURL)
		t.nonce, t.sentVersion, t.force, t.claimed = nonce, e.resp.Version, false, false
		t.pushes++
		out = append(out, outgoing{m: m, settles: settle(e)})
	})
	return out
}

// handle applies one request (reader goroutine only).
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
	t := s.types[typeURL]
	first := t == nil
	if first {
		if err := s.typeLimitLocked(len(s.types)); err != nil {
			s.mu.Unlock()
			return err
		}
		t = &typeSub{typeURL: typeURL}
		s.types[typeURL] = t
		s.srv.metrics.TypeSubscribed(s.variant, typeURL)
	} else if t.nonce != 0 && !wire.NonceIs(req.GetResponseNonce(), t.nonce) {
		// Stale: the client has not seen our latest response yet; it will
		// send a newer request once it has (spec: "Requests become stale").
		t.staleNonces++
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
		if next, err = subscribe(s.class, typeURL, sub, s); err != nil {
			return err
		}
	}
	s.mu.Lock()
	t.shard = next
	if next != nil {
		t.updateSend(first, old, req.GetVersionInfo())
		s.queue.push(t, next, next.Current(), false)
		s.kickLocked()
	}
	s.mu.Unlock()
	if old != nil {
		s.class.Unsubscribe(old, s)
	}
	return nil
}

func (s *sotwStream) status() StreamStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.statusLocked()
	out.Collapses = s.queue.collapses
	for _, t := range s.types {
		ts := TypeStatus{TypeURL: t.typeURL, SentVersion: t.sentVersion, AckedVersion: t.ackedVersion, Nonce: wire.NonceString(t.nonce),
			Pushes: t.pushes, Heartbeats: t.heartbeats, ACKs: t.acks, NACKs: t.nacks, LastNACK: t.lastNACK, StaleNonces: t.staleNonces}
		if t.shard != nil {
			ts.Wildcard, ts.Names = t.shard.Sub.Wildcard, t.shard.Sub.Names
		}
		out.Types = append(out.Types, ts)
	}
	sortTypes(out.Types)
	return out
}
