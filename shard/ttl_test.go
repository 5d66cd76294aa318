package shard

import (
	"testing"

	"github.com/xds-relay/xds-relay/dedup"
)

func resTTL(name, content, ttl string) *Resource {
	b := []byte(name + "=" + content)
	t := []byte(ttl)
	return &Resource{Name: name, Any: b, Rare: NewRare(nil, t, ""), Hash: dedup.ResourceHashFull(b, t, nil)}
}

// A TTL change is a change of the resource; a heartbeat is not, and reaches
// the watchers of shards holding the resource at the current version.
func TestTTLAndHeartbeats(t *testing.T) {
	c, _ := newTestClass(t)
	w := &recorder{}
	all := c.Subscribe(ClusterType, NewSubscription(nil, true), w)
	other := c.Subscribe(ClusterType, NewSubscription([]string{"y"}, false), w)
	c.Apply(ClusterType, []*Resource{resTTL("x", "1", "30s"), res("y", "1")}, true)
	v1 := all.Current()
	if !v1.HasTTL || string(v1.WrappedBody().Bytes()) == string(v1.Body().Bytes()) {
		t.Fatal("a response with a TTL resource has no distinct wrapped body")
	}
	if o := other.Current(); o.HasTTL || string(o.WrappedBody().Bytes()) != string(o.Body().Bytes()) {
		t.Fatal("a response without TTLs must wrap nothing")
	}
	w.take()

	c.Apply(ClusterType, []*Resource{resTTL("x", "1", "60s"), res("y", "1")}, true)
	if all.Current().Version == v1.Version {
		t.Fatal("a new TTL did not make a new version")
	}
	w.take()

	// A heartbeat-only full-state update keeps x, changes no version, and
	// is forwarded only to the shard holding x.
	v2 := all.Current()
	c.ApplyUpdate(ClusterType, Update{Resources: []*Resource{res("y", "1")}, Heartbeats: []HeartbeatEntry{{Name: "x", TTL: []byte("60s")}}, Kind: UpdateFull})
	if all.Current() != v2 {
		t.Fatal("a heartbeat changed the shard's version (or replace deleted x)")
	}
	if len(w.take()) != 0 {
		t.Fatal("a heartbeat was notified as a change")
	}
	if len(w.beats) != 1 || w.beats[0].Response != v2 || len(w.beats[0].Resources) != 1 || w.beats[0].Resources[0].Name != "x" {
		t.Fatalf("heartbeats = %+v, want one for x at the current version", w.beats)
	}
	if w.beats[0].SotWBody().Len() == 0 || w.beats[0].DeltaBody().Len() == 0 {
		t.Fatal("heartbeat bodies are empty")
	}
}
