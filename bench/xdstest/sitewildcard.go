package xdstest

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// SWOptions configure a SiteWildcard.
type SWOptions struct {
	// Addr to listen on, retried for 5 s while a closed server releases
	// it (a restart: a new SiteWildcard on the old one's Addr); "" is a
	// free loopback port.
	Addr string
	// ServerOptions are added to the gRPC server's (credentials, interceptors).
	ServerOptions []grpc.ServerOption
}

// SiteWildcard is an ADS server (SotW and delta) whose wildcard set is
// decided by site-specific logic, as the xDS spec allows: each resource is
// in its type's wildcard set unless it is on demand, and an on-demand
// resource reaches a stream only by name (a client may subscribe to "*"
// and A with A outside the wildcard, as Envoy's on-demand CDS does).
// go-control-plane's caches cannot do that: their wildcard is every
// resource.
//
// A stream's subscription of a type is the wildcard set if it subscribes
// the wildcard, plus the resources it names. Each type has a version, a
// counter bumped by every Set, Delete and SetOnDemand that changes it (the
// SotW version_info and delta system_version_info); a delta resource
// version is the type's version at the resource's last Set. Every change
// is pushed to each stream it concerns.
//
// SotW: empty resource_names before any name is the legacy wildcard, "*"
// the explicit one; Listener and Cluster responses carry the whole
// subscription, other types what it covers (nothing: no response). A type
// is answered only after a request carrying its latest nonce (a stale
// request's subscription is kept, unanswered); a NACK gets no answer until
// the next change. Delta: each response is the difference from what the
// server believes the client holds (initial_resource_versions included):
// resources at another version, removed_resources for held names the
// subscription no longer covers, and for names just subscribed that do not
// exist; a name unsubscribed beside the wildcard is answered with the
// resource or its removal (spec), otherwise forgotten silently.
type SiteWildcard struct {
	Addr string

	// Set at construction, read-only.
	srv      *grpc.Server
	served   chan struct{}  // closed when Serve returned
	handlers sync.WaitGroup // stream handlers and their readers

	// Guarded by mu: the resources served, the open streams, the records.
	mu        sync.Mutex
	types     map[string]*swType
	streams   map[*swConn]struct{}
	stats     CPStats
	sotwReq   []*discoveryv3.DiscoveryRequest // the last maxRequests of each
	deltaReq  []*discoveryv3.DeltaDiscoveryRequest
	sotwSent  []*discoveryv3.DiscoveryResponse
	deltaSent []*discoveryv3.DeltaDiscoveryResponse
	closed    bool
}

// swType is the state of one type URL.
type swType struct {
	version int
	res     map[string]*swEntry
}

// swEntry is one resource: marshalled once, shared by every response.
type swEntry struct {
	any      *anypb.Any
	version  int // the type's version at its last Set
	onDemand bool
}

// StartSiteWildcard starts a server with no resources; it runs until Close.
func StartSiteWildcard(opts SWOptions) (*SiteWildcard, error) {
	addr := cmp.Or(opts.Addr, "127.0.0.1:0")
	lis, err := listenRetry(addr, 5*time.Second) // a given address may still be a closed server's
	if err != nil {
		return nil, err
	}
	s := &SiteWildcard{Addr: lis.Addr().String(), served: make(chan struct{}),
		types: map[string]*swType{}, streams: map[*swConn]struct{}{}}
	s.srv = grpc.NewServer(opts.ServerOptions...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(s.srv, swADS{s: s})
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(lis)
	}()
	return s, nil
}

// Close ends every stream and the server, and waits for their goroutines.
func (s *SiteWildcard) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.srv.Stop()
	<-s.served
	s.handlers.Wait()
}

func (s *SiteWildcard) typeLocked(typeURL string) *swType {
	t := s.types[typeURL]
	if t == nil {
		t = &swType{res: map[string]*swEntry{}}
		s.types[typeURL] = t
	}
	return t
}

// Set adds or changes resources of typeURL (named as go-control-plane
// names them), in the wildcard set unless onDemand. Every call is a change.
func (s *SiteWildcard) Set(typeURL string, onDemand bool, rs ...types.Resource) error {
	entries := map[string]*swEntry{}
	for _, r := range rs {
		name := cachev3.GetResourceName(r)
		if name == "" {
			return fmt.Errorf("xdstest: a %T without a name", r)
		}
		a, err := anypb.New(r)
		if err != nil {
			return fmt.Errorf("xdstest: %s: %w", name, err)
		}
		if a.GetTypeUrl() != typeURL {
			return fmt.Errorf("xdstest: %s is a %s, not a %s", name, a.GetTypeUrl(), typeURL)
		}
		entries[name] = &swEntry{any: a, onDemand: onDemand}
	}
	if len(entries) == 0 {
		return errors.New("xdstest: Set of no resources")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.typeLocked(typeURL)
	t.version++
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		e := entries[name]
		e.version = t.version
		before := t.res[name]
		t.res[name] = e
		s.pushLocked(typeURL, name, before, e)
	}
	return nil
}

