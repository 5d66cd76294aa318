package shard

import "sync"

// weakMap is the index of a cache of shared immutable values (bodies, name
// lists) held weakly: a key's entry is W, a weak reference, and the value's
// collection cleanup calls forget with the entry put returned. Safe for
// concurrent use; mu is a leaf lock.
type weakMap[K, W comparable] struct {
	mu sync.Mutex
	m  map[K]W // guarded by mu
}

// weakEntry is what a value's cleanup needs to forget it: its key, and the
// weak reference the map holds for it (not the value, which it must not
// keep alive).
type weakEntry[K, W comparable] struct {
	key  K
	weak W
}

// get returns k's entry, if any.
func (c *weakMap[K, W]) get(k K) (W, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.m[k]
	return w, ok
}

// put makes w k's entry and returns it for the value's cleanup, unless
// k's current entry is one keep accepts (keep runs under the lock, and may
// take the value it refers to). A collision (or a dead entry) is
// replaced: the value it referred to stays valid for whoever holds it,
// and its cleanup leaves w.
func (c *weakMap[K, W]) put(k K, w W, keep func(W) bool) (e weakEntry[K, W], kept bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.m[k]; ok && keep(cur) {
		return e, true
	}
	if c.m == nil {
		c.m = map[K]W{}
	}
	c.m[k] = w
	return weakEntry[K, W]{key: k, weak: w}, false
}

// forget removes e's entry unless another value has taken its key since.
func (c *weakMap[K, W]) forget(e weakEntry[K, W]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[e.key] == e.weak {
		delete(c.m, e.key)
	}
}

// any reports whether some entry satisfies f (tests).
func (c *weakMap[K, W]) any(f func(K, W) bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, w := range c.m {
		if f(k, w) {
			return true
		}
	}
	return false
}
