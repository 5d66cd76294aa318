package shard

import "sync"

// ptrSet is a set of resources by identity, for one apply: an
// open-addressed table probed from the resource's Hash (already a good
// hash), at most 3/4 full. A SotW upstream re-sends a type's whole state
// for every change, and with a store (see ResourceStore) each resource it
// sent before arrives as the very resource the table holds: apply finds
// those by pointer in this set of the table's resources, rather than by
// name in the table's index (a hash of the name and a compare of its
// bytes), and looks up by name only the few that changed.
type ptrSet struct{ slots []*Resource }

// ptrSetMin is the fewest resources of an update worth a set of the
// table's: below it, or when the table holds more than twice the update's,
// apply looks every resource up by name.
const ptrSetMin = 64

var ptrSets = sync.Pool{New: func() any { return new(ptrSet) }}

// heldPtrs returns a set of every resource the table holds; release it
// with release.
func (t *table) heldPtrs() *ptrSet {
	s := ptrSets.Get().(*ptrSet)
	size := 16
	for 3*size < 4*t.resources.len() {
		size *= 2
	}
	if len(s.slots) < size || len(s.slots) > 4*size {
		s.slots = make([]*Resource, size)
	}
	for r := range t.resources.all {
		s.add(r)
	}
	return s
}

func (s *ptrSet) add(r *Resource) {
	mask := len(s.slots) - 1
	j := int(r.Hash) & mask
	for s.slots[j] != nil {
		j = (j + 1) & mask
	}
	s.slots[j] = r
}

// has reports whether r itself (not another of its content) is in the set.
func (s *ptrSet) has(r *Resource) bool {
	mask := len(s.slots) - 1
	for j := int(r.Hash) & mask; s.slots[j] != nil; j = (j + 1) & mask {
		if s.slots[j] == r {
			return true
		}
	}
	return false
}

// release empties the set (it would keep its resources alive) and pools
// it; one of more than 32 × compactMin slots (some 24,000 resources) is
// left to the collector rather than kept that large.
func (s *ptrSet) release() {
	if len(s.slots) > 32*compactMin {
		return
	}
	clear(s.slots)
	ptrSets.Put(s)
}
