package shard

import "maps"

// shardSet is the shards subscribing to one name, a value in table.byName.
// Most names are in exactly one shard: that one is held inline, and the set
// becomes a map only when a second shard names it. With a map per name,
// 100,000 names in one shard cost 227 bytes each; inline, 53 (see
// docs/benchmarks.md, "Shard table cost per subscribed name").
//
// The zero value is empty; table.byName holds no empty set.
type shardSet struct {
	one  *Shard              // the only member, when many is nil
	many map[*Shard]struct{} // the members, when more than one
}

// with returns the set with s added.
func (x shardSet) with(s *Shard) shardSet {
	switch {
	case x.many != nil:
		x.many[s] = struct{}{}
	case x.one == nil || x.one == s:
		x.one = s
	default:
		x.many = map[*Shard]struct{}{x.one: {}, s: {}}
		x.one = nil
	}
	return x
}

// without returns the set with s removed; a map of one member goes back
// inline.
func (x shardSet) without(s *Shard) shardSet {
	if x.many == nil {
		if x.one == s {
			x.one = nil
		}
		return x
	}
	delete(x.many, s)
	if len(x.many) == 1 {
		for m := range x.many {
			x.one = m
		}
		x.many = nil
	}
	return x
}

func (x shardSet) empty() bool { return x.one == nil && len(x.many) == 0 }

// addTo adds the members to out.
func (x shardSet) addTo(out map[*Shard]struct{}) {
	if x.one != nil {
		out[x.one] = struct{}{}
	}
	maps.Copy(out, x.many)
}
