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
	askedAnsweredDropped(c, w, edsType, false, "a", "b")
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
	askedAnsweredDropped(c, w, edsType, false, "b")
	keep := c.Subscribe(edsType, NewSubscription([]string{"k"}, false), w)
	c.Requested(edsType, c.Interest(edsType), false) // [k]
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
	t.Run("new stream", func(t *testing.T) { notRestored(t, edsType, false, true) })
	t.Run("cluster", func(t *testing.T) { notRestored(t, ClusterType, false, false) })
	t.Run("incremental", func(t *testing.T) { notRestored(t, edsType, true, false) })
}

// notRestored checks that b of typeURL, dropped, is not served from a
// shadow when asked for again (after a new stream's first request, with
// newStream).
func notRestored(t *testing.T, typeURL string, incremental, newStream bool) {
	c, _ := newTestClass(t)
	w := &recorder{}
	askedAnsweredDropped(c, w, typeURL, incremental, "b")
	if newStream {
		c.UpstreamHoldsNothing(typeURL)
	}
	again := c.Subscribe(typeURL, NewSubscription([]string{"b"}, false), w)
	c.Requested(typeURL, c.Interest(typeURL), incremental)
	if got := again.Current(); got != nil && got.Has("b") {
		t.Fatalf("b served from the shadow, though the upstream will send it if it exists")
	}
}

// A table shadows at most shadowLimit resources.
func TestShadowIsBounded(t *testing.T) {
	c, _ := newTestClass(t)
	w := &recorder{}
	askedAnsweredDropped(c, w, edsType, false, names("r", shadowLimit+10)...)
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
		askedAnsweredDropped(c, w, edsType, false, "b") // b shadowed
		if !slices.Contains(c.TypeURLs(), edsType) {
			t.Fatal("the table went with b shadowed")
		}
		time.Sleep(ShadowHold + 2*time.Millisecond)
		synctest.Wait()
		if slices.Contains(c.TypeURLs(), edsType) {
			t.Fatal("a table holding only an expired shadow was not freed")
		}

		// Expired at the re-ask, before the sweep ran.
		first := c.Subscribe(edsType, NewSubscription([]string{"b", "k"}, false), w)
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

// askedAnsweredDropped subscribes a shard to names of typeURL, asks the
// upstream, installs its answer (each name at content "1"), then drops the
// shard and asks again: the class has dropped them.
func askedAnsweredDropped(c *Class, w Watcher, typeURL string, incremental bool, names ...string) {
	kind := UpdateMerge
	if incremental {
		kind = UpdateIncremental
	}
	s := c.Subscribe(typeURL, NewSubscription(names, false), w)
	c.Requested(typeURL, c.Interest(typeURL), incremental)
	update := make([]*Resource, 0, len(names))
	for _, n := range names {
		update = append(update, res(n, "1"))
	}
	c.ApplyUpdate(typeURL, Update{Kind: kind, Resources: update, Asked: true})
	c.Unsubscribe(s, w)
	c.Requested(typeURL, c.Interest(typeURL), incremental)
}
