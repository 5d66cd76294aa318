package upstream

import (
	"iter"
	"slices"
	"strings"
	"unique"
)

// heldVersions is the upstream version of each resource of one type that a
// delta class stream holds: what the stream's first request of the type
// claims in initial_resource_versions (delta.go). The zero value holds
// nothing; a nil *heldVersions reads as empty.
//
// Every class keeps one entry for every resource it holds, and classes
// mostly hold the same names at the same versions (go-control-plane's delta
// versions are content hashes, 64 hex digits). So an entry is interned
// (package unique): its name and version exist once in the process however
// many classes hold them, and are freed when no class holds them any more.
// A class's own cost is one pointer per name, in a slice sorted by name
// (lookups are binary searches). A map of string copies cost about 170
// bytes per name per class, 17 MB at 100 classes of 1,000 clusters
// (BenchmarkHeldVersions; bench/results/issue14-rss-delta-upstream).
//
// Owned by the class stream's run goroutine.
type heldVersions struct {
	entries []unique.Handle[heldVersion] // sorted by name, names distinct
}

// heldVersion is one name's upstream version.
type heldVersion struct {
	name, version string
}

func entryName(e unique.Handle[heldVersion], name string) int {
	return strings.Compare(e.Value().name, name)
}

func (h *heldVersions) find(name string) (int, bool) {
	return slices.BinarySearchFunc(h.entries, name, entryName)
}

// has reports whether a version is held for name.
func (h *heldVersions) has(name string) bool {
	if h == nil {
		return false
	}
	_, ok := h.find(name)
	return ok
}

// set records the versions of set (names distinct). Nothing of set is
// kept: the entries are interned (copied when first seen), so its strings
// may alias a received message.
func (h *heldVersions) set(set []heldVersion) {
	var added []unique.Handle[heldVersion]
	for _, e := range set {
		hv := unique.Make(e)
		if i, ok := h.find(e.name); ok {
			h.entries[i] = hv
		} else {
			added = append(added, hv)
		}
	}
	if len(added) == 0 {
		return
	}
	slices.SortStableFunc(added, func(a, b unique.Handle[heldVersion]) int { return strings.Compare(a.Value().name, b.Value().name) })
	n := 0 // a name set twice keeps its last version
	for _, e := range added {
		if n > 0 && added[n-1].Value().name == e.Value().name {
			added[n-1] = e
			continue
		}
		added[n] = e
		n++
	}
	added = added[:n]
	// Merged into a slice of the exact size: a class holds it until its
	// next new name.
	merged := make([]unique.Handle[heldVersion], 0, len(h.entries)+len(added))
	old := h.entries
	for len(old) > 0 && len(added) > 0 {
		if entryName(old[0], added[0].Value().name) < 0 {
			merged, old = append(merged, old[0]), old[1:]
		} else {
			merged, added = append(merged, added[0]), added[1:]
		}
	}
	h.entries = append(append(merged, old...), added...)
}

// remove forgets names.
func (h *heldVersions) remove(names []string) {
	if h == nil || len(h.entries) == 0 || len(names) == 0 {
		return
	}
	if len(names) == 1 {
		if i, ok := h.find(names[0]); ok {
			h.entries = slices.Delete(h.entries, i, i+1)
		}
	} else {
		gone := make(map[string]struct{}, len(names))
		for _, n := range names {
			gone[n] = struct{}{}
		}
		h.entries = slices.DeleteFunc(h.entries, func(e unique.Handle[heldVersion]) bool {
			_, ok := gone[e.Value().name]
			return ok
		})
	}
	if cap(h.entries) > 2*len(h.entries)+64 {
		h.entries = slices.Clone(h.entries) // most were removed: free the rest
	}
}

// all yields every name and its version, by name.
func (h *heldVersions) all() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		if h == nil {
			return
		}
		for _, e := range h.entries {
			if v := e.Value(); !yield(v.name, v.version) {
				return
			}
		}
	}
}
