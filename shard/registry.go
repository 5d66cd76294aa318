package shard

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

func keyString(k Key) string { return fmt.Sprintf("%016x", uint64(k)) }

// Lifecycle bounds how long and how many classes live (see Registry).
type Lifecycle struct {
	// Linger is how long a class whose streams all left keeps its shards,
	// upstream subscription and state before it is dropped whole, and how
	// long a shard left by its last stream's end lingers with its upstream
	// interest (Class.Leave). Zero or less: classes are never dropped
	// (they live as long as the registry), and an ended stream's shards go
	// at once.
	Linger time.Duration
	// MaxClasses bounds the classes; a node that would create one more is
	// refused (MaxClassesError) unless a lingering class can be evicted.
	// Zero or less: no bound.
	MaxClasses int
	// Drop is called for each dropped class, outside the registry lock,
	// after the class left the registry and before its tables are freed: it
	// stops the class's source (upstream stream) and waits for it.
	Drop func(*Class)
}

// MaxClassesError is the error of a node that would create one class more than
// Lifecycle.MaxClasses while none lingers.
type MaxClassesError struct{ Max int }

func (e *MaxClassesError) Error() string {
	return fmt.Sprintf("limits.max_classes: xds-relay holds its limit of %d node classes, all in use; this node's class is refused", e.Max)
}

// Registry holds the node classes.
//
// A class lives while streams hold a lease on it (Acquire/Release). When the
// last lease is released the class lingers: it keeps its shards (even those
// no stream watches), its upstream subscription and its state, so clients
// reconnecting in a rolling restart are answered from memory and the
// upstream is not churned. If no stream comes back within the linger the
// class is dropped whole; a later node of that class makes a new class, with
// a fresh upstream stream. If streams came back, the shards that stayed
// unwatched are removed when the linger ends.
//
// Lock order: Registry.mu, then Class.mu (taken under it to mark a class idle
// or sweep it). A class is dropped (its source detached, which waits for the
// class's upstream stream) with no lock held.
type Registry struct {
	// Read-only after creation.
	classifier *Classifier
	// newClass is called once per class, under mu, right after the class is
	// created and before any stream can subscribe to it; it returns the
	// class's interest hook (typically an upstream stream's wake-up). It must
	// not block or call back into the registry.
	newClass func(*Class) func(typeURL string)
	life     Lifecycle

	// Guarded by mu.
	mu       sync.Mutex
	classes  map[string]*Class
	onFanout FanoutObserver // copied into each class
	closed   bool           // no more linger timers
	limits   Limits         // copied into each class
	store    ResourceStore  // copied into each class
	// wildcardScope: copied into each class (SetWildcardScope).
	wildcardScope WildcardScope
	// onUnavailable: copied into each class (OnUpstreamUnavailable).
	onUnavailable []UnavailableHook

	// drops counts drops in progress: Add under mu while !closed, Done by
	// the dropping goroutine; Close waits for it.
	drops sync.WaitGroup

	// Atomic: the ended lingers of every class's shards, dropped classes'
	// included.
	lingers lingerCounts
}

// SetClassLimits sets the limits of every class created from then on (call
// it before any class exists).
func (r *Registry) SetClassLimits(l Limits) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.limits = l
}

// ObserveFanout sets the function told, per update, how long it took from
// the upstream to the last stream of each shard (a histogram, typically).
// Call it before any class exists; it must be cheap and concurrency-safe.
func (r *Registry) ObserveFanout(f FanoutObserver) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onFanout = f
}

// Counts returns the number of classes and of shards (for gauges).
func (r *Registry) Counts() (classes, shards int) {
	for _, c := range r.Classes() {
		shards += c.shardCount()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.classes), shards
}

// Lingers returns how many shards linger now (Class.Leave), over every
// class, and how many lingers ended since the registry was made, by
// outcome (for gauges and counters).
func (r *Registry) Lingers() LingerStats {
	var st LingerStats
	for _, c := range r.Classes() {
		st.Lingering += c.LingeringShards()
	}
	for o := range st.Ended {
		st.Ended[o] = r.lingers[o].Load()
	}
	return st
}

// NewRegistryWith returns a registry classifying nodes with c, whose
// classes live as life says (the zero Lifecycle: never dropped, no bound).
// start is called for each new class and returns the hook told about
// interest changes.
func NewRegistryWith(c *Classifier, start func(*Class) func(typeURL string), life Lifecycle) *Registry {
	return &Registry{classifier: c, newClass: start, life: life, classes: map[string]*Class{}}
}

// Classify returns the node's class name without creating the class.
func (r *Registry) Classify(node *corev3.Node) string { return r.classifier.Classify(node) }

// Has reports whether the class named name exists (lingering or in use):
// an Acquire of its nodes would not create one.
func (r *Registry) Has(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.classes[name]
	return ok
}

