package relay

import (
	"iter"
	"slices"
	"strings"
)

// typeTable is a stream's per-type state by type URL, a slice sorted by
// type URL. A stream has few types (one on a per-type service, four to
// six on an Envoy's ADS stream, at most Options.MaxTypesPerStream), and
// a Go map of even one entry is a 200-byte group beside its header: at
// 10,000 idle streams that was 2 MB. Lookups are binary searches; types
// are only added, by the stream's reader. Guarded as the stream's types.
type typeTable[S any] struct {
	entries []typeEntry[S]
}

type typeEntry[S any] struct {
	typeURL string
	sub     S
}

func (t *typeTable[S]) search(typeURL string) (int, bool) {
	return slices.BinarySearchFunc(t.entries, typeURL, func(e typeEntry[S], u string) int { return strings.Compare(e.typeURL, u) })
}

// get returns the state of typeURL, if the stream has one.
func (t *typeTable[S]) get(typeURL string) (S, bool) {
	if i, ok := t.search(typeURL); ok {
		return t.entries[i].sub, true
	}
	var none S
	return none, false
}

// put sets the state of typeURL.
func (t *typeTable[S]) put(typeURL string, sub S) {
	i, ok := t.search(typeURL)
	if ok {
		t.entries[i].sub = sub
		return
	}
	t.entries = slices.Insert(t.entries, i, typeEntry[S]{typeURL: typeURL, sub: sub})
}

// len is the number of types.
func (t *typeTable[S]) len() int { return len(t.entries) }

// all yields every type URL and its state, in type URL order.
func (t *typeTable[S]) all() iter.Seq2[string, S] {
	return func(yield func(string, S) bool) {
		for _, e := range t.entries {
			if !yield(e.typeURL, e.sub) {
				return
			}
		}
	}
}
