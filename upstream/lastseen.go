package upstream

import (
	"bytes"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// lastSeen indexes, by content hash, the resources of a type's last SotW
// response that passed validation, so that the next response's unchanged
// resources (a control plane re-sends the whole state for every change,
// in any order) are recognised by their hash and bytes alone: not parsed,
// checked or looked up in the store again. Only plain resources (no TTL,
// aliases or upstream version: a SotW resource not wrapped) are indexed;
// their Hash is that of their Any bytes. It is an open-addressed table of
// the resources (16 bytes a resource), rebuilt for every response: a map
// would take three times that for every class. Owned by the validator's
// caller.
type lastSeen struct {
	table []*shard.Resource // linear probing by Hash; a power of two ≥ 4/3 × entries; nil: empty
	met   []uint64          // bit per table slot: met in the response being validated
}

// maxChanged is the most resources of a response not found in the index
// that the fast path validates alone (see validator.sotwFast); more, and
// the whole response is validated as the first one was.
const maxChanged = 8

// reset indexes resources (the plain ones) afresh.
func (ls *lastSeen) reset(resources []*shard.Resource) {
	size := 8
	for 3*size < 4*len(resources) { // load at most 3/4: linear probing stays short
		size *= 2
	}
	if len(ls.table) < size || len(ls.table) > 4*size {
		ls.table, ls.met = make([]*shard.Resource, size), make([]uint64, (size+63)/64)
	} else {
		clear(ls.table)
	}
	for _, r := range resources {
		if !r.Plain() {
			continue
		}
		i := ls.slot(r.Hash, r.Any)
		if ls.table[i] == nil {
			ls.table[i] = r
		}
	}
}

// slot returns the slot of the indexed resource whose Any is raw (whose
// hash is h), or of the empty slot it would take.
func (ls *lastSeen) slot(h uint64, raw []byte) int {
	mask := len(ls.table) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		if r := ls.table[i]; r == nil || r.Hash == h && bytes.Equal(r.Any, raw) {
			return i
		}
	}
}

// sotwFast validates the resources of a SotW response of typeURL (raws)
// into out against the type's last response, and reports false when it
// cannot tell (nothing indexed, a wrapper, a fault, or more than
// maxChanged resources not indexed): sotw then validates the response in
// full. A resource whose hash and bytes are those of an indexed one is
// that resource, and is met at most once (twice would be a duplicate
// name). Each other is validated alone (validator.resource) and its name
// compared with every other of the response. On success the index holds
// this response's resources.
func (v *validator) sotwFast(typeURL string, raws [][]byte, out []*shard.Resource) ([]*shard.Resource, bool) {
	ls := v.last[typeURL]
	if ls == nil {
		return out, false
	}
	clear(ls.met)
	var changed [maxChanged]int
	n := 0
	for i, raw := range raws {
		if s := ls.slot(dedup.ResourceHash(raw), raw); ls.table[s] != nil {
			if ls.met[s/64]&(1<<(s%64)) != 0 {
				return out, false // the same resource twice
			}
			ls.met[s/64] |= 1 << (s % 64)
			out = append(out, ls.table[s])
			continue
		}
		if n == maxChanged {
			return out, false
		}
		changed[n] = i
		n++
		out = append(out, nil)
	}
	msgType := messageType(typeURL)
	for _, i := range changed[:n] {
		if t, _, err := wire.AnyFields(raws[i]); err != nil || string(t) == wire.ResourceTypeURL {
			return out, false // a fault (reported in order by the full path), or a wrapper
		}
		r, err := v.resource(typeURL, msgType, i, candidate{raw: raws[i]})
		if err != nil {
			return out, false
		}
		out[i] = r
	}
	for _, i := range changed[:n] {
		for j, r := range out {
			if j != i && r.Name == out[i].Name {
				return out, false
			}
		}
	}
	ls.reset(out)
	return out, true
}

// remember indexes the resources of typeURL's SotW response that passed
// validation in full, for the next response.
func (v *validator) remember(typeURL string, resources []*shard.Resource) {
	if v.last == nil {
		v.last = map[string]*lastSeen{}
	}
	ls := v.last[typeURL]
	if ls == nil {
		ls = &lastSeen{}
		v.last[typeURL] = ls
	}
	ls.reset(resources)
}

// forget drops typeURL's index (the class asks nothing of the type).
func (v *validator) forget(typeURL string) { delete(v.last, typeURL) }
