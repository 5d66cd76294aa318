package shard

import (
	"bytes"
	"slices"
)

// ResourceStore holds the resources of every class once per content (package
// shard/store implements it). A table acquires each resource it installs
// and releases it when it drops or replaces it, or when its class is freed;
// Acquire returns the held resource of the same content, which the table
// installs instead. The store's lock is taken under Class.mu and calls
// nothing back. Safe for concurrent use.
type ResourceStore interface {
	// Lookup returns the held resource whose content is this one (see
	// Resource.Same), or nil. It takes no reference: a resource found may
	// be released by its last user before it is acquired.
	// The name is bytes, so that a caller holding them finds the resource
	// without allocating.
	Lookup(hash uint64, name []byte, anyBytes, ttl []byte, aliases []string, upstreamVersion string) *Resource
	// LookupPlain sets out[i] to the held plain resource (see
	// Resource.Plain) whose Hash is hashes[i] and whose Any is raws[i],
	// byte for byte, leaving out[i] as it is when none is held, and returns
	// how many it found. A SotW resource sent plain is found by its bytes
	// alone: they hold its name. Like Lookup, it takes no reference.
	LookupPlain(hashes []uint64, raws [][]byte, out []*Resource) (found int)
	// Acquire takes a reference on the held resource of r's content,
	// holding r if there is none, and returns it.
	Acquire(r *Resource) *Resource
	// Release returns a reference Acquire took; the store forgets the
	// resource with its last reference.
	Release(r *Resource)
}

// Same reports whether r has this content: the same name, Any and TTL
// bytes, aliases and upstream version. Its Hash is derived from them, so
// equal content has equal hashes, but equal hashes do not make equal content.
func (r *Resource) Same(name string, anyBytes, ttl []byte, aliases []string, upstreamVersion string) bool {
	return r.Name == name && r.SameContent(anyBytes, ttl, aliases, upstreamVersion)
}

// SameContent is Same but for the name.
func (r *Resource) SameContent(anyBytes, ttl []byte, aliases []string, upstreamVersion string) bool {
	return r.UpstreamVersion() == upstreamVersion && bytes.Equal(r.Any, anyBytes) &&
		bytes.Equal(r.TTL(), ttl) && slices.Equal(r.Aliases(), aliases)
}

// sameAs reports whether r and o have the same content.
func (r *Resource) sameAs(o *Resource) bool {
	return r == o || r.Hash == o.Hash && r.Same(o.Name, o.Any, o.TTL(), o.Aliases(), o.UpstreamVersion())
}

// SetStore makes every class created from then on hold its resources in s
// (call it before any class exists). Without it each class holds its own.
func (r *Registry) SetStore(s ResourceStore) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.store = s
}

// Store returns the store the class holds its resources in, nil when none:
// a source finds there the resources it need not decode again.
func (c *Class) Store() ResourceStore { return c.store }

// hold takes a reference on r for the table (see ResourceStore) and returns
// the resource to install.
func (t *table) hold(r *Resource) *Resource {
	if t.store == nil {
		return r
	}
	return t.store.Acquire(r)
}

// unhold returns the table's reference on r.
func (t *table) unhold(r *Resource) {
	if t.store != nil {
		t.store.Release(r)
	}
}

// unholdAll returns the references of every resource of the table, which
// is dropped.
func (t *table) unholdAll() {
	for r := range t.resources.all {
		t.unhold(r)
	}
	t.resources.clear()
	clear(t.aliases)
}
