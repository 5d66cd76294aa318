package shard

import (
	"bytes"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/xds-relay/xds-relay/shard/wire"
)

// twoClasses returns two classes (of two registries) each with a wildcard
// shard of CDS over resources made by mk.
func twoClasses(t *testing.T, u Update) (a, b *Class, sa, sb *Shard) {
	t.Helper()
	a, _ = newTestClass(t)
	b, _ = newTestClass(t)
	a.ApplyUpdate(ClusterType, u)
	b.ApplyUpdate(ClusterType, u)
	sa = a.Subscribe(ClusterType, NewSubscription(nil, true), &recorder{})
	sb = b.Subscribe(ClusterType, NewSubscription(nil, true), &recorder{})
	return a, b, sa, sb
}

// Shards of two classes with identical content hold one SotW body and one
// delta full-state body, not a copy each.
func TestIdenticalShardsShareBodies(t *testing.T) {
	rs := []*Resource{res("share-a", "1"), res("share-b", "1")}
	_, _, sa, sb := twoClasses(t, Update{Resources: rs, Kind: UpdateFull})
	ra, rb := sa.Current(), sb.Current()
	if ra == rb {
		t.Fatal("two classes share a Response; want their own, sharing the body")
	}
	if !ra.Body().Same(rb.Body()) {
		t.Fatal("identical shards of two classes have two SotW bodies")
	}
	if !ra.DeltaFullBody().Same(rb.DeltaFullBody()) {
		t.Fatal("identical shards of two classes have two delta full-state bodies")
	}
	// The shared delta body is the one this version encodes.
	if want := EncodeDelta(ClusterType, ra.Version, ra.Resources, nil); !bytes.Equal(rb.DeltaFullBody().Bytes(), want.Bytes()) {
		t.Fatal("the shared delta full-state body is not the shard's encoding")
	}
	// The same content under a name subscription selects the same bytes.
	c, _ := newTestClass(t)
	c.ApplyUpdate(ClusterType, Update{Resources: rs, Kind: UpdateFull})
	sc := c.Subscribe(ClusterType, NewSubscription([]string{"share-b", "share-a"}, false), &recorder{})
	if !sc.Current().Body().Same(ra.Body()) {
		t.Fatal("a name subscription to the same resources has another body")
	}
}

// Bodies that differ in any byte are never shared: another upstream version
// passed through, another content, another type.
func TestDifferentBodiesAreNotShared(t *testing.T) {
	rs := []*Resource{res("differ-a", "1")}
	_, _, sa, _ := twoClasses(t, Update{Resources: rs, Kind: UpdateFull, Version: "u1"})
	_, _, sb, _ := twoClasses(t, Update{Resources: rs, Kind: UpdateFull, Version: "u2"})
	_, _, sc, _ := twoClasses(t, Update{Resources: rs, Kind: UpdateFull})
	_, _, sd, _ := twoClasses(t, Update{Resources: []*Resource{res("differ-a", "2")}, Kind: UpdateFull, Version: "u1"})
	all := []*Response{sa.Current(), sb.Current(), sc.Current(), sd.Current()}
	for i, r := range all {
		for j, o := range all[:i] {
			if r.Body().Same(o.Body()) || bytes.Equal(r.Body().Bytes(), o.Body().Bytes()) {
				t.Errorf("responses %d and %d (versions %q, %q) share a body", j, i, o.Version, r.Version)
			}
			if r.DeltaFullBody().Same(o.DeltaFullBody()) {
				t.Errorf("responses %d and %d (versions %q, %q) share a delta body", j, i, o.Version, r.Version)
			}
		}
	}
}

// A hash collision (two contents under one key) is caught by the byte
// check: each content gets its own body, with its own bytes.
func TestBodyKeyCollisionIsChecked(t *testing.T) {
	const sum = 0xc011_1de0 // forced: the same key for both contents
	a := []*Resource{res("collide-a", "1")}
	b := []*Resource{res("collide-a", "2")}
	ba := sotwBodyOf(ClusterType, "v", sum, a, 0)
	bb := sotwBodyOf(ClusterType, "v", sum, b, 0)
	if ba.Same(bb) {
		t.Fatal("a collision shared one body between two contents")
	}
	if !sotwBodyOf(ClusterType, "v", sum, b, 0).Same(bb) {
		t.Fatal("the content holding the key was not shared")
	}
	// The first content is built again (and takes the key back), never
	// served the other's bytes.
	for _, c := range []struct {
		got wire.Body
		rs  []*Resource
	}{{ba, a}, {bb, b}, {sotwBodyOf(ClusterType, "v", sum, a, 0), a}} {
		bld := wire.NewBodyBuilder("v", 0)
		addSotW(bld, c.rs)
		if want := bld.Finish(ClusterType); !bytes.Equal(c.got.Bytes(), want) {
			t.Fatalf("body %q, want %q", c.got.Bytes(), want)
		}
	}
}

