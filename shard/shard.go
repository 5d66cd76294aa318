package shard

import (
	"slices"
	"sync/atomic"
)

// Resource is one resource as the upstream sent it: its name and its encoded
// google.protobuf.Any, kept as bytes and never re-marshaled. Immutable.
type Resource struct {
	Name string
	Any  []byte // encoded google.protobuf.Any
	Hash uint64 // dedup.ResourceHash(Any)
}

// Response is one version of a shard's DiscoveryResponse, encoded once and
// shared read-only by every stream of the shard. Immutable.
type Response struct {
	Version string
	Sum     uint64   // content hash Version is rendered from
	Body    []byte   // DiscoveryResponse without nonce (see wire.BodyBuilder)
	Names   []string // names of the resources in Body, sorted
}

// Has reports whether the response carries the named resource.
func (r *Response) Has(name string) bool {
	_, ok := slices.BinarySearch(r.Names, name)
	return ok
}

// Watcher is told when a shard it subscribed to has a new response. It is
// called with the class lock held, in the order the class's updates happened,
// and must not block or call back into the class.
type Watcher interface {
	ShardChanged(*Shard)
}

// Shard is the state shared by all subscriptions of one (class, type URL,
// subscription): its current encoded response and its watchers.
type Shard struct {
	// Set at construction, read-only.
	Key     Key
	Class   *Class
	TypeURL string
	Sub     Subscription

	// Atomic: read by stream writers without any lock.
	current atomic.Pointer[Response]

	// Guarded by Class.mu.
	watchers map[Watcher]struct{}
}

// Current returns the shard's latest response, or nil while the shard has
// nothing to send yet (the upstream has not answered for its type, or, for
// types without full-state semantics, none of its resources exist).
func (s *Shard) Current() *Response { return s.current.Load() }
