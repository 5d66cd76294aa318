package shard

import (
	"slices"
	"testing"
)

// An answer the upstream sent before an unsubscription reached it arrives
// after it. Its resources for names no longer asked are not kept: one
// deleted meanwhile would be served to its next subscriber as current and
// never reported removed.
func TestAnswerForUnaskedNameIsDropped(t *testing.T) {
	for _, kind := range []UpdateKind{UpdateIncremental, UpdateMerge, UpdateFull} {
		c, _ := newTestClass(t)
		w := &recorder{}
		a := c.Subscribe(edsType, NewSubscription([]string{"a"}, false), w)
		b := c.Subscribe(edsType, NewSubscription([]string{"b"}, false), w)
		c.Requested(edsType, c.Interest(edsType), kind == UpdateIncremental)
		c.Unsubscribe(b, w)
		c.Requested(edsType, c.Interest(edsType), kind == UpdateIncremental) // [a]
		// The answer to [a b], sent before the upstream saw [a].
		c.ApplyUpdate(edsType, Update{Kind: kind, Resources: []*Resource{res("a", "1"), res("b", "1")}})
		if got := a.Current(); got == nil || !slices.Equal(got.Names, []string{"a"}) {
			t.Fatalf("%v: [a] = %+v", kind, got)
		}
		again := c.Subscribe(edsType, NewSubscription([]string{"b"}, false), w)
		if r := again.Current(); r != nil && r.Has("b") {
			t.Fatalf("%v: b, from an answer to a request no longer current, served to its next subscriber", kind)
		}
	}
}

// The late answer of TestAnswerForUnaskedNameIsDropped, once the type was
// last asked for nothing and its table freed: it does not make a new table
// holding b (which the upstream keeps current for nobody; deleted since, it
// would be served to the type's next subscriber and never reported removed).
// shardFirst: the type's next shard comes before the late answer, which
// finds a table the upstream was not asked for anything yet (conformance
// chain-delta-unsubscribed-endpoints-star.json); it answers a request made
// for the freed table and is dropped just the same, while the answer to the
// new table's request is kept.
func TestAnswerAfterTypeFreedIsDropped(t *testing.T) {
	for _, shardFirst := range []bool{false, true} {
		for _, kind := range []UpdateKind{UpdateIncremental, UpdateMerge, UpdateFull} {
			c, _ := newTestClass(t)
			w := &recorder{}
			b := c.Subscribe(edsType, NewSubscription([]string{"b"}, false), w)
			c.Requested(edsType, c.Interest(edsType), kind == UpdateIncremental)
			c.Unsubscribe(b, w)
			c.Requested(edsType, c.Interest(edsType), kind == UpdateIncremental) // nothing: the table goes
			var wild *Shard
			if shardFirst {
				wild = c.Subscribe(edsType, NewSubscription(nil, true), w)
			}
			// The answer to [b], sent before the upstream saw the unsubscription.
			c.ApplyUpdate(edsType, Update{Kind: kind, Resources: []*Resource{res("b", "1")}, Asked: true})
			if !shardFirst {
				if st := c.Status(); len(st) > 0 && st[0].Resources > 0 {
					t.Fatalf("%v: the class holds %d resources of a type asked for nothing", kind, st[0].Resources)
				}
				wild = c.Subscribe(edsType, NewSubscription(nil, true), w)
			}
			c.Requested(edsType, c.Interest(edsType), kind == UpdateIncremental)
			c.ApplyUpdate(edsType, Update{Kind: kind, Resources: []*Resource{res("c", "1")}, Asked: true})
			r := wild.Current()
			if r == nil || !r.Has("c") {
				t.Fatalf("%v (shard first: %v): the answer to the wildcard was not kept: %+v", kind, shardFirst, r)
			}
			if r.Has("b") {
				t.Fatalf("%v (shard first: %v): b, from an answer to a request made for the freed table, served to a wildcard", kind, shardFirst)
			}
		}
	}
}

