package upstream

import (
	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// maxChanged is the most resources of a response not held that the fast
// path validates alone (see validator.sotwFast); more, and the whole
// response is validated as the first one was.
const maxChanged = 8

// sotwFast validates the resources of sc's SotW response into sc.out
// against the store, and reports false when it cannot tell (no store,
// a wrapper, a fault, or more than maxChanged resources not held): the
// response is then validated in full. A control plane re-sends a type's
// whole state for every change, in any order: the unchanged resources
// (and those another class got first) are held, and a resource whose
// hash and bytes are those of a held plain one is that resource, checked
// when it was first held, not parsed or checked again. It is found at
// most once (twice would be a duplicate name). Each other resource is
// validated alone (validator.resource) and its name compared with every
// other of the response. The store is the index: a class's validator
// keeps none of its own (one of its last response cost 11 bytes a
// resource per class).
func (v *validator) sotwFast(sc *sotwScratch) bool {
	typeURL, raws := sc.resp.TypeURL, sc.resp.Resources
	if v.store == nil || len(raws) == 0 {
		return false
	}
	sc.hashes = sc.hashes[:0]
	for _, raw := range raws {
		sc.hashes = append(sc.hashes, dedup.ResourceHash(raw))
		sc.out = append(sc.out, nil)
	}
	out := sc.out
	found := v.store.LookupPlain(sc.hashes, raws, out)
	if len(raws)-found > maxChanged {
		return false
	}
	sc.met.reset(found)
	for i, r := range out {
		if r != nil && !sc.met.add(out, i) {
			return false // the same resource twice
		}
	}
	msgType := messageType(typeURL)
	var changed [maxChanged]int
	n := 0
	for i, r := range out {
		if r != nil {
			continue
		}
		if t, _, err := wire.AnyFields(raws[i]); err != nil || string(t) == wire.ResourceTypeURL {
			return false // a fault (reported in order by the full path), or a wrapper
		}
		r, err := v.resource(typeURL, msgType, i, candidate{raw: raws[i]})
		if err != nil {
			return false
		}
		out[i] = r
		changed[n] = i
		n++
	}
	for _, i := range changed[:n] {
		for j, r := range out {
			if j != i && r.Name == out[i].Name {
				return false
			}
		}
	}
	return true
}

// resourceSet is a set of the resources of a response's list, by identity:
// an open-addressed table of their positions in it (plus one; 0: empty),
// probed from their Hash, at most 3/4 full. Reset for each response;
// pooled with its scratch.
type resourceSet struct{ slots []int32 }

// reset empties the set, with room for n resources.
func (s *resourceSet) reset(n int) {
	size := 16
	for 3*size < 4*n {
		size *= 2
	}
	if len(s.slots) < size || len(s.slots) > 4*size {
		s.slots = make([]int32, size)
		return
	}
	clear(s.slots)
}

// add puts list[i] in the set and reports whether it was not in it.
func (s *resourceSet) add(list []*shard.Resource, i int) bool {
	r, mask := list[i], len(s.slots)-1
	for j := int(r.Hash) & mask; ; j = (j + 1) & mask {
		switch p := s.slots[j]; {
		case p == 0:
			s.slots[j] = int32(i + 1)
			return true
		case list[p-1] == r:
			return false
		}
	}
}
