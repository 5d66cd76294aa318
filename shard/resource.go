package shard

import (
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// Resource is one resource as the upstream sent it: its name and its encoded
// google.protobuf.Any, kept as bytes and never re-marshaled. Immutable once
// shared; create it by address (&Resource{...}) or with NewResource.
//
// It is held once per distinct content for the whole relay (see
// ResourceStore), so its size is most of what a resource costs beyond its
// bytes: 80 bytes, what is rare (aliases, a TTL, an upstream version,
// more than one child) behind one pointer that is nil for a plain resource.
type Resource struct {
	// Read-only after creation (once handed to a class).
	Name string
	Any  []byte // encoded google.protobuf.Any; never written once the Resource exists
	Hash uint64 // dedup.ResourceHashFull(Any, TTL, Aliases), WithVersion(UpstreamVersion) if set
	// Rare holds what a plain SotW resource has none of; nil when it has
	// none (see NewRare).
	Rare *Rare
	// child is the one child name (see Children) when there is one.
	child string

	// Accessed atomically: built on first use by any stream.
	entry atomic.Pointer[[]byte] // the delta entry
}

// Rare is what few resources have. Read-only once its Resource is shared.
type Rare struct {
	Aliases []string // other names clients may subscribe to it by (delta upstreams)
	TTL     []byte   // encoded google.protobuf.Duration, nil when the upstream set none
	// UpstreamVersion is the upstream's version of the resource when the
	// relay passes upstream versions through (a delta upstream's
	// Resource.version; Hash then includes it); "" for the content hash.
	UpstreamVersion string
	// children are the resource's child names when there are more than one.
	children []string
	// refs are the Clusters the resource routes to (see References).
	refs []string
}

// NewRare returns the rare part of a resource with these aliases, TTL and
// upstream version: nil when it has none of them.
func NewRare(aliases []string, ttl []byte, upstreamVersion string) *Rare {
	if len(aliases) == 0 && ttl == nil && upstreamVersion == "" {
		return nil
	}
	return &Rare{Aliases: aliases, TTL: ttl, UpstreamVersion: upstreamVersion}
}

// NewResource returns the resource named name with the Any bytes anyBytes,
// which it keeps (the caller never writes them again), its hash, the rare
// part (nil when none), its children (see Children) and the Clusters it
// routes to (see References). Its name, children and references are
// strings sharing anyBytes where anyBytes contain them (a resource's name
// always, in its message's name field; a Cluster's EDS service name, a
// Listener's route config names, a route's cluster names), not allocations
// of their own.
//
// Sharing is safe: anyBytes are immutable from here on (Any is never
// written: a resource is read-only once created, and whoever made anyBytes
// hands them over), and a string into them keeps them alive as long as the
// string lives, as Go's collector follows interior pointers. What it costs:
// a name kept after its resource is gone keeps the resource's bytes, so
// what keeps names for long copies them (nameCache; a delta upstream
// stream's versions).
func NewResource(name string, anyBytes []byte, hash uint64, rare *Rare, children, refs []string) *Resource {
	s := unsafe.String(unsafe.SliceData(anyBytes), len(anyBytes))
	r := &Resource{Name: within(s, name), Any: anyBytes, Hash: hash, Rare: rare}
	if len(refs) > 0 {
		shared := make([]string, len(refs))
		for i, c := range refs {
			shared[i] = within(s, c)
		}
		if r.Rare == nil {
			r.Rare = &Rare{}
		}
		r.Rare.refs = shared
	}
	switch len(children) {
	case 0:
	case 1:
		r.child = within(s, children[0])
	default:
		shared := make([]string, len(children))
		for i, c := range children {
			shared[i] = within(s, c)
		}
		if r.Rare == nil {
			r.Rare = &Rare{}
		}
		r.Rare.children = shared
	}
	return r
}

// within returns a string equal to sub that is a part of s, or sub when s
// has none.
func within(s, sub string) string {
	if sub == "" {
		return ""
	}
	if i := strings.Index(s, sub); i >= 0 {
		return s[i : i+len(sub)]
	}
	return sub
}

// Aliases are the other names clients may subscribe to the resource by
// (delta upstreams); nil when none.
func (r *Resource) Aliases() []string {
	if r.Rare == nil {
		return nil
	}
	return r.Rare.Aliases
}

// TTL is the encoded google.protobuf.Duration the upstream set, nil when
// none.
func (r *Resource) TTL() []byte {
	if r.Rare == nil {
		return nil
	}
	return r.Rare.TTL
}

// UpstreamVersion is the upstream's version of the resource when passed
// through, "" for the content hash.
func (r *Resource) UpstreamVersion() string {
	if r.Rare == nil {
		return ""
	}
	return r.Rare.UpstreamVersion
}

// Children are the names of the resources of its type's Child
// (xdstype.Type) the resource refers to (a Cluster's EDS service name, a
// Listener's RDS route config names), recorded once per resource version by
// the source that decoded it; nil when none or not known. Read-only.
func (r *Resource) Children() []string {
	switch {
	case r.Rare != nil && r.Rare.children != nil:
		return r.Rare.children
	case r.child != "":
		// The record's own field as a one-element slice: it lives as long
		// as the slice does, and nothing writes it.
		return unsafe.Slice(&r.child, 1)
	}
	return nil
}

// References are the names of the Clusters the resource routes to (a
// RouteConfiguration's route actions; a Listener's inline routes and TCP
// proxies), recorded once per resource version by the source that decoded
// it; nil when none or not known. A client holding it is not told of such
// a Cluster's removal before it holds a version that no longer names it
// (relay's removal order). Read-only.
func (r *Resource) References() []string {
	if r.Rare == nil {
		return nil
	}
	return r.Rare.refs
}

// Plain reports whether the resource has none of what a SotW resource
// sent without a wrapper lacks: aliases, TTL, upstream version.
func (r *Resource) Plain() bool {
	return r.Rare == nil || r.Rare.TTL == nil && len(r.Rare.Aliases) == 0 && r.Rare.UpstreamVersion == ""
}

// withTTL is r with another TTL: another version of it, hashed anew.
func (r *Resource) withTTL(ttl []byte) *Resource {
	h := dedup.ResourceHashFull(r.Any, ttl, r.Aliases())
	if v := r.UpstreamVersion(); v != "" {
		h = dedup.WithVersion(h, v)
	}
	rare := &Rare{TTL: ttl}
	if r.Rare != nil {
		*rare = *r.Rare
		rare.TTL = ttl
	}
	if rare.TTL == nil && len(rare.Aliases) == 0 && rare.UpstreamVersion == "" && rare.children == nil && rare.refs == nil {
		rare = nil
	}
	return &Resource{Name: r.Name, Any: r.Any, Hash: h, Rare: rare, child: r.child}
}

// Version is the resource's version: its content hash, the same on every
// relay that received the same bytes; or the upstream's version when passed
// through.
func (r *Resource) Version() string {
	if v := r.UpstreamVersion(); v != "" {
		return v
	}
	return dedup.Version(r.Hash)
}

// DeltaEntry is the resource as one resources entry of a
// DeltaDiscoveryResponse, encoded once per resource version.
func (r *Resource) DeltaEntry() []byte {
	if p := r.entry.Load(); p != nil {
		return *p
	}
	e := wire.DeltaEntry(r.Name, r.Version(), r.Aliases(), r.Any, r.TTL())
	r.entry.Store(&e)
	return e
}
