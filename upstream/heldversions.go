package upstream

import (
	"iter"
	"unique"
)

// heldVersions is the upstream version of each resource of one type that a
// delta class stream holds, by name: what the stream's first request of
// the type claims in initial_resource_versions (delta.go).
//
// Every class keeps one for every resource it holds, and classes mostly
// hold the same names at the same versions (go-control-plane's delta
// versions are content hashes, 64 hex digits): names and versions are
// interned (package unique), so their bytes exist once in the process
// however many classes hold them, and are freed when no class holds them
// any more; a class's map is two pointers a slot. A map of string copies
// cost about 170 bytes per name per class, this about 42
// (BenchmarkHeldVersions; docs/benchmarks.md, "RSS with a delta upstream").
//
// Owned by the class stream's run goroutine.
type heldVersions map[unique.Handle[string]]unique.Handle[string]

// set records version for name. Neither string is kept: both are interned
// (copied when first seen), so they may alias a received message.
func (h heldVersions) set(name, version string) {
	h[unique.Make(name)] = unique.Make(version)
}

// has reports whether a version is held for name.
func (h heldVersions) has(name string) bool {
	if len(h) == 0 {
		return false
	}
	_, ok := h[unique.Make(name)]
	return ok
}

// remove forgets name.
func (h heldVersions) remove(name string) {
	if len(h) > 0 {
		delete(h, unique.Make(name))
	}
}

// all yields every name and its version.
func (h heldVersions) all() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for name, version := range h {
			if !yield(name.Value(), version.Value()) {
				return
			}
		}
	}
}
