package shard

import (
	"encoding/binary"
	"encoding/json"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Wildcard is the explicit wildcard resource name.
const Wildcard = "*"

// Subscription is a normalised set of resource names: the wildcard flag and
// the explicit names, sorted and unique, without "*".
type Subscription struct {
	Wildcard bool
	Names    []string
}

// NewSubscription normalises names; "*" sets Wildcard. The empty name is a
// name that matches nothing (no resource can be named ""; some clients send
// [""] to unsubscribe from everything): it is dropped, so it never reaches
// the class's union interest, the upstream or a shard's key. The input slice
// is not modified.
func NewSubscription(names []string, wildcard bool) Subscription {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n == Wildcard {
			wildcard = true
			continue
		}
		if n == "" {
			continue
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return Subscription{Wildcard: wildcard, Names: slices.Compact(out)}
}

// Empty reports whether the subscription asks for nothing.
func (s Subscription) Empty() bool { return !s.Wildcard && len(s.Names) == 0 }

// Equal reports whether two normalised subscriptions are the same.
func (s Subscription) Equal(o Subscription) bool {
	return s.Wildcard == o.Wildcard && slices.Equal(s.Names, o.Names)
}

// Has reports whether name is explicitly subscribed.
func (s Subscription) Has(name string) bool {
	_, ok := slices.BinarySearch(s.Names, name)
	return ok
}

// Covers reports whether s covers a resource of that name and aliases: the
// wildcard, the name, or one of the aliases.
func (s Subscription) Covers(name string, aliases []string) bool {
	return s.Wildcard || s.Has(name) || slices.ContainsFunc(aliases, s.Has)
}

// Added returns the explicit names in s that are not in old.
func (s Subscription) Added(old Subscription) []string {
	var out []string
	for _, n := range s.Names {
		if !old.Has(n) {
			out = append(out, n)
		}
	}
	return out
}

// Key identifies a shard: the xxhash of the class, the type URL and the
// order-insensitive (normalised) subscription.
type Key uint64

// KeyOf computes the key of (class, typeURL, sub). Every string is length
// prefixed so no two different inputs share an encoding.
func KeyOf(class, typeURL string, sub Subscription) Key {
	d := xxhash.New()
	var buf [8]byte
	write := func(s string) {
		binary.LittleEndian.PutUint64(buf[:], uint64(len(s)))
		_, _ = d.Write(buf[:])
		_, _ = d.WriteString(s)
	}
	write(class)
	write(typeURL)
	if sub.Wildcard {
		_, _ = d.Write([]byte{1})
	} else {
		_, _ = d.Write([]byte{0})
	}
	for _, n := range sub.Names {
		write(n)
	}
	return Key(d.Sum64())
}

// MarshalJSON writes {"wildcard": bool, "names": [...]}, names [] when
// there is none, for the admin endpoints.
func (s Subscription) MarshalJSON() ([]byte, error) {
	names := s.Names
	if names == nil {
		names = []string{}
	}
	return json.Marshal(struct {
		Wildcard bool     `json:"wildcard"`
		Names    []string `json:"names"`
	}{s.Wildcard, names})
}
