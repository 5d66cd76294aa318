package shard

import (
	"hash/maphash"
	"runtime"
	"slices"
	"strings"
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
// use; its lock is a leaf lock, taken under Class.mu.
type nameCache struct {
	seed maphash.Seed // read-only
	m    weakMap[nameKey, weak.Pointer[nameList]]
}

// nameLists is the process-wide name list cache.
var nameLists = &nameCache{seed: maphash.MakeSeed()}

// share returns the list of sorted (which it may keep and rewrite) held
// under its key, or sorted's own, which it caches. A list it caches holds
// copies of the names, in one block: a resource's name shares its bytes
// (NewResource), and a list lives on for as long as the names stay, past
// every version of the resources it was made from.
func (c *nameCache) share(sorted []string) *nameList {
	var h maphash.Hash
	h.SetSeed(c.seed)
	for _, n := range sorted {
		h.WriteString(n)
		h.WriteByte(0) // an ambiguous NUL in a name costs a miss: hits are checked
	}
	k := nameKey{n: len(sorted), sum: h.Sum64()}
	w, _ := c.m.get(k)
	if l := w.Value(); l != nil && slices.Equal(l.names, sorted) { // outside the lock
		return l
	}
	ownNames(sorted)
	l := &nameList{names: sorted, slots: slotsOf(c.seed, sorted)}
	var shared *nameList
	e, kept := c.m.put(k, weak.Make(l), func(cur weak.Pointer[nameList]) bool {
		// Another table made the same list meanwhile (rare: checked under
		// the lock).
		shared = cur.Value()
		return shared != nil && shared != w.Value() && slices.Equal(shared.names, sorted)
	})
	if kept {
		return shared
	}
	runtime.AddCleanup(l, c.m.forget, e)
	return l
}

// ownNames makes names copies of themselves, in one allocation.
func ownNames(names []string) {
	size := 0
	for _, n := range names {
		size += len(n)
	}
	var b strings.Builder
	b.Grow(size)
	for _, n := range names {
		b.WriteString(n)
	}
	block, at := b.String(), 0
	for i, n := range names {
		names[i] = block[at : at+len(n)]
		at += len(n)
	}
}

// cached reports whether the list of these names has an entry (tests).
func (c *nameCache) cached(sorted []string) bool {
	return c.m.any(func(k nameKey, w weak.Pointer[nameList]) bool {
		l := w.Value()
		return k.n == len(sorted) && l != nil && slices.Equal(l.names, sorted)
	})
}
