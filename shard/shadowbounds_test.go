package shard

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xds-relay/xds-relay/dedup"
)

// cluster is a Cluster named name whose EDS child is child.
func cluster(name, child, content string) *Resource {
	b := []byte(name + "=" + content)
	return NewResource(name, b, dedup.ResourceHash(b), nil, []string{child}, nil)
}

// clustersAnswered subscribes a CDS shard to names and installs a
// full-state answer of them, each naming its namesake assignment.
func clustersAnswered(c *Class, w *recorder, names ...string) *Shard {
	s := c.Subscribe(ClusterType, NewSubscription(names, false), w)
	c.Requested(ClusterType, c.Interest(ClusterType), false)
	cds := make([]*Resource, 0, len(names))
	for _, n := range names {
		cds = append(cds, cluster(n, n, "1"))
	}
	c.ApplyUpdate(ClusterType, Update{Kind: UpdateFull, Resources: cds, Asked: true})
	return s
}

// X6: a Cluster the control plane removed (a full-state CDS without it),
// whose assignment the class then drops (the client stopped asking), is
// recreated; its assignment, asked for again, is not served from the
// shadow: the endpoints it held are not the control plane's any more.
func TestShadowOfRemovedParentsChildNotServed(t *testing.T) {
	t.Run("parent removed, then the child dropped", func(t *testing.T) {
		c, _ := newTestClass(t)
		w := &recorder{}
		clustersAnswered(c, w, "c1", "k")
		eds := c.Subscribe(edsType, NewSubscription([]string{"c1"}, false), w)
		c.Requested(edsType, c.Interest(edsType), false)
		c.ApplyUpdate(edsType, Update{Kind: UpdateMerge, Resources: []*Resource{res("c1", "A")}, Asked: true})
		c.ApplyUpdate(ClusterType, Update{Kind: UpdateFull, Resources: []*Resource{cluster("k", "k", "1")}, Asked: true})
		c.Unsubscribe(eds, w)
		c.Requested(edsType, c.Interest(edsType), false) // c1 dropped
		if shadowedIn(c, edsType, "c1") {
			t.Fatal("the assignment of a removed cluster was shadowed at its drop")
		}
		notServedAgain(t, c, w)
	})
	t.Run("child dropped, then the parent removed", func(t *testing.T) {
		c, _ := newTestClass(t)
		w := &recorder{}
		clustersAnswered(c, w, "c1", "k")
		askedAnsweredDropped(c, w, edsType, false, "c1") // shadowed
		c.ApplyUpdate(ClusterType, Update{Kind: UpdateFull, Resources: []*Resource{cluster("k", "k", "1")}, Asked: true})
		if shadowedIn(c, edsType, "c1") {
			t.Fatal("the shadow of a removed cluster's assignment outlived the removal")
		}
		notServedAgain(t, c, w)
	})
	t.Run("another parent still names it", func(t *testing.T) {
		c, _ := newTestClass(t)
		w := &recorder{}
		clustersAnswered(c, w, "c1", "c2")
		askedAnsweredDropped(c, w, edsType, false, "c1")
		// c2 names c1's assignment too (a shared EDS service name).
		c.ApplyUpdate(ClusterType, Update{Kind: UpdateFull, Resources: []*Resource{cluster("c2", "c1", "2")}, Asked: true})
		if !shadowedIn(c, edsType, "c1") {
			t.Fatal("a shadow still named by a held cluster was forgotten")
		}
	})
}

// notServedAgain recreates c1 and asks for its assignment again: the
// upstream stays silent (it has none), and nothing may be served.
func notServedAgain(t *testing.T, c *Class, w *recorder) {
	t.Helper()
	c.ApplyUpdate(ClusterType, Update{Kind: UpdateFull, Resources: []*Resource{cluster("c1", "c1", "1"), cluster("k", "k", "1")}, Asked: true})
	again := c.Subscribe(edsType, NewSubscription([]string{"c1"}, false), w)
	c.Requested(edsType, c.Interest(edsType), false)
	if got := again.Current(); got != nil && got.Has("c1") {
		t.Fatal("the recreated cluster's assignment was served from the shadow of the deleted one")
	}
}

