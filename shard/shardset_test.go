package shard

import (
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// A name in one shard costs the shard table its byName entry and nothing
// more: subscribing a shard of many names allocates far fewer times than
// once per name (with a map per name's shard set it was at least once).
func TestShardTableNoAllocationPerName(t *testing.T) {
	const n = 10000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("cluster-%05d", i)
	}
	sub := NewSubscription(names, false)
	allocs := testing.AllocsPerRun(3, func() {
		reg := NewRegistry(mustClassifier(t, nil), func(*Class) func(string) { return func(string) {} })
		reg.ClassFor(&corev3.Node{Id: "n", Cluster: "c"}).Subscribe(edsType, sub, &recorder{})
	})
	if allocs >= n/10 {
		t.Fatalf("subscribing %d names allocated %.0f times, want under %d", n, allocs, n/10)
	}
}

// A set goes inline at one member, a map past it, and back.
func TestShardSetMembers(t *testing.T) {
	a, b, c := &Shard{}, &Shard{}, &Shard{}
	members := func(x shardSet) int { m := map[*Shard]struct{}{}; x.addTo(m); return len(m) }
	x := shardSet{}.with(a).with(a)
	if x.many != nil || members(x) != 1 {
		t.Fatalf("one member twice: %+v", x)
	}
	x = x.with(b).with(c)
	if members(x) != 3 {
		t.Fatalf("%d members, want 3", members(x))
	}
	x = x.without(b).without(c)
	if x.many != nil || x.one != a {
		t.Fatalf("one member left, not inline: %+v", x)
	}
	if x = x.without(b); x.empty() {
		t.Fatal("removing a non-member emptied the set")
	}
	if x = x.without(a); !x.empty() {
		t.Fatalf("not empty after its last member left: %+v", x)
	}
}
