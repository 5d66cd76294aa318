package shard

import (
	"bytes"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// bigState is an update of n clusters, each of its own bytes.
func bigState(n int, content string) Update {
	rs := make([]*Resource, n)
	for i := range rs {
		rs[i] = res(fmt.Sprintf("kept-%05d", i), content)
	}
	return Update{Resources: rs, Kind: UpdateFull}
}

// wildcardShard returns a new class's wildcard CDS shard over u.
func wildcardShard(t *testing.T, u Update) (*Class, *Shard) {
	t.Helper()
	c, _ := newTestClass(t)
	c.ApplyUpdate(ClusterType, u)
	return c, c.Subscribe(ClusterType, NewSubscription(nil, true), &recorder{})
}

// A body nobody asked for during BodyKeepAlive is no longer kept by its
// response, is collected, and the next stream gets it rebuilt, the same
// bytes.
func TestIdleBodyIsReleasedAndRebuilt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, s := wildcardShard(t, bigState(100, "1"))
		r := s.Current()
		for _, kb := range []struct {
			name string
			k    *keptBody
			get  func() []byte
		}{
			{"sotw", &r.body, func() []byte { return r.Body().Bytes() }},
			{"delta full", &r.deltaFull, func() []byte { return r.DeltaFullBody().Bytes() }},
		} {
			first := bytes.Clone(kb.get())
			weak := func() bool { _, live := kb.k.weak.Body(); return live }
			if !kb.k.kept() || kb.k.buildCount() != 1 {
				t.Fatalf("%s: kept %v after %d builds, want kept after 1", kb.name, kb.k.kept(), kb.k.buildCount())
			}
			time.Sleep(BodyKeepAlive - 1)
			synctest.Wait()
			if !kb.k.kept() {
				t.Fatalf("%s: released before BodyKeepAlive", kb.name)
			}
			time.Sleep(1)
			synctest.Wait()
			if kb.k.kept() {
				t.Fatalf("%s: still kept BodyKeepAlive after its only use", kb.name)
			}
			if !collect(t, func() bool { return !weak() }) {
				t.Fatalf("%s: the released body is still alive after 100 collections", kb.name)
			}
			if got := kb.get(); !bytes.Equal(got, first) || kb.k.buildCount() != 2 || !kb.k.kept() {
				t.Fatalf("%s: rebuilt %d bytes (equal %v) after %d builds, kept %v; want equal after 2, kept",
					kb.name, len(got), bytes.Equal(got, first), kb.k.buildCount(), kb.k.kept())
			}
		}
	})
}

// A rolling restart: 10,000 streams join a shard over a minute, each
// taking the body once and finishing its write before the next joins; a
// body the response does not keep is collected before the next join. The
// body is built once, not per join (nor per BodyKeepAlive), and released
// after the last.
func TestRollingJoinsBuildTheBodyOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, s := wildcardShard(t, bigState(100, "1"))
		r := s.Current()
		const joins = 10_000
		for range joins {
			if r.Body().Len() != r.BodyLen {
				t.Fatal("a join got a body of another size")
			}
			time.Sleep(time.Minute / joins)
			synctest.Wait()
			if !r.body.kept() { // the worst case: a collection right away
				collect(t, func() bool { _, live := r.body.weak.Body(); return !live })
			}
		}
		if got := r.body.buildCount(); got != 1 {
			t.Fatalf("the body was built %d times for %d joins over a minute, want 1", got, joins)
		}
		time.Sleep(2 * BodyKeepAlive)
		synctest.Wait()
		if r.body.kept() {
			t.Fatal("the body is still kept 2 × BodyKeepAlive after the last join")
		}
	})
}

// A superseded response keeps no body: streams that write it hold it
// while they do, and a late one gets the same body while it is alive.
func TestSupersededResponseKeepsNoBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, s := wildcardShard(t, bigState(10, "1"))
		old := s.Current()
		held := old.Body() // an in-flight write
		c.ApplyUpdate(ClusterType, bigState(10, "2"))
		if old.body.kept() {
			t.Fatal("the superseded response still keeps its body")
		}
		if late := old.Body(); !late.Same(held) || old.body.buildCount() != 1 {
			t.Fatalf("a late write got another body (same %v, %d builds)", late.Same(held), old.body.buildCount())
		}
		if s.Current().Body().Same(held) {
			t.Fatal("the new version has the old version's body")
		}
		time.Sleep(2 * BodyKeepAlive)
		synctest.Wait()
		if old.body.kept() || s.Current().body.kept() {
			t.Fatal("bodies kept 2 × BodyKeepAlive after their last use")
		}
	})
}