// A body's cache entry lives exactly as long as a shard's response holds
// the body: once both classes' shards have moved on, it is collected and
// its entry forgotten.
func TestSharedBodyIsFreedWithItsLastShard(t *testing.T) {
	a, b, sa, sb := twoClasses(t, Update{Resources: []*Resource{res("free-a", "1")}, Kind: UpdateFull})
	r := sa.Current()
	if !r.Body().Same(sb.Current().Body()) || !r.DeltaFullBody().Same(sb.Current().DeltaFullBody()) {
		t.Fatal("the shards' bodies are not shared")
	}
	keys := []bodyKey{
		{kind: sotwBody, typeURL: ClusterType, version: r.Version, sum: r.contentSum},
		{kind: deltaFullBody, typeURL: ClusterType, version: r.Version, sum: r.contentSum},
	}
	for _, k := range keys {
		if !bodies.cached(k) {
			t.Fatalf("body %v not cached", k.kind)
		}
	}
	r = nil
	a.ApplyUpdate(ClusterType, Update{Resources: []*Resource{res("free-a", "2")}, Kind: UpdateFull})
	collect(t, func() bool { return true }) // one class still holds the body:
	for _, k := range keys {
		if !bodies.cached(k) {
			t.Fatalf("body %v forgotten while class b's shard holds it", k.kind)
		}
	}
	if sb.Current().Body().Len() == 0 || sb.Current().DeltaFullBody().Len() == 0 {
		t.Fatal("class b's shard lost its body")
	}
	b.ApplyUpdate(ClusterType, Update{Resources: []*Resource{res("free-a", "3")}, Kind: UpdateFull})
	if !collect(t, func() bool { return !bodies.cached(keys[0]) && !bodies.cached(keys[1]) }) {
		t.Fatal("the bodies no shard holds are still cached after 100 collections")
	}
	runtime.KeepAlive(sa)
	runtime.KeepAlive(sb)
}

// collect runs garbage collections until done reports true, at most 100.
// After each it waits for a cleanup of its own (the fence: at most 100 more
// collections), so that the cleanups that collection queued have had their
// turn to run. The fence is an atomic, not a channel, so that collect works
// inside a synctest bubble too (the cleanup runs outside it).
func collect(t *testing.T, done func() bool) bool {
	t.Helper()
	for range 100 {
		fence := new(atomic.Bool)
		sentinel := new([64]byte) // not a tiny object: its cleanup runs
		runtime.AddCleanup(sentinel, func(f *atomic.Bool) { f.Store(true) }, fence)
		sentinel = nil
		for i := 0; !fence.Load(); i++ {
			if i == 100 {
				t.Fatal("no cleanup ran in 100 collections")
			}
			runtime.GC()
			runtime.Gosched()
		}
		if done() {
			return true
		}
	}
	return false
}

// Classes rebuilding the same content at once, and streams asking for the
// delta body at once, end with one body each.
func TestConcurrentShardsShareBodies(t *testing.T) {
	const n = 8
	rs := []*Resource{res("race-a", "1"), res("race-b", "1")}
	shards := make([]*Shard, n)
	concurrently(n, func(g int) {
		c, _ := newTestClass(t)
		shards[g] = c.Subscribe(ClusterType, NewSubscription(nil, true), &recorder{})
		c.ApplyUpdate(ClusterType, Update{Resources: rs, Kind: UpdateFull})
	})
	deltas := make([]wire.Body, n)
	concurrently(n, func(g int) { deltas[g] = shards[g].Current().DeltaFullBody() })
	for g, s := range shards {
		if !s.Current().Body().Same(shards[0].Current().Body()) || !deltas[g].Same(deltas[0]) {
			t.Fatalf("shard %d has bodies of its own", g)
		}
	}
}

// A shard version's SotW body is built on first use only (a shard only
// delta streams watch never builds it), and BodyLen is its size before.
func TestSotWBodyIsBuiltOnFirstUse(t *testing.T) {
	big := res("lazy-b", strings.Repeat("x", 300)) // a length of two varint bytes
	for _, u := range []Update{
		{Resources: []*Resource{res("lazy-a", "1"), big}, Kind: UpdateFull},
		{Resources: []*Resource{res("lazy-a", "1"), big}, Kind: UpdateFull, Version: "upstream-version"},
		{Kind: UpdateFull},
	} {
		c, _ := newTestClass(t)
		s := c.Subscribe(ClusterType, NewSubscription(nil, true), &recorder{})
		c.ApplyUpdate(ClusterType, u)
		r := s.Current()
		k := bodyKey{kind: sotwBody, typeURL: ClusterType, version: r.Version, sum: r.contentSum}
		if bodies.cached(k) {
			t.Fatalf("version %q: the SotW body was built before anyone asked for it", r.Version)
		}
		if got := r.Body().Len(); got != r.BodyLen || !bodies.cached(k) {
			t.Fatalf("version %q: body of %d bytes (cached %v), BodyLen %d", r.Version, got, bodies.cached(k), r.BodyLen)
		}
		// Released and collected, so that the test can run again (-count)
		// in this process, whose body cache outlives it.
		r.superseded()
		if !collect(t, func() bool { return !bodies.cached(k) }) {
			t.Fatalf("version %q: the released body is still cached after 100 collections", r.Version)
		}
	}
}
