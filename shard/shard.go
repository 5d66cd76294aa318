package shard

import (
	"container/list"
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/xds-relay/xds-relay/shard/wire"
)

// Response is one version of a shard's content, encoded once and shared
// read-only by every stream of the shard. Immutable.
type Response struct {
	// Read-only after creation (built under Class.mu, then shared).
	TypeURL   string
	Version   string      // the content hash, as clients see it (or see UpstreamVersioned)
	Sum       uint64      // identity of this shard version: the content hash, plus any Unknown names
	BodyLen   int         // the size of Body's bytes, known without building it
	Names     []string    // names of the resources, sorted
	Resources []*Resource // the resources, in Names order
	// AbsenceKnown: the source sends this type's complete state, so a name
	// absent from Resources is known not to exist (delta clients are told).
	AbsenceKnown bool
	// Unknown: subscribed names whose existence the upstream has not told
	// yet; absent from Resources, but not known to be absent.
	Unknown []string
	// Aliases maps the aliases of the resources to their names (nil when
	// none has any).
	Aliases map[string]string
	// HasTTL: some resource carries a TTL (see WrappedBody).
	HasTTL bool
	// UpstreamVersioned: Version is the upstream's version_info passed
	// through (upstream.versions: upstream), not a content hash; two relays
	// may then give the same version to different content.
	UpstreamVersioned bool
	// contentSum is the content hash alone (Sum without Unknown): with
	// TypeURL and Version, what the bodies encode (see bodyKey).
	contentSum uint64

	// The change from the shard's previous version (HasPrev), for delta
	// streams that hold exactly that version.
	HasPrev bool
	PrevSum uint64
	Changed []*Resource
	Removed []string // only when AbsenceKnown

	// The full-state bodies, built on first use by any stream and kept
	// while streams use them (see keptBody, BodyKeepAlive); each is built
	// by one stream at a time, so a fan-out's writers do not all build it
	// at once.
	body, deltaFull, wrapped keptBody

	// Accessed atomically: the delta body, built on first use by any
	// stream; fanout stored under Class.mu when watchers are told of this
	// version.
	deltaBody atomic.Pointer[wire.Body]
	fanout    atomic.Pointer[fanout]
	// named: what the resources refer to by name, built on first use
	// (see Names); nil before.
	named atomic.Pointer[namedIndex]
}

// fanout counts down the streams told of a response until each has written
// or dropped it, then reports the time since the upstream update.
type fanout struct {
	// Read-only after creation.
	ctx   context.Context // the update's (trace) context
	start time.Time
	done  FanoutObserver

	// Accessed atomically: each stream told counts itself down once.
	pending atomic.Int64
}

// FanoutObserver is told, for each shard version its watchers were told of,
// the update's context, when the update began and how long it took until
// the last of those streams had written (or dropped) it.
type FanoutObserver func(ctx context.Context, typeURL string, start time.Time, d time.Duration)

// FanoutStep records that one stream told of this response has written it
// (or will never write it: superseded, not needed). The last step reports
// the fan-out duration to the class's observer.
func (r *Response) FanoutStep() {
	f := r.fanout.Load()
	if f != nil && f.pending.Add(-1) == 0 {
		f.done(f.ctx, r.TypeURL, f.start, time.Since(f.start))
	}
}

// Body is the SotW DiscoveryResponse without nonce (see wire.BodyBuilder):
// built on first use, so a shard only delta streams watch never builds it,
// and shared with every shard, of any class, whose version encodes the same
// bytes. It is kept while streams ask for it, then held weakly and rebuilt
// if collected (see BodyKeepAlive).
func (r *Response) Body() wire.Body {
	return r.body.get(func() wire.Body {
		return sotwBodyOf(r.TypeURL, r.Version, r.contentSum, r.Resources, r.BodyLen)
	})
}

// WrappedBody is the SotW body for clients that support
// xds.config.supports-resource-in-sotw: resources with a TTL are wrapped in
// envoy.service.discovery.v3.Resource so the TTL reaches them. It is Body
// when no resource has a TTL; otherwise built on first use and kept like
// Body.
func (r *Response) WrappedBody() wire.Body {
	if !r.HasTTL {
		return r.Body()
	}
	return r.wrapped.get(func() wire.Body {
		bb := wire.NewBodyBuilder(r.Version, r.BodyLen+64*len(r.Resources))
		for _, res := range r.Resources {
			if res.TTL() != nil {
				bb.AddResource(wire.WrappedAny(res.Name, res.Any, res.TTL()))
			} else {
				bb.AddResource(res.Any)
			}
		}
		return wire.NewBody(bb.Finish(r.TypeURL))
	})
}

// superseded stops keeping the full-state bodies: the shard has a newer
// version (see keptBody.release). Called under Class.mu.
func (r *Response) superseded() {
	r.body.release()
	r.deltaFull.release()
	r.wrapped.release()
}

// Heartbeat is a TTL refresh of some resources of a shard version, from the
// upstream: not an update, so it changes no version. Immutable once shared,
// but for its bodies, built on first use.
type Heartbeat struct {
	// Read-only after creation.
	Response  *Response // the shard version whose resources are refreshed
	Resources []*Resource
	TTLs      [][]byte // the refreshed TTL of each resource

	// Accessed atomically: bodies built on first use by any stream.
	sotw, delta atomic.Pointer[wire.Body]
}

