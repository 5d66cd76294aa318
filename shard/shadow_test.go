package shard

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// A ClusterLoadAssignment dropped, then asked for again before the SotW
// upstream answers the type (conformance linear-sotw-dropped-asked-before-
// answer.json): the upstream believes the class holds it and stays silent
// about it, so the class serves what it dropped, at once.
func TestShadowedResourceServedWhenAskedAgain(t *testing.T) {
	c, _ := newTestClass(t)
	w := &recorder{}
	first := c.Subscribe(edsType, NewSubscription([]string{"a", "b"}, false), w)
	c.Requested(edsType, c.Interest(edsType), false)
	c.ApplyUpdate(edsType, Update{Kind: UpdateMerge, Resources: []*Resource{res("a", "1"), res("b", "1")}, Asked: true})
	c.Unsubscribe(first, w)
	c.Requested(edsType, c.Interest(edsType), false) // nothing: a and b dropped
	again := c.Subscribe(edsType, NewSubscription([]string{"b"}, false), w)
	w.take()
	c.Requested(edsType, c.Interest(edsType), false) // [b] again, and no answer comes
	if got := again.Current(); got == nil || !slices.Equal(got.Names, []string{"b"}) {
		t.Fatalf("[b] asked again, the upstream silent about it: served %+v, want b", got)
	}
	if got := w.take(); !slices.Contains(got, again) {
		t.Fatalf("the shard served b was not told: %v", got)
	}
	// a was shadowed too; a later answer still replaces what is restored.
	c.Subscribe(edsType, NewSubscription([]string{"a"}, false), w)
	c.Requested(edsType, c.Interest(edsType), false)
	c.ApplyUpdate(edsType, Update{Kind: UpdateMerge, Resources: []*Resource{res("a", "2")}, Asked: true})
	if r, ok := c.tables[edsType].resources.get("a"); !ok || string(r.Any) != "a=2" {
		t.Fatalf("a = %v, want the upstream's a=2", r)
	}
}

// What the class dropped from a late answer (its names no longer asked
// for) is what the upstream believes it holds: asked for again, that
// content is served, not an older one.
func TestShadowKeepsLateAnswersContent(t *testing.T) {
	c, _ := newTestClass(t)
	w := &recorder{}
	first := c.Subscribe(edsType, NewSubscription([]string{"b"}, false), w)
	c.Requested(edsType, c.Interest(edsType), false)
	c.ApplyUpdate(edsType, Update{Kind: UpdateMerge, Resources: []*Resource{res("b", "1")}, Asked: true})
	c.Unsubscribe(first, w)
	keep := c.Subscribe(edsType, NewSubscription([]string{"k"}, false), w)
	c.Requested(edsType, c.Interest(edsType), false) // [k]: b dropped
	// b changed upstream; the answer was sent before the upstream saw [k].
	c.ApplyUpdate(edsType, Update{Kind: UpdateMerge, Resources: []*Resource{res("b", "2"), res("k", "1")}, Asked: true})
	if got := keep.Current(); got == nil || !slices.Equal(got.Names, []string{"k"}) {
		t.Fatalf("[k] = %+v", got)
	}
	again := c.Subscribe(edsType, NewSubscription([]string{"b"}, false), w)
	c.Requested(edsType, c.Interest(edsType), false)
	got := again.Current()
	if got == nil || len(got.Resources) != 1 || string(got.Resources[0].Any) != "b=2" {
		t.Fatalf("[b] asked again after a late answer: served %+v, want b=2", got)
	}
}

