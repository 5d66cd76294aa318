package shard

import (
	"runtime"
	"slices"
	"testing"
)

// sameArray reports whether a and b are the same list in memory.
func sameArray(a, b []string) bool { return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0] }

// Classes holding resources of the same names, whatever their content,
// share one sorted name list, which their wildcard shards' responses use
// as Names; other names get a list of their own; a list is forgotten once
// no table holds it.
func TestSameNamesShareOneList(t *testing.T) {
	names := []string{"names-a", "names-b", "names-c"}
	state := func(content string, names ...string) Update {
		rs := make([]*Resource, len(names))
		for i, n := range names {
			rs[i] = res(n, content)
		}
		return Update{Resources: rs, Kind: UpdateFull}
	}
	a, sa := wildcardShard(t, state("1", names...))
	b, sb := wildcardShard(t, state("2", names[2], names[0], names[1]))
	ra, rb := sa.Current(), sb.Current()
	if ra.Body().Same(rb.Body()) {
		t.Fatal("the test's classes have the same content")
	}
	if !slices.Equal(ra.Names, names) || !sameArray(ra.Names, rb.Names) {
		t.Fatalf("names %q and %q: want %q, one list", ra.Names, rb.Names, names)
	}
	if ta, tb := a.tables[ClusterType], b.tables[ClusterType]; ta.resources.names != tb.resources.names || !sameArray(ta.resources.names.names, ra.Names) {
		t.Fatal("the tables do not share the list their responses use")
	}
	c, sc := wildcardShard(t, state("1", names[:2]...))
	if rc := sc.Current(); !slices.Equal(rc.Names, names[:2]) || sameArray(rc.Names[:1], ra.Names[:1]) {
		t.Fatalf("other names %q share a list with %q", rc.Names, ra.Names)
	}
	// A named shard's response lists its own names.
	sn := a.Subscribe(ClusterType, NewSubscription([]string{"names-b"}, false), &recorder{})
	if got := sn.Current().Names; !slices.Equal(got, []string{"names-b"}) {
		t.Fatalf("named shard's names %q", got)
	}
	ra, rb = nil, nil
	for _, cl := range []*Class{a, b} {
		cl.ApplyUpdate(ClusterType, state("3", "names-other"))
	}
	if !collect(t, func() bool { return !nameLists.cached(names) }) {
		t.Fatal("the list no table holds is still cached after 100 collections")
	}
	if !nameLists.cached(names[:2]) {
		t.Fatal("a list a table holds was forgotten")
	}
	runtime.KeepAlive(c)
}
