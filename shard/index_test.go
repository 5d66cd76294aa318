package shard

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// checkIndex compares x with want (name → resource) through every way
// of reading it.
func checkIndex(t *testing.T, step int, x *resIndex, want map[string]*Resource) {
	t.Helper()
	if x.len() != len(want) {
		t.Fatalf("step %d: len %d, want %d", step, x.len(), len(want))
	}
	for n, r := range want {
		if got, ok := x.get(n); !ok || got != r {
			t.Fatalf("step %d: get(%q) = %v, %v; want %v", step, n, got, ok, r)
		}
	}
	seen := map[string]*Resource{}
	for r := range x.all {
		if _, dup := seen[r.Name]; dup {
			t.Fatalf("step %d: all yields %q twice", step, r.Name)
		}
		seen[r.Name] = r
	}
	if !maps.Equal(seen, want) {
		t.Fatalf("step %d: all yields %d resources, want %d", step, len(seen), len(want))
	}
	var held heldSet
	for _, r := range want {
		held.add(r)
	}
	if x.held != held {
		t.Fatalf("step %d: the index keeps %+v of what it holds, want %+v", step, x.held, held)
	}
}

// The index holds what a map would, under any sequence of puts (new names
// and new contents), removes, settles and sorted lists; a sorted list it
// handed out is never written afterwards.
func TestResIndexIsAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var x resIndex
	want := map[string]*Resource{}
	type handedOut struct {
		list []*Resource
		copy []*Resource
	}
	var lists []handedOut
	for step := range 5000 {
		name := fmt.Sprintf("idx-%03d", rng.IntN(300))
		switch op := rng.IntN(10); {
		case op < 5:
			r := res(name, fmt.Sprint(step))
			if rng.IntN(4) == 0 {
				r.Rare = NewRare([]string{"alias-" + name}, nil, "")
			}
			x.put(r)
			want[name] = r
		case op < 8:
			x.remove(name)
			delete(want, name)
		case op < 9:
			x.settle()
		default:
			names, list := x.sorted()
			if !slices.IsSortedFunc(list, func(a, b *Resource) int { return strings.Compare(a.Name, b.Name) }) || len(names) != len(list) {
				t.Fatalf("step %d: the sorted list is not sorted", step)
			}
			for i, r := range list {
				if names[i] != r.Name || want[r.Name] != r {
					t.Fatalf("step %d: sorted list %d is %q (named %q), not what is held", step, i, r.Name, names[i])
				}
			}
			lists = append(lists, handedOut{list, slices.Clone(list)})
		}
		if _, ok := x.get("idx-none"); ok {
			t.Fatal("a name never put is held")
		}
		checkIndex(t, step, &x, want)
	}
	for i, l := range lists {
		if !slices.Equal(l.list, l.copy) {
			t.Fatalf("sorted list %d was written after it was handed out", i)
		}
	}
	x.clear()
	checkIndex(t, -1, &x, map[string]*Resource{})
}

// A table holds its resources in one sorted list: its wildcard shard's
// response uses the list and names themselves, and a class of other
// content under the same names shares the names and their slots.
func TestWildcardResponseIsTheTableList(t *testing.T) {
	a, sa := wildcardShard(t, bigState(50, "1"))
	b, sb := wildcardShard(t, bigState(50, "2"))
	ta, tb := a.tables[ClusterType], b.tables[ClusterType]
	r := sa.Current()
	if len(r.Resources) != 50 || &r.Resources[0] != &ta.resources.list[0] || !sameArray(r.Names, ta.resources.names.names) {
		t.Fatal("the wildcard response copied the table's list or names")
	}
	if ta.resources.names != tb.resources.names || sb.Current().Resources[0] == r.Resources[0] {
		t.Fatal("classes of the same names do not share them, or share resources of other content")
	}
}