// Delete removes names of typeURL (names not held are ignored).
func (s *SiteWildcard) Delete(typeURL string, names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.typeLocked(typeURL)
	bumped := false
	for _, name := range names {
		before := t.res[name]
		if before == nil {
			continue
		}
		if !bumped {
			t.version++
			bumped = true
		}
		delete(t.res, name)
		s.pushLocked(typeURL, name, before, nil)
	}
}

// SetOnDemand takes name of typeURL out of the wildcard set (onDemand) or
// puts it in; it reports whether the resource exists. Its resource version
// does not change; the type's does if the flag does.
func (s *SiteWildcard) SetOnDemand(typeURL, name string, onDemand bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.typeLocked(typeURL)
	before := t.res[name]
	if before == nil {
		return false
	}
	if before.onDemand == onDemand {
		return true
	}
	t.version++
	after := &swEntry{any: before.any, version: before.version, onDemand: onDemand}
	t.res[name] = after
	s.pushLocked(typeURL, name, before, after)
	return true
}

// pushLocked tells every stream of the change of name from before to after
// (nil: absent) and wakes those it concerns.
func (s *SiteWildcard) pushLocked(typeURL, name string, before, after *swEntry) {
	for c := range s.streams {
		if c.state.changed(typeURL, name, before, after) {
			c.wakeUp()
		}
	}
}

// SWRecords is what a SiteWildcard recorded, read at one instant: the last
// requests received and responses sent (up to 4096 of each), oldest
// first, and its counts (streams opened per protocol, open now, requests
// and NACKs received).
type SWRecords struct {
	SotwRequests  []*discoveryv3.DiscoveryRequest
	DeltaRequests []*discoveryv3.DeltaDiscoveryRequest
	SotwSent      []*discoveryv3.DiscoveryResponse
	DeltaSent     []*discoveryv3.DeltaDiscoveryResponse
	Stats         CPStats
}

// Records returns what the server recorded so far.
func (s *SiteWildcard) Records() SWRecords {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SWRecords{SotwRequests: slices.Clone(s.sotwReq), DeltaRequests: slices.Clone(s.deltaReq),
		SotwSent: slices.Clone(s.sotwSent), DeltaSent: slices.Clone(s.deltaSent), Stats: s.stats}
}

// recordRequestLocked counts a request and keeps a copy of it in list.
func recordRequestLocked[T interface {
	proto.Message
	GetErrorDetail() *status.Status
}](s *SiteWildcard, list *[]T, r T) T {
	r = proto.Clone(r).(T)
	s.stats.Requests++
	s.stats.NACKs += boolInt(r.GetErrorDetail() != nil)
	*list = appendBounded(*list, r)
	return r
}

// Version returns the current version of typeURL (0: never changed).
func (s *SiteWildcard) Version(typeURL string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.typeLocked(typeURL).version
}

// swSub is a stream's subscription of one type, guarded by
// SiteWildcard.mu.
type swSub struct {
	wildcard bool
	names    map[string]bool // named besides the wildcard
	dirty    bool            // something to tell may have come since the last response
}

// mark marks the subscription dirty if the change of name from before to
// after (nil: absent) concerns it, and reports whether it is dirty.
func (sub *swSub) mark(name string, before, after *swEntry) bool {
	if before.covered(name, sub.wildcard, sub.names) || after.covered(name, sub.wildcard, sub.names) {
		sub.dirty = true
	}
	return sub.dirty
}

// take clears dirty and returns the type's state and the resources the
// subscription covers.
func (sub *swSub) take(s *SiteWildcard, typeURL string) (*swType, map[string]*swEntry) {
	sub.dirty = false
	t := s.typeLocked(typeURL)
	return t, t.subscribed(sub.wildcard, sub.names)
}

// covered reports whether e, the resource name, is in a subscription of
// the wildcard (or not) and names.
func (e *swEntry) covered(name string, wildcard bool, names map[string]bool) bool {
	return e != nil && (names[name] || wildcard && !e.onDemand)
}

// subscribed returns the resources of t a subscription covers.
func (t *swType) subscribed(wildcard bool, names map[string]bool) map[string]*swEntry {
	out := map[string]*swEntry{}
	for name, e := range t.res {
		if e.covered(name, wildcard, names) {
			out[name] = e
		}
	}
	return out
}