// A resource asked for by one of its aliases (VHDS) is asked for.
func TestAnswerKeptForAskedAlias(t *testing.T) {
	c, _ := newTestClass(t)
	w := &recorder{}
	s := c.Subscribe(edsType, NewSubscription([]string{"alias"}, false), w)
	c.Requested(edsType, c.Interest(edsType), true)
	r := res("real", "1")
	r.Rare = NewRare([]string{"alias"}, nil, "")
	c.ApplyUpdate(edsType, Update{Kind: UpdateIncremental, Resources: []*Resource{r}})
	if got := s.Current(); got == nil || !got.Has("real") {
		t.Fatalf("[alias] = %+v, want the resource it aliases", got)
	}
}

// The upstream asked for nothing (or names only) while a wildcard shard's
// request is still to be sent: what it was not asked for is dropped, even
// with a wildcard shard subscribed. A delta upstream told to forget them
// answers the wildcard later without them and never reports a deletion, so
// keeping them would serve them for good.
func TestUnsubscribedDroppedBeforeWildcardAsked(t *testing.T) {
	c, _ := newTestClass(t)
	w := &recorder{}
	named := c.Subscribe(ClusterType, NewSubscription([]string{"a"}, false), w)
	c.Requested(ClusterType, c.Interest(ClusterType), true)
	c.ApplyUpdate(ClusterType, Update{Kind: UpdateIncremental, Resources: []*Resource{res("a", "1")}})
	wild := c.Subscribe(ClusterType, NewSubscription(nil, true), w)
	c.Unsubscribe(named, w)
	c.Requested(ClusterType, Subscription{}, true) // computed before the wildcard shard came
	c.Requested(ClusterType, Subscription{Wildcard: true}, true)
	// The upstream, told to forget a (and then deleting it), answers the
	// wildcard with what exists: b.
	c.ApplyUpdate(ClusterType, Update{Kind: UpdateIncremental, Resources: []*Resource{res("b", "1")}})
	if got := wild.Current(); got == nil || !slices.Equal(got.Names, []string{"b"}) {
		t.Fatalf("wildcard = %+v, want [b] only: a was dropped upstream", got)
	}
}

// AwaitsNames, which makes a SotW class stream's request claim no version,
// holds while a name asked for is neither held nor known absent: l2
// dropped, then asked for again after an answer that crossed the narrowing
// request (conformance chain-sotw-crossed-listener.json), is awaited until
// the next answer.
func TestAwaitsNamesWhileAskedNamesLacked(t *testing.T) {
	c, _ := newTestClass(t)
	w := &recorder{}
	both := c.Subscribe(ListenerType, NewSubscription([]string{"l1", "l2"}, false), w)
	c.Requested(ListenerType, c.Interest(ListenerType), false)
	if !c.AwaitsNames(ListenerType) {
		t.Fatal("[l1 l2] asked, nothing held: not awaited")
	}
	c.ApplyUpdate(ListenerType, Update{Kind: UpdateFull, Resources: []*Resource{res("l1", "1"), res("l2", "1")}, Asked: true})
	if c.AwaitsNames(ListenerType) {
		t.Fatal("awaited after the answer")
	}
	c.Subscribe(ListenerType, NewSubscription([]string{"l1"}, false), w)
	c.Unsubscribe(both, w)
	c.Requested(ListenerType, c.Interest(ListenerType), false) // [l1]: l2 dropped
	c.Subscribe(ListenerType, NewSubscription([]string{"l2"}, false), w)
	if c.AwaitsNames(ListenerType) {
		t.Fatal("l2 awaited before it is asked for")
	}
	// The answer to [l1 l2] crossing [l1], read before l2 is asked again.
	c.ApplyUpdate(ListenerType, Update{Kind: UpdateFull, Resources: []*Resource{res("l1", "1"), res("l2", "2")}, Asked: true})
	c.Requested(ListenerType, c.Interest(ListenerType), false) // [l1 l2]
	if !c.AwaitsNames(ListenerType) {
		t.Fatal("l2 asked for again, dropped from the crossed answer: not awaited")
	}
	c.ApplyUpdate(ListenerType, Update{Kind: UpdateFull, Resources: []*Resource{res("l1", "1"), res("l2", "2")}, Asked: true})
	if c.AwaitsNames(ListenerType) {
		t.Fatal("awaited after the answer")
	}
	if c.AwaitsNames(edsType) {
		t.Fatal("a type without a table awaited")
	}
}
