package shard

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"
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

// A wildcard re-asked and then dropped before the upstream answered it is
// never answered (go-control-plane's linear cache does not answer a
// subscription it was no longer asked for). A named shard lacking a name
// must then be served once that name's own grace passes, not wait for the
// wildcard's answer for good. A delta upstream asks the wildcard with the
// names ("*", x, y): y, asked "before" only under the unanswered wildcard,
// must wait for its own answer all the same (conformance linear/delta seed
// 3001109: the shard was never served).
func TestNamedShardServedOnceReaskedWildcardIsDropped(t *testing.T) {
	for _, tc := range []struct {
		name        string
		incremental bool
		wildcard    Subscription // how the upstream was asked for the wildcard
	}{
		{"sotw", false, Subscription{Wildcard: true}},
		{"delta", true, Subscription{Wildcard: true, Names: []string{"x", "y"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, _ := newTestClass(t)
				w := &recorder{}
				c.Subscribe(ClusterType, NewSubscription([]string{"x"}, false), w)
				c.Requested(ClusterType, c.Interest(ClusterType), tc.incremental)
				c.Apply(ClusterType, []*Resource{res("x", "1")}, true)
				wild := c.Subscribe(ClusterType, NewSubscription(nil, true), w)
				c.Requested(ClusterType, tc.wildcard, tc.incremental)
				late := c.Subscribe(ClusterType, NewSubscription([]string{"x", "y"}, false), w)
				c.Unsubscribe(wild, w) // the wildcard leaves before its answer
				c.Requested(ClusterType, c.Interest(ClusterType), tc.incremental)
				if r := late.Current(); r != nil {
					t.Fatalf("[x y] served %v before y's grace passed", r.Names)
				}
				time.Sleep(PendingGrace + time.Second) // fake time: the grace passes
				synctest.Wait()
				r := late.Current()
				if r == nil {
					t.Fatal("[x y] never served: it waits for a wildcard nobody asks for")
				}
				if !slices.Equal(r.Names, []string{"x"}) || !r.KnownAbsent("y") {
					t.Fatalf("[x y] = %v (y known absent: %v), want [x] with y absent", r.Names, r.KnownAbsent("y"))
				}
			})
		})
	}
}
