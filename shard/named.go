package shard

// What a response's resources refer to by name, for the relay's removal
// order: which Clusters its RouteConfigurations or Listeners route to
// (Resource.References) and which children its Listeners or Clusters name
// (Resource.Children). Built once per response, on the first ask, by any
// stream (a fan-out's streams share it); most responses are never asked.

// Relation is a way a resource refers to others by name.
type Relation uint8

const (
	// RoutesTo: the Clusters a RouteConfiguration or Listener routes to
	// (Resource.References).
	RoutesTo Relation = iota
	// Names: the children a Listener or Cluster names (Resource.Children).
	Names
)

// namedIndex is a response's names referred to, by relation. Read-only
// once built.
type namedIndex [2]map[string]struct{}

// Refers reports whether some resource of r refers to name by rel.
func (r *Response) Refers(rel Relation, name string) bool {
	idx := r.named.Load()
	if idx == nil {
		idx = new(namedIndex)
		for _, res := range r.Resources {
			for rl, names := range [2][]string{res.References(), res.Children()} {
				for _, n := range names {
					if idx[rl] == nil {
						idx[rl] = map[string]struct{}{}
					}
					idx[rl][n] = struct{}{}
				}
			}
		}
		r.named.Store(idx) // built alike by any racing stream
	}
	_, ok := idx[rel][name]
	return ok
}

// Of returns the names res refers to by rel.
func (rel Relation) Of(res *Resource) []string {
	if rel == RoutesTo {
		return res.References()
	}
	return res.Children()
}
