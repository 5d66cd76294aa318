package shard

import (
	"slices"
	"testing"
)

// The legacy wildcard read from requests (a downstream stream): an empty
// list is the wildcard until a non-empty one came, nothing after; "*" is
// the wildcard at any time; a stale request's list ends it too (Note).
func TestSotWNamesRead(t *testing.T) {
	var n SotWNames
	steps := []struct {
		names []string
		want  Subscription
	}{
		{nil, Subscription{Wildcard: true}},
		{nil, Subscription{Wildcard: true}}, // still the legacy wildcard
		{[]string{"b", "a"}, Subscription{Names: []string{"a", "b"}}},
		{nil, Subscription{}}, // the empty list now asks for nothing
		{[]string{"*", "a"}, Subscription{Wildcard: true, Names: []string{"a"}}},
		{[]string{""}, Subscription{}},
	}
	for i, s := range steps {
		if got := n.Read(s.names); !got.Equal(s.want) {
			t.Fatalf("step %d: Read(%q) = %+v, want %+v", i, s.names, got, s.want)
		}
	}
	var stale SotWNames
	stale.Note([]string{"a"})
	if got := stale.Read(nil); !got.Empty() {
		t.Fatalf("after a stale request naming a, Read([]) = %+v, want nothing", got)
	}
	var empty SotWNames
	empty.Note(nil)
	if got := empty.Read(nil); !got.Wildcard {
		t.Fatalf("after a stale empty request, Read([]) = %+v, want the legacy wildcard", got)
	}
}

// The legacy wildcard written in requests (the upstream side): the
// wildcard alone is the empty list until names were sent, then it cannot
// be said without "*"; nothing cannot be said before a list; with
// explicitStar the wildcard is always "*", names beside it.
func TestSotWNamesWrite(t *testing.T) {
	wild := Subscription{Wildcard: true}
	names := Subscription{Names: []string{"a"}}
	both := Subscription{Wildcard: true, Names: []string{"a"}}
	steps := []struct {
		want   Subscription
		star   bool
		names  []string
		ok     bool
		listed bool
	}{
		{Subscription{}, false, nil, false, false}, // [] would be the wildcard
		{wild, false, nil, true, false},            // legacy
		{names, false, []string{"a"}, true, true},
		{wild, false, nil, false, true}, // only on a new stream
		{Subscription{}, false, nil, true, true},
		{both, true, []string{"*", "a"}, true, true},
		{wild, true, []string{"*"}, true, true},
	}
	var n SotWNames
	for i, s := range steps {
		got, ok := n.Write(s.want, s.star)
		if ok != s.ok || !slices.Equal(got, s.names) || n.Listed() != s.listed {
			t.Fatalf("step %d: Write(%+v, star %v) = %q, %v (listed %v), want %q, %v (listed %v)",
				i, s.want, s.star, got, ok, n.Listed(), s.names, s.ok, s.listed)
		}
	}
	var fresh SotWNames
	if got, ok := fresh.Write(wild, true); !ok || !slices.Equal(got, []string{"*"}) || !fresh.Listed() {
		t.Fatalf("explicit star on a fresh stream: %q, %v", got, ok)
	}
}

func TestDeltaLegacyWildcard(t *testing.T) {
	for _, tc := range []struct {
		first      bool
		sub, unsub []string
		want       bool
	}{
		{true, nil, nil, true},
		{false, nil, nil, false},
		{true, []string{"a"}, nil, false},
		{true, nil, []string{"a"}, false},
	} {
		if got := DeltaLegacyWildcard(tc.first, tc.sub, tc.unsub); got != tc.want {
			t.Fatalf("DeltaLegacyWildcard(%v, %q, %q) = %v", tc.first, tc.sub, tc.unsub, got)
		}
	}
}
