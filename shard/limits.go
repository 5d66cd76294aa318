package shard

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Limits bound a class's union subscription, so that what its upstream
// stream asks for stays within what the upstream accepts whatever its
// clients subscribe to: each client is within its own per-request limits,
// but their union is the class's. Zero fields are no limit.
type Limits struct {
	// MaxNamesPerType bounds the names in the union of one type URL.
	MaxNamesPerType int
	// MaxTypes bounds the type URLs the class's shards subscribe to: each
	// is one more type on the upstream stream.
	MaxTypes int
	// MaxRequestBytes bounds the estimated size of the upstream request
	// subscribing to one type's union (see requestBytes).
	MaxRequestBytes int
	// IncrementalUpstream: the upstream speaks delta, whose first request of
	// a type after a reconnect names each resource twice (to subscribe, and
	// with its version in initial_resource_versions).
	IncrementalUpstream bool
}

// The limits' configuration keys, named by LimitError.
const (
	LimitNamesPerType = "limits.max_class_names_per_type"
	LimitTypes        = "limits.max_class_types"
	LimitRequestBytes = "limits.max_upstream_request_bytes"
)

// LimitError is a subscription refused because it would push its class past
// one of its Limits; the class is left as it was.
type LimitError struct {
	Limit   string // the configuration key: LimitNamesPerType, LimitTypes or LimitRequestBytes
	Class   string
	TypeURL string
	Want    int // what the class would reach
	Max     int
}

func (e *LimitError) Error() string {
	switch e.Limit {
	case LimitTypes:
		return fmt.Sprintf("%s: node class %q would subscribe to %d type URLs upstream, the limit is %d", e.Limit, e.Class, e.Want, e.Max)
	case LimitRequestBytes:
		return fmt.Sprintf("%s: node class %q's upstream request for %s would be about %d bytes, the limit is %d", e.Limit, e.Class, e.TypeURL, e.Want, e.Max)
	}
	return fmt.Sprintf("%s: node class %q would subscribe to %d names of %s upstream, the limit is %d", e.Limit, e.Class, e.Want, e.TypeURL, e.Max)
}

// Estimated parts of an upstream request besides its names, node and type
// URL: the version, the nonce and a NACK's error detail.
const requestOverhead = 4096

// deltaVersionBytes is what the estimate allows for a resource's version in
// a delta request's initial_resource_versions (a SHA-256 in hex, as
// go-control-plane makes them).
const deltaVersionBytes = 64

// nameBytes is what a name adds to a repeated string field, without its tag.
func nameBytes(n string) int { return protowire.SizeBytes(len(n)) }

// requestBytes estimates the size of the upstream request subscribing to a
// union of names names whose nameBytes sum to payload (plus the wildcard):
// the names, the type URL, the node (sent on a stream's first request,
// whichever type that is) and requestOverhead. For a delta upstream each
// name is counted in resource_names_subscribe and again as a map entry of
// initial_resource_versions with a deltaVersionBytes version.
func requestBytes(typeURL string, nodeBytes, names, payload int, wildcard bool) (sotw, delta int) {
	base := protowire.SizeBytes(len(typeURL)) + 1 + protowire.SizeBytes(nodeBytes) + 1 + requestOverhead
	if wildcard {
		base += nameBytes(Wildcard) + 1
	}
	sotw = base + payload + names
	entry := protowire.SizeBytes(deltaVersionBytes) + 1 + 1 // the value, and the key's tag
	delta = base + 2*(payload+names) + names*(protowire.SizeBytes(entry)+1+entry)
	return sotw, delta
}

// admit checks that a new shard subscribing to sub of typeURL (whose table
// t may be nil: nothing of the type exists yet) keeps the class within its
// limits; liveOnly: counting only the shards that do not linger (see
// admitEvicting). Called with c.mu held, before anything is changed.
func (c *Class) admit(t *table, typeURL string, sub Subscription, liveOnly bool) *LimitError {
	l := c.limits
	if l == (Limits{}) {
		return nil
	}
	if l.MaxTypes > 0 && (t == nil || !t.hasShards(liveOnly)) {
		n := 1
		for _, o := range c.tables {
			if o.hasShards(liveOnly) {
				n++
			}
		}
		if n > l.MaxTypes {
			return &LimitError{Limit: LimitTypes, Class: c.Name, TypeURL: typeURL, Want: n, Max: l.MaxTypes}
		}
	}
	u := t.union(liveOnly)
	names, payload, wildcard := u.names, u.payload, sub.Wildcard || u.wildcard
	for _, n := range sub.Names {
		if !u.has(n) {
			names++
			payload += nameBytes(n)
		}
	}
	if l.MaxNamesPerType > 0 && names > l.MaxNamesPerType {
		return &LimitError{Limit: LimitNamesPerType, Class: c.Name, TypeURL: typeURL, Want: names, Max: l.MaxNamesPerType}
	}
	if l.MaxRequestBytes > 0 {
		size, delta := requestBytes(typeURL, c.nodeBytes, names, payload, wildcard)
		if l.IncrementalUpstream {
			size = delta
		}
		if size > l.MaxRequestBytes {
			return &LimitError{Limit: LimitRequestBytes, Class: c.Name, TypeURL: typeURL, Want: size, Max: l.MaxRequestBytes}
		}
	}
	return nil
}