// SotWBody is the heartbeat as a SotW response (Resource wrappers without a
// resource, at the current version), encoded once.
func (h *Heartbeat) SotWBody() wire.Body {
	if p := h.sotw.Load(); p != nil {
		return *p
	}
	bb := wire.NewBodyBuilder(h.Response.Version, 64*len(h.Resources))
	for i, r := range h.Resources {
		bb.AddResource(wire.WrappedAny(r.Name, nil, h.TTLs[i]))
	}
	b := wire.NewBody(bb.Finish(h.Response.TypeURL))
	h.sotw.Store(&b)
	return b
}

// DeltaBody is the heartbeat as a delta response (Resources with name,
// version and TTL, without a resource), encoded once.
func (h *Heartbeat) DeltaBody() wire.Body {
	if p := h.delta.Load(); p != nil {
		return *p
	}
	db := wire.NewDeltaBodyBuilder(h.Response.Version, 64*len(h.Resources))
	for i, r := range h.Resources {
		db.AddEntry(wire.DeltaEntry(r.Name, r.Version(), r.Aliases(), nil, h.TTLs[i]))
	}
	b := wire.NewBody(db.Finish(h.Response.TypeURL))
	h.delta.Store(&b)
	return b
}

// Has reports whether the response carries the resource named (or aliased)
// name.
func (r *Response) Has(name string) bool {
	_, ok := r.Lookup(name)
	return ok
}

// KnownAbsent reports whether the named resource is known not to exist.
func (r *Response) KnownAbsent(name string) bool {
	if !r.AbsenceKnown || r.Has(name) {
		return false
	}
	_, unknown := slices.BinarySearch(r.Unknown, name)
	return !unknown
}

// Lookup returns the resource named (or aliased) name, if the response
// carries it.
func (r *Response) Lookup(name string) (*Resource, bool) {
	if i, ok := slices.BinarySearch(r.Names, name); ok {
		return r.Resources[i], true
	}
	if n, ok := r.Aliases[name]; ok {
		return r.Lookup(n)
	}
	return nil, false
}

// DeltaBody is the nonce-less DeltaDiscoveryResponse carrying the change from
// the previous version (HasPrev must be true): built on first use, then
// shared by every delta stream that held the previous version.
func (r *Response) DeltaBody() wire.Body {
	if p := r.deltaBody.Load(); p != nil {
		return *p
	}
	b := EncodeDelta(r.TypeURL, r.Version, r.Changed, r.Removed)
	r.deltaBody.Store(&b)
	return b
}

// DeltaFullBody is the nonce-less DeltaDiscoveryResponse carrying every
// resource of this version: built on first use, then shared by every delta
// stream that starts from nothing (a reconnect storm encodes it once), and
// with every shard, of any class, whose version encodes the same bytes;
// kept like Body.
func (r *Response) DeltaFullBody() wire.Body {
	return r.deltaFull.get(func() wire.Body { return deltaFullBodyOf(r) })
}

// EncodeDelta builds a nonce-less DeltaDiscoveryResponse from resources'
// shared entries and removed names.
func EncodeDelta(typeURL, systemVersion string, changed []*Resource, removed []string) wire.Body {
	size := 0
	entries := make([][]byte, len(changed))
	for i, res := range changed {
		entries[i] = res.DeltaEntry()
		size += len(entries[i])
	}
	for _, n := range removed {
		size += len(n) + 4
	}
	db := wire.NewDeltaBodyBuilder(systemVersion, size)
	for _, e := range entries {
		db.AddEntry(e)
	}
	for _, n := range removed {
		db.AddRemoved(n)
	}
	return wire.NewBody(db.Finish(typeURL))
}

// Watcher is told when a shard it subscribed to has a new response, and of
// TTL heartbeats for it. It is called with no class lock held, after the
// update that built the response released it, in the order the class's
// updates happened (one update's telling at a time, see tell.go); it must
// not block or call back into the class (the class's next update waits
// for it).
//
// Told outside the lock, a watcher must cope with two things:
//   - resp (or hb.Response) may no longer be s.Current(): a later update
//     rebuilt the shard meanwhile, and its telling follows. A watcher that
//     also reads Current itself (a new subscriber installing the shard)
//     must drop such a resp, or it would go back to an older response
//     after the newer one. Current only moves forward, so a watcher that
//     keeps resp only while it is Current sees a shard's responses in
//     order.
//   - it may be told after Unsubscribe or Leave returned, of a change
//     collected while it still watched s (those do not wait for a telling
//     in progress); it must ignore what is told of a shard it left.
type Watcher interface {
	ShardChanged(s *Shard, resp *Response)
	ShardHeartbeat(s *Shard, hb *Heartbeat)
}

// Shard is the state shared by all subscriptions of one (class, type URL,
// subscription): its current encoded response and its watchers.
type Shard struct {
	// Read-only after creation.
	Key     Key
	Class   *Class
	TypeURL string
	Sub     Subscription

	// Accessed atomically: stored under Class.mu, loaded by stream writers
	// without any lock.
	current atomic.Pointer[Response]

	// Guarded by Class.mu.
	watchers map[Watcher]struct{}
	// told is watchers as a slice, shared read-only by the tellings
	// collected since they last changed; nil when they changed since.
	told []Watcher
	// lingering is the shard's place in its class's linger queue while no
	// stream watches it since its last stream ended (see Class.Leave); nil
	// otherwise.
	lingering *list.Element
}

// Current returns the shard's latest response, or nil while the shard has
// nothing to send yet (the upstream has not answered for its type, or, for
// types without full-state semantics, none of its resources exist).
func (s *Shard) Current() *Response { return s.current.Load() }
