package shard

import (
	"fmt"
	"slices"
	"testing"
)

// A wildcard shard's response is rebuilt from the sums its table keeps as
// resources come and go; a shard naming the same resources sums them from
// scratch. Through updates that change, rename, add and remove resources
// the two agree on content (version, size, what changed), and every new
// content has its own sum.
func TestKeptSumsAgreeWithScratch(t *testing.T) {
	const n = 40
	c, wild := wildcardShard(t, bigState(n, "1"))
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("kept-%05d", i)
	}
	named := c.Subscribe(ClusterType, NewSubscription(names, false), &recorder{})
	state := bigState(n, "1").Resources
	seen := map[uint64]int{}
	check := func(step int, wantChanged []string) {
		t.Helper()
		w, s := wild.Current(), named.Current()
		if w == nil || s == nil {
			t.Fatalf("step %d: no response", step)
		}
		if w.Sum != s.Sum || w.Version != s.Version || w.BodyLen != s.BodyLen {
			t.Fatalf("step %d: wildcard %x %s %d B, by name %x %s %d B", step, w.Sum, w.Version, w.BodyLen, s.Sum, s.Version, s.BodyLen)
		}
		if got := w.Body().Len(); got != w.BodyLen {
			t.Fatalf("step %d: the body is %d B, BodyLen says %d", step, got, w.BodyLen)
		}
		if prev, ok := seen[w.Sum]; ok {
			t.Fatalf("step %d: the content of step %d and this one share a sum", step, prev)
		}
		seen[w.Sum] = step
		var changed []string
		for _, r := range w.Changed {
			changed = append(changed, r.Name)
		}
		if wantChanged != nil && !slices.Equal(changed, wantChanged) {
			t.Fatalf("step %d: changed %v, want %v", step, changed, wantChanged)
		}
	}
	check(0, nil)
	apply := func(step int, wantChanged ...string) {
		t.Helper()
		c.ApplyUpdate(ClusterType, Update{Kind: UpdateFull, Resources: slices.Clone(state)})
		check(step, wantChanged)
	}
	// One resource changed, then back (a content seen before: its sum
	// again, so forget it), then another.
	state[7] = res(names[7], "2")
	apply(1, names[7])
	state[7] = res(names[7], "1")
	clear(seen)
	apply(2, names[7])
	state[30] = res(names[30], "3")
	apply(3, names[30])
	// Two resources swap contents: the same multiset of hashes under
	// other names.
	state[3], state[4] = res(names[3], "x"), res(names[4], "y")
	apply(4)
	state[3], state[4] = res(names[3], "y"), res(names[4], "x")
	apply(5, names[3], names[4])
	// A resource gone, the named shard's name now unknown to both.
	state = slices.Delete(state, 10, 11)
	apply(6)
	if w := wild.Current(); len(w.Resources) != n-1 || len(w.Removed) != 1 || w.Removed[0] != names[10] {
		t.Fatalf("removal: %d resources, removed %v", len(w.Resources), w.Removed)
	}
}
