package shard

import (
	"slices"
	"testing"
)

// While a wildcard requested anew is unanswered (the upstream relay
// restarts its SotW stream to ask for it), a full-state shard subscribing
// by name to something the class does not hold must not be served without
// it: the wildcard's answer will say whether it exists, and an answer
// without it would tell a client holding it that it was deleted.
func TestNamedShardWaitsForPendingWildcard(t *testing.T) {
	c, _ := newTestClass(t)
	w := &recorder{}
	one := c.Subscribe(ClusterType, NewSubscription([]string{"x"}, false), w)
	c.Requested(ClusterType, c.Interest(ClusterType), false)
	c.Apply(ClusterType, []*Resource{res("x", "1")}, true)
	c.Subscribe(ClusterType, NewSubscription(nil, true), w)
	c.Requested(ClusterType, Subscription{Wildcard: true}, false) // the legacy wildcard, alone
	late := c.Subscribe(ClusterType, NewSubscription([]string{"x", "y"}, false), w)
	if r := late.Current(); r != nil {
		t.Fatalf("[x y] served %v (y known absent: %v) before the wildcard was answered", r.Names, r.KnownAbsent("y"))
	}
	c.Apply(ClusterType, []*Resource{res("x", "1"), res("y", "1"), res("z", "1")}, true)
	if r := late.Current(); r == nil || !slices.Equal(r.Names, []string{"x", "y"}) {
		t.Fatalf("[x y] after the answer: %+v", r)
	}
	if got := one.Current().Names; !slices.Equal(got, []string{"x"}) {
		t.Fatalf("[x] = %v", got)
	}
}