// A resource restored from its shadow is held on the shadow's word: the
// re-asking request claims no version (AwaitsNames), and unless the
// upstream sends the name within ShadowHold it is dropped again.
func TestRestoredShadowIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := newTestClass(t)
		w := &lockedRecorder{}
		askedAnsweredDropped(c, w, edsType, false, "a", "b")
		again := c.Subscribe(edsType, NewSubscription([]string{"a", "b"}, false), w)
		c.Requested(edsType, c.Interest(edsType), false)
		if got := again.Current(); got == nil || !slices.Equal(got.Names, []string{"a", "b"}) {
			t.Fatalf("asked again: served %+v, want a and b from the shadows", got)
		}
		if !c.AwaitsNames(edsType) {
			t.Fatal("the request asking again for shadowed names claims a version: the upstream is not asked to confirm them")
		}
		// The upstream sends a (unchanged), not b.
		c.ApplyUpdate(edsType, Update{Kind: UpdateMerge, Resources: []*Resource{res("a", "1")}, Asked: true})
		if c.AwaitsNames(edsType) != true {
			t.Fatal("b is still unconfirmed")
		}
		w.take()
		time.Sleep(ShadowHold + 2*time.Millisecond)
		synctest.Wait()
		if got := again.Current(); got == nil || !slices.Equal(got.Names, []string{"a"}) {
			t.Fatalf("ShadowHold after the restore: served %+v, want a alone (b never confirmed)", got)
		}
		if got := w.take(); !slices.Contains(got, again) {
			t.Fatalf("the shard that lost b was not told: %v", got)
		}
		if c.AwaitsNames(edsType) {
			t.Fatal("nothing is held on a shadow's word any more")
		}
	})
}

// A new upstream stream's first answer tells the state of every name it
// was asked: what the class holds of a type without full-state answers,
// was asked, and is not in it, the control plane no longer has.
func TestResyncDropsWhatTheUpstreamNoLongerHas(t *testing.T) {
	c, _ := newTestClass(t)
	w := &recorder{}
	s := c.Subscribe(edsType, NewSubscription([]string{"a", "b", "c"}, false), w)
	c.Requested(edsType, c.Interest(edsType), false)
	c.ApplyUpdate(edsType, Update{Kind: UpdateMerge, Resources: []*Resource{res("a", "1"), res("b", "1"), res("c", "1")}, Asked: true})

	// On the same stream, an answer without b means nothing.
	c.ApplyUpdate(edsType, Update{Kind: UpdateMerge, Resources: []*Resource{res("a", "2")}, Asked: true})
	if got := s.Current(); !slices.Equal(got.Names, []string{"a", "b", "c"}) {
		t.Fatalf("a partial answer removed something: %v", got.Names)
	}
	// A new stream (a resync): its first answer lacks b.
	c.UpstreamHoldsNothing(edsType)
	c.Requested(edsType, c.Interest(edsType), false)
	c.ApplyUpdate(edsType, Update{Kind: UpdateMerge, Resources: []*Resource{res("a", "2"), res("c", "1")}, Asked: true})
	if got := s.Current(); !slices.Equal(got.Names, []string{"a", "c"}) {
		t.Fatalf("after the resync's answer: %v, want [a c]", got.Names)
	}
	// Its later answers are partial again.
	c.ApplyUpdate(edsType, Update{Kind: UpdateMerge, Resources: []*Resource{res("a", "3")}, Asked: true})
	if got := s.Current(); !slices.Equal(got.Names, []string{"a", "c"}) {
		t.Fatalf("a later partial answer removed something: %v", got.Names)
	}
	// Heartbeats are no answer; a name sent as a heartbeat is there.
	c.UpstreamHoldsNothing(edsType)
	c.ApplyUpdate(edsType, Update{Kind: UpdateHeartbeats, Heartbeats: []HeartbeatEntry{{Name: "a"}}, Asked: true})
	if got := s.Current(); !slices.Equal(got.Names, []string{"a", "c"}) {
		t.Fatalf("a heartbeat removed something: %v", got.Names)
	}
	c.ApplyUpdate(edsType, Update{Kind: UpdateMerge, Resources: []*Resource{res("c", "1")}, Heartbeats: []HeartbeatEntry{{Name: "a"}}, Asked: true})
	if got := s.Current(); !slices.Equal(got.Names, []string{"a", "c"}) {
		t.Fatalf("a name the first answer listed as a heartbeat was dropped: %v", got.Names)
	}
}

// lockedRecorder is a recorder a timer's goroutine may tell.
type lockedRecorder struct {
	mu sync.Mutex
	r  recorder
}

func (l *lockedRecorder) ShardChanged(s *Shard, resp *Response) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.r.ShardChanged(s, resp)
}

func (l *lockedRecorder) ShardHeartbeat(s *Shard, h *Heartbeat) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.r.ShardHeartbeat(s, h)
}

func (l *lockedRecorder) take() []*Shard {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.take()
}

// shadowedIn reports whether c's table of typeURL shadows name.
func shadowedIn(c *Class, typeURL, name string) bool {
	t := c.tables[typeURL]
	if t == nil {
		return false
	}
	_, ok := t.shadowed[name]
	return ok
}
