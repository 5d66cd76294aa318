package shard

import (
	"hash/maphash"
	"runtime"
	"slices"
	"sync"
	"weak"
)

// nameList is a sorted list of resource names and their hash slots (see
// slotsOf), shared read-only by every table (of any class) that holds
// resources of exactly these names, and by their wildcard shards'
// responses (Response.Names). A pointer, so that it has an identity to
// refer to weakly.
type nameList struct {
	names []string
	slots []int32
}

// nameKey is what a name list is found by: its length and a hash of its
// names. A hit is checked name by name before it is shared.
type nameKey struct {
	n   int
	sum uint64
}

// nameCache shares the sorted name lists of tables: 20 classes whose
// resources have the same names (another cluster's content under each
// name, say) hold one list, not 20. Held weakly, like bodyCache: a list
// lives as long as a table (or a response) holds it. Safe for concurrent
// use; mu is a leaf lock, taken under Class.mu.
type nameCache struct {
	seed maphash.Seed // read-only
	mu   sync.Mutex
	m    map[nameKey]weak.Pointer[nameList] // guarded by mu
}

// nameLists is the process-wide name list cache.
var nameLists = &nameCache{seed: maphash.MakeSeed(), m: map[nameKey]weak.Pointer[nameList]{}}

// nameEntry is what a list's cleanup needs to forget it.
type nameEntry struct {
	key  nameKey
	weak weak.Pointer[nameList]
}

// share returns the list of sorted (which it may keep) held under its key,
// or sorted's own, which it caches.
func (c *nameCache) share(sorted []string) *nameList {
	var h maphash.Hash
	h.SetSeed(c.seed)
	for _, n := range sorted {
		h.WriteString(n)
		h.WriteByte(0) // an ambiguous NUL in a name costs a miss: hits are checked
	}
	k := nameKey{n: len(sorted), sum: h.Sum64()}
	c.mu.Lock()
	w := c.m[k]
	c.mu.Unlock()
	if l := w.Value(); l != nil && slices.Equal(l.names, sorted) { // outside the lock
		return l
	}
	l := &nameList{names: sorted, slots: slotsOf(c.seed, sorted)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.m[k].Value(); cur != nil && cur != w.Value() && slices.Equal(cur.names, sorted) {
		return cur // another table made the same list meanwhile (rare)
	}
	// A collision (or a dead entry) is replaced: its list stays valid for
	// whoever holds it, and its cleanup leaves this entry.
	e := nameEntry{key: k, weak: weak.Make(l)}
	c.m[k] = e.weak
	runtime.AddCleanup(l, c.forget, e)
	return l
}

// forget removes e's entry unless another list has taken its key since.
func (c *nameCache) forget(e nameEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[e.key] == e.weak {
		delete(c.m, e.key)
	}
}

// cached reports whether the list of these names has an entry (tests).
func (c *nameCache) cached(sorted []string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, w := range c.m {
		if l := w.Value(); k.n == len(sorted) && l != nil && slices.Equal(l.names, sorted) {
			return true
		}
	}
	return false
}
