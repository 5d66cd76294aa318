package upstream

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/xds-relay/xds-relay/shard"
)

// attachClass returns node's class in a registry of its own, whose classes
// c's streams serve. The class is never dropped.
func attachClass(t testing.TB, c *Client, node *corev3.Node) *shard.Class {
	t.Helper()
	cl, err := shard.NewClassifier(nil)
	if err != nil {
		t.Fatal(err)
	}
	class, err := shard.NewRegistryWith(cl, c.Attach, shard.Lifecycle{}).Acquire(node)
	if err != nil {
		t.Fatal(err)
	}
	return class
}

// subscribe subscribes w to class's shard for (typeURL, sub).
func subscribe(t testing.TB, class *shard.Class, typeURL string, sub shard.Subscription, w shard.Watcher) *shard.Shard {
	t.Helper()
	sh, err := class.TrySubscribe(typeURL, sub, w)
	if err != nil {
		t.Fatal(err)
	}
	return sh
}
