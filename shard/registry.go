package shard

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

func keyString(k Key) string { return fmt.Sprintf("%016x", uint64(k)) }

// Registry holds the node classes. Classes live as long as the registry: their
// number is bounded by the operator's rules, and keeping them keeps their
// upstream state warm for clients that reconnect.
type Registry struct {
	// Set at construction, read-only.
	classifier *Classifier
	// newClass is called once per class, under mu, right after the class is
	// created and before any stream can subscribe to it; it returns the
	// class's interest hook (typically an upstream stream's wake-up). It must
	// not block or call back into the registry.
	newClass func(*Class) func(typeURL string)

	mu       sync.Mutex
	classes  map[string]*Class // guarded by mu
	onFanout FanoutObserver    // guarded by mu; copied into each class
	limits   Limits            // guarded by mu; copied into each class
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

// NewRegistry returns a registry classifying nodes with c. start is called for
// each new class and returns the hook told about interest changes.
func NewRegistry(c *Classifier, start func(*Class) func(typeURL string)) *Registry {
	return &Registry{classifier: c, newClass: start, classes: map[string]*Class{}}
}

// Classify returns the node's class name without creating the class.
func (r *Registry) Classify(node *corev3.Node) string { return r.classifier.Classify(node) }

// ClassFor returns the node's class, creating it on the node's first visit.
func (r *Registry) ClassFor(node *corev3.Node) *Class {
	name := r.classifier.Classify(node)
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.classes[name]; ok {
		return c
	}
	c := newClass(name, node, nil)
	c.onFanout = r.onFanout
	c.limits = r.limits
	if r.newClass != nil {
		if hook := r.newClass(c); hook != nil {
			c.onInterest = hook
		}
	}
	r.classes[name] = c
	return c
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