// Acquire returns the node's class with a lease on it, creating the class on
// the node's first visit (or the first after it was dropped). The caller
// must Release it once, before it unsubscribes its shards (so that a class
// left by its last stream keeps them). A class that would exceed MaxClasses
// evicts the class that has lingered longest; with none, Acquire fails with
// *MaxClassesError.
func (r *Registry) Acquire(node *corev3.Node) (*Class, error) {
	name := r.classifier.Classify(node)
	var evicted *Class
	defer func() {
		if evicted != nil {
			r.drop(evicted)
		}
	}()
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.classes[name]; ok {
		r.leaseLocked(c)
		return c, nil
	}
	if max := r.life.MaxClasses; max > 0 && len(r.classes) >= max {
		if evicted = r.longestIdleLocked(); evicted == nil || r.closed {
			evicted = nil
			return nil, &MaxClassesError{Max: max}
		}
		r.removeLocked(evicted)
		r.drops.Add(1)
	}
	c := newClass(name, node, nil)
	c.onFanout = r.onFanout
	c.limits = r.limits
	c.store = r.store
	c.wildcardScope = r.wildcardScope
	c.onUnavailable = r.onUnavailable
	c.shardLinger = max(r.life.Linger, 0)
	c.lingering.counts = &r.lingers
	if r.newClass != nil {
		if hook := r.newClass(c); hook != nil {
			c.onInterest = hook
		}
	}
	r.classes[name] = c
	r.leaseLocked(c)
	return c, nil
}

// Release returns a lease taken by Acquire. The last lease starts the
// class's linger.
func (r *Registry) Release(c *Class) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.leases--; c.leases > 0 || c.dropped {
		return
	}
	c.idleSince = time.Now()
	if r.life.Linger <= 0 {
		return // kept for good (but evictable under MaxClasses)
	}
	c.mu.Lock()
	c.idle = true
	c.mu.Unlock()
	if c.linger == nil && !r.closed {
		c.linger = time.AfterFunc(r.life.Linger, func() { r.lingerEnded(c) })
	}
}

// leaseLocked takes a lease on c (mu held): a lingering class is in use
// again.
func (r *Registry) leaseLocked(c *Class) {
	c.leases++
	if c.leases == 1 {
		c.mu.Lock()
		c.idle = false
		c.mu.Unlock()
	}
}

// lingerEnded runs on the linger timer: it drops a class still idle for
// the whole linger, or sweeps the shards left unwatched by a class whose
// streams came back. It re-arms the timer for a class that went idle again
// since.
func (r *Registry) lingerEnded(c *Class) {
	r.mu.Lock()
	c.linger = nil
	if c.dropped || r.closed {
		r.mu.Unlock()
		return
	}
	if c.leases > 0 {
		c.sweep()
		r.mu.Unlock()
		return
	}
	if left := r.life.Linger - time.Since(c.idleSince); left > 0 {
		c.linger = time.AfterFunc(left, func() { r.lingerEnded(c) })
		r.mu.Unlock()
		return
	}
	r.removeLocked(c)
	r.drops.Add(1)
	r.mu.Unlock()
	r.drop(c)
}

// longestIdleLocked returns the lingering class idle the longest, or nil
// (mu held).
func (r *Registry) longestIdleLocked() *Class {
	var oldest *Class
	for _, c := range r.classes {
		if c.leases == 0 && (oldest == nil || c.idleSince.Before(oldest.idleSince)) {
			oldest = c
		}
	}
	return oldest
}

// removeLocked takes c out of the registry (mu held): no stream can acquire
// it any more; a node of its class makes a new one.
func (r *Registry) removeLocked(c *Class) {
	delete(r.classes, c.Name)
	c.dropped = true
	if c.linger != nil {
		c.linger.Stop()
		c.linger = nil
	}
}

// drop stops a removed class's source and frees its state (mu not held;
// r.drops counts it).
func (r *Registry) drop(c *Class) {
	defer r.drops.Done()
	if r.life.Drop != nil {
		r.life.Drop(c)
	}
	c.free()
}

// Close stops the linger timers (the classes' and their shards') and waits
// for drops in progress; classes are no longer dropped, lingering shards no
// longer removed.
func (r *Registry) Close() {
	r.mu.Lock()
	r.closed = true
	for _, c := range r.classes {
		if c.linger != nil {
			c.linger.Stop()
			c.linger = nil
		}
		c.mu.Lock()
		c.lingering.stop(false)
		c.mu.Unlock()
	}
	r.mu.Unlock()
	r.drops.Wait()
}

// Classes returns the classes, sorted by name.
func (r *Registry) Classes() []*Class {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Class, 0, len(r.classes))
	for _, name := range slices.Sorted(maps.Keys(r.classes)) {
		out = append(out, r.classes[name])
	}
	return out
}

// sweep removes the shards no stream watches (left while the class
// lingered), narrowing the upstream interest; a shard still in its own
// linger (Leave) is left to it. Called with Registry.mu held.
func (c *Class) sweep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for typeURL, t := range c.tables {
		changed := false
		for _, list := range t.shards {
			for _, s := range slices.Clone(list) {
				if len(s.watchers) == 0 && s.lingering == nil && t.remove(s) {
					changed = true
				}
			}
		}
		if changed {
			c.onInterest(typeURL)
		}
		c.freeIfIdle(t)
	}
}

// free forgets a dropped class's tables and shards (its source is stopped)
// and releases their resources. A stream still unsubscribing finds nothing
// to do.
func (c *Class) free() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lingering.stop(true)
	for _, t := range c.tables {
		t.unholdAll()
		t.stopTimers()
	}
	clear(c.tables)
	c.freed = true
}
