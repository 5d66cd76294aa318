package shard

import corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

// Shortcuts for this package's tests only; other packages use the API
// (NewRegistryWith, Acquire, TrySubscribe).

// NewRegistry is NewRegistryWith without a lifecycle: classes are never
// dropped.
func NewRegistry(c *Classifier, start func(*Class) func(typeURL string)) *Registry {
	return NewRegistryWith(c, start, Lifecycle{})
}

// ClassFor returns the node's class without holding a lease on it (nil
// when the class would exceed MaxClasses).
func (r *Registry) ClassFor(node *corev3.Node) *Class {
	c, err := r.Acquire(node)
	if err != nil {
		return nil
	}
	r.Release(c)
	return c
}

// Subscribe is TrySubscribe without the class's Limits, so a test can put
// a class past them.
func (c *Class) Subscribe(typeURL string, sub Subscription, w Watcher) *Shard {
	s, _ := c.subscribe(typeURL, sub, w, false)
	return s
}
