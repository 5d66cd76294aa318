package shard

import (
	"hash/maphash"
	"slices"
	"strings"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// resIndex is a table's resources by name, in the least memory a class
// can hold them: a list of resource pointers sorted by name (8 bytes a
// resource, the list a wildcard shard's response uses as its Resources),
// found through the sorted names and their hash slots, which depend on
// the names alone and are shared by every table, of any class, holding
// resources of the same names (nameCache). A Go map of 10,000 names costs
// 436 KB a class; this, 80 KB and a share of the names.
//
// A new content under a held name is written into the list (copied first
// if the list was handed out: handed-out lists are never written). Names
// added or removed wait in small maps until the sorted list is next asked
// for (sorted), which merges them. Guarded by Class.mu, like its table.
type resIndex struct {
	names *nameList   // sorted names of list, with their slots (nil: none yet)
	list  []*Resource // list[i] is named names.names[i]
	owned bool        // list was not handed out: written in place

	// Since names was made: names added (with their resources) and names
	// of names removed. nil when none.
	added   map[string]*Resource
	removed map[string]struct{}

	// held is what a wildcard shard's response needs to know of every
	// resource held, kept as resources are put and removed, so a class
	// update that changes one resource of many rebuilds in time of the
	// change, not of the table (see heldSet).
	held heldSet
}

// heldSet sums up a set of resources: the hash of its (name, resource
// hash) members, its encoded size in a response, and how many have a rare
// part (aliases, a TTL: a response looks at each resource only when some
// do).
type heldSet struct {
	members dedup.SetSum
	size    int // sum of wire.ResourceSize(len(Any))
	rare    int // resources with a Rare part
}

func (h *heldSet) add(r *Resource) {
	h.members.Add(r.Name, r.Hash)
	h.size += wire.ResourceSize(len(r.Any))
	if r.Rare != nil {
		h.rare++
	}
}

func (h *heldSet) remove(r *Resource) {
	h.members.Remove(r.Name, r.Hash)
	h.size -= wire.ResourceSize(len(r.Any))
	if r.Rare != nil {
		h.rare--
	}
}

// get returns the resource named name.
func (x *resIndex) get(name string) (*Resource, bool) {
	if r, ok := x.added[name]; ok {
		return r, true
	}
	i, ok := x.find(name)
	if !ok {
		return nil, false
	}
	return x.list[i], true
}

// find returns the position in list of a held name from names.
func (x *resIndex) find(name string) (int, bool) {
	if x.names == nil {
		return 0, false
	}
	if _, gone := x.removed[name]; gone {
		return 0, false
	}
	return x.names.find(name)
}

// put holds r under its name, in place of any resource of that name.
func (x *resIndex) put(r *Resource) {
	x.held.add(r)
	if i, ok := x.names.find(r.Name); ok && x.names != nil {
		if _, gone := x.removed[r.Name]; gone {
			delete(x.removed, r.Name) // removed and put back since names was made
		} else {
			x.held.remove(x.list[i])
		}
		if !x.owned {
			x.list, x.owned = slices.Clone(x.list), true
		}
		x.list[i] = r
		return
	}
	if x.added == nil {
		x.added = map[string]*Resource{}
	}
	if old, ok := x.added[r.Name]; ok {
		x.held.remove(old)
	}
	x.added[r.Name] = r
}

// remove forgets the resource named name, if held.
func (x *resIndex) remove(name string) {
	if r, ok := x.added[name]; ok {
		x.held.remove(r)
		delete(x.added, name)
		return
	}
	if i, ok := x.find(name); ok {
		x.held.remove(x.list[i])
		if x.removed == nil {
			x.removed = map[string]struct{}{}
		}
		x.removed[name] = struct{}{}
	}
}

// len is the number of resources held.
func (x *resIndex) len() int {
	n := len(x.added) - len(x.removed)
	if x.names != nil {
		n += len(x.names.names)
	}
	return n
}

// all calls yield with every resource held, in no particular order, until
// yield returns false. yield may remove the resource it is given.
func (x *resIndex) all(yield func(*Resource) bool) {
	for _, r := range x.list {
		if _, gone := x.removed[r.Name]; !gone && !yield(r) {
			return
		}
	}
	for _, r := range x.added {
		if !yield(r) {
			return
		}
	}
}

// sorted returns the names held, sorted, and their resources in that
// order; both are shared read-only from now on (a later put copies).
func (x *resIndex) sorted() ([]string, []*Resource) {
	if len(x.added) > 0 || len(x.removed) > 0 || x.names == nil {
		x.merge()
	}
	x.owned = false
	return x.names.names, x.list
}

// settle merges the names added and removed once they are an eighth of
// the list: a table whose shards all subscribe by name (never asking for
// the sorted list) still holds its resources in the list, and a stream of
// single additions merges in amortized constant time.
func (x *resIndex) settle() {
	if pending := len(x.added) + len(x.removed); pending > 0 && pending*8 >= len(x.list) {
		x.merge()
	}
}

// merge makes names and list anew with the names added and removed.
func (x *resIndex) merge() {
	added := make([]*Resource, 0, len(x.added))
	for _, r := range x.added {
		added = append(added, r)
	}
	slices.SortFunc(added, func(a, b *Resource) int { return strings.Compare(a.Name, b.Name) })
	list := make([]*Resource, 0, x.len()) // no room to spare: it is kept
	for _, r := range x.list {
		if _, gone := x.removed[r.Name]; gone {
			continue
		}
		for len(added) > 0 && added[0].Name < r.Name {
			list, added = append(list, added[0]), added[1:]
		}
		list = append(list, r)
	}
	list = append(list, added...)
	names := make([]string, len(list))
	for i, r := range list {
		names[i] = r.Name
	}
	x.names, x.list, x.owned = nameLists.share(names), list, true
	x.added, x.removed = nil, nil
}

// clear forgets every resource.
func (x *resIndex) clear() { *x = resIndex{} }

// slotsOf returns the hash slots of sorted names: a table of a power of
// two entries, at most three quarters full, each a position in names plus
// one (0: empty), found by linear probing from the name's hash.
func slotsOf(seed maphash.Seed, names []string) []int32 {
	n := 1
	for n*3 < len(names)*4 {
		n *= 2
	}
	s := make([]int32, n)
	for i, name := range names {
		j := int(maphash.String(seed, name)) & (n - 1)
		for s[j] != 0 {
			j = (j + 1) & (n - 1)
		}
		s[j] = int32(i + 1)
	}
	return s
}

// find returns the position of name in l.names.
func (l *nameList) find(name string) (int, bool) {
	if l == nil || len(l.slots) == 0 {
		return 0, false
	}
	mask := len(l.slots) - 1
	for j := int(maphash.String(nameLists.seed, name)) & mask; ; j = (j + 1) & mask {
		p := l.slots[j]
		if p == 0 {
			return 0, false
		}
		if l.names[p-1] == name {
			return int(p - 1), true
		}
	}
}
