package shard

import (
	"fmt"
	"slices"
	"testing"
)

// A full state re-sent as the very resources the table holds is found by
// identity; what changed (a new resource under a held name, a new name, a
// name gone) is still applied, and so is a state of equal content in new
// resources, or one with a name twice (the last wins).
func TestApplyFindsHeldResourcesByIdentity(t *testing.T) {
	const n = 2 * ptrSetMin
	first := bigState(n, "1").Resources
	c, wild := wildcardShard(t, Update{Kind: UpdateFull, Resources: slices.Clone(first), Distinct: true})
	apply := func(step int, rs []*Resource, distinct bool, wantChanged ...string) {
		t.Helper()
		before := wild.Current()
		c.ApplyUpdate(ClusterType, Update{Kind: UpdateFull, Resources: rs, Distinct: distinct})
		got := wild.Current()
		var changed []string
		if got != before {
			for _, r := range got.Changed {
				changed = append(changed, r.Name)
			}
			changed = append(changed, got.Removed...)
		}
		if !slices.Equal(changed, wantChanged) {
			t.Fatalf("step %d: changed %v, want %v", step, changed, wantChanged)
		}
		byName := map[string]*Resource{}
		for _, r := range rs {
			byName[r.Name] = r
		}
		for _, r := range got.Resources {
			if w := byName[r.Name]; w == nil || w.Hash != r.Hash {
				t.Fatalf("step %d: %q holds %v, the update says %v", step, r.Name, r, w)
			}
		}
		if len(got.Resources) != len(byName) {
			t.Fatalf("step %d: %d resources, the update has %d", step, len(got.Resources), len(byName))
		}
	}
	next := slices.Clone(first)
	next[5] = res(first[5].Name, "2")
	apply(1, next, true, first[5].Name)
	next = slices.Clone(next)
	next = append(next[:9], next[10:]...)
	next = append(next, res("kept-new", "1"))
	apply(2, next, true, "kept-new", first[9].Name)
	// Equal content in new resources: nothing changed.
	fresh := make([]*Resource, len(next))
	for i, r := range next {
		fresh[i] = &Resource{Name: r.Name, Any: slices.Clone(r.Any), Hash: r.Hash}
	}
	apply(3, fresh, true)
	// A name twice, the held resource last: it wins over the other.
	other := res(first[0].Name, "3")
	twice := append([]*Resource{other}, next...)
	apply(4, twice, false)
	twice = append(slices.Clone(next), other)
	apply(5, twice, false, first[0].Name)
}

func TestPtrSet(t *testing.T) {
	tb := &table{}
	var in []*Resource
	for i := range 100 {
		r := res(fmt.Sprint(i), "1")
		tb.resources.put(r)
		in = append(in, r)
	}
	s := tb.heldPtrs()
	defer s.release()
	for _, r := range in {
		if !s.has(r) {
			t.Fatalf("%q held, not in the set", r.Name)
		}
		if same := res(r.Name, "1"); s.has(same) {
			t.Fatalf("another resource of %q's content is in the set", r.Name)
		}
	}
}