// The shadow ends when the upstream holds nothing of the type for the
// class (a new stream), and is not kept for Listener and Cluster (their
// answers list every name asked for) nor for an incremental upstream (told
// what the class holds).
func TestShadowOnlyWhileTheUpstreamMayBelieveItHeld(t *testing.T) {
	for _, tc := range []struct {
		name        string
		typeURL     string
		incremental bool
		newStream   bool
	}{
		{"new stream", edsType, false, true},
		{"cluster", ClusterType, false, false},
		{"incremental", edsType, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newTestClass(t)
			w := &recorder{}
			kind := UpdateMerge
			if tc.incremental {
				kind = UpdateIncremental
			}
			first := c.Subscribe(tc.typeURL, NewSubscription([]string{"b"}, false), w)
			c.Requested(tc.typeURL, c.Interest(tc.typeURL), tc.incremental)
			c.ApplyUpdate(tc.typeURL, Update{Kind: kind, Resources: []*Resource{res("b", "1")}, Asked: true})
			c.Unsubscribe(first, w)
			c.Requested(tc.typeURL, c.Interest(tc.typeURL), tc.incremental)
			if tc.newStream {
				c.UpstreamHoldsNothing(tc.typeURL)
			}
			again := c.Subscribe(tc.typeURL, NewSubscription([]string{"b"}, false), w)
			c.Requested(tc.typeURL, c.Interest(tc.typeURL), tc.incremental)
			if got := again.Current(); got != nil && got.Has("b") {
				t.Fatalf("b served from the shadow, though the upstream will send it if it exists")
			}
		})
	}
}

// A table shadows at most shadowLimit resources.
func TestShadowIsBounded(t *testing.T) {
	c, _ := newTestClass(t)
	w := &recorder{}
	n := shadowLimit + 10
	all := names("r", n)
	s := c.Subscribe(edsType, NewSubscription(all, false), w)
	c.Requested(edsType, c.Interest(edsType), false)
	update := make([]*Resource, 0, n)
	for _, name := range all {
		update = append(update, res(name, "1"))
	}
	c.ApplyUpdate(edsType, Update{Kind: UpdateMerge, Resources: update, Asked: true})
	c.Unsubscribe(s, w)
	c.Requested(edsType, c.Interest(edsType), false)
	if got := len(c.tables[edsType].shadowed); got != shadowLimit {
		t.Fatalf("%d resources shadowed, want the limit %d", got, shadowLimit)
	}
}

// A shadow lives ShadowHold: asked for again later, the name is not
// restored (the upstream has long processed a request leaving it out), and
// a table holding nothing but shadows is freed once they expire.
func TestShadowExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := newTestClass(t)
		w := &recorder{}
		first := c.Subscribe(edsType, NewSubscription([]string{"b"}, false), w)
		c.Requested(edsType, c.Interest(edsType), false)
		c.ApplyUpdate(edsType, Update{Kind: UpdateMerge, Resources: []*Resource{res("b", "1")}, Asked: true})
		c.Unsubscribe(first, w)
		c.Requested(edsType, c.Interest(edsType), false) // nothing: b shadowed
		if !slices.Contains(c.TypeURLs(), edsType) {
			t.Fatal("the table went with b shadowed")
		}
		time.Sleep(ShadowHold + 2*time.Millisecond)
		synctest.Wait()
		if slices.Contains(c.TypeURLs(), edsType) {
			t.Fatal("a table holding only an expired shadow was not freed")
		}

		// Expired at the re-ask, before the sweep ran.
		first = c.Subscribe(edsType, NewSubscription([]string{"b", "k"}, false), w)
		c.Requested(edsType, c.Interest(edsType), false)
		c.ApplyUpdate(edsType, Update{Kind: UpdateMerge, Resources: []*Resource{res("b", "1"), res("k", "1")}, Asked: true})
		c.Subscribe(edsType, NewSubscription([]string{"k"}, false), w)
		c.Unsubscribe(first, w)
		c.Requested(edsType, c.Interest(edsType), false) // [k]: b shadowed
		time.Sleep(ShadowHold)
		again := c.Subscribe(edsType, NewSubscription([]string{"b"}, false), w)
		c.Requested(edsType, c.Interest(edsType), false)
		if got := again.Current(); got != nil && got.Has("b") {
			t.Fatal("b restored from a shadow ShadowHold old")
		}
	})
}
