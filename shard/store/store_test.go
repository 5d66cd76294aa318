package store_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"go.uber.org/goleak"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func res(name, content string) *shard.Resource {
	b := []byte(name + "=" + content)
	return &shard.Resource{Name: name, Any: b, Hash: dedup.ResourceHash(b)}
}

func wantCounts(t *testing.T, s *store.Store, resources, bytes int64) {
	t.Helper()
	if n, b := s.Counts(); n != resources || b != bytes {
		t.Fatalf("store holds %d resources of %d bytes, want %d of %d", n, b, resources, bytes)
	}
}

// Acquiring equal content twice holds one resource, found by Lookup, until
// both references are released.
func TestAcquireSharesEqualContent(t *testing.T) {
	s := store.New()
	a, b := res("x", "1"), res("x", "1")
	if got := s.Acquire(a); got != a {
		t.Fatalf("first Acquire = %p, want the resource itself %p", got, a)
	}
	if got := s.Acquire(b); got != a {
		t.Fatalf("Acquire of equal content = %p, want the held %p", got, a)
	}
	wantCounts(t, s, 1, int64(len(a.Any)))
	if got := s.Lookup(b.Hash, []byte(b.Name), b.Any, nil, nil, ""); got != a {
		t.Fatalf("Lookup = %p, want %p", got, a)
	}
	s.Release(a)
	wantCounts(t, s, 1, int64(len(a.Any)))
	s.Release(a)
	wantCounts(t, s, 0, 0)
	if got := s.Lookup(b.Hash, []byte(b.Name), b.Any, nil, nil, ""); got != nil {
		t.Fatalf("Lookup after the last release = %p, want nil", got)
	}
	s.Release(a) // not held: nothing happens
	wantCounts(t, s, 0, 0)
}

// Content that differs in anything the hash covers is another resource,
// even under the same name.
func TestAcquireKeepsDistinctContent(t *testing.T) {
	base := res("x", "1")
	variants := map[string]*shard.Resource{
		"bytes":   res("x", "2"),
		"ttl":     {Name: "x", Any: base.Any, Rare: shard.NewRare(nil, []byte{8, 1}, ""), Hash: dedup.ResourceHashFull(base.Any, []byte{8, 1}, nil)},
		"aliases": {Name: "x", Any: base.Any, Rare: shard.NewRare([]string{"y"}, nil, ""), Hash: dedup.ResourceHashFull(base.Any, nil, []string{"y"})},
		"version": {Name: "x", Any: base.Any, Rare: shard.NewRare(nil, nil, "v2"), Hash: dedup.WithVersion(base.Hash, "v2")},
	}
	for what, v := range variants {
		t.Run(what, func(t *testing.T) {
			s := store.New()
			s.Acquire(base)
			if got := s.Acquire(v); got != v {
				t.Fatalf("Acquire of other %s = %p, want itself %p", what, got, v)
			}
			wantCounts(t, s, 2, int64(2*len(base.Any)+len(v.TTL())))
		})
	}
}

// Two contents of one hash (a collision, forced here) are two entries:
// each is found only by its own bytes, and releasing one keeps the other.
func TestHashCollisionNeverServesOtherBytes(t *testing.T) {
	s := store.New()
	a := &shard.Resource{Name: "x", Any: []byte("x=1"), Hash: 42}
	b := &shard.Resource{Name: "x", Any: []byte("x=2"), Hash: 42}
	c := &shard.Resource{Name: "y", Any: []byte("x=1"), Hash: 42} // same bytes, another name
	for _, r := range []*shard.Resource{a, b, c} {
		if got := s.Acquire(r); got != r {
			t.Fatalf("Acquire(%s %q) = %p (%q), want itself", r.Name, r.Any, got, got.Any)
		}
	}
	wantCounts(t, s, 3, 9)
	for _, r := range []*shard.Resource{a, b, c} {
		if got := s.Lookup(42, []byte(r.Name), r.Any, nil, nil, ""); got != r {
			t.Fatalf("Lookup(%s %q) = %p, want %p", r.Name, r.Any, got, r)
		}
	}
	s.Release(b) // the middle of the chain
	if got := s.Lookup(42, []byte("x"), b.Any, nil, nil, ""); got != nil {
		t.Fatalf("released content still found: %q", got.Any)
	}
	if got := s.Lookup(42, []byte("x"), a.Any, nil, nil, ""); got != a {
		t.Fatalf("Lookup of the other content = %p, want %p", got, a)
	}
	s.Release(c)
	s.Release(a)
	wantCounts(t, s, 0, 0)
}

// Acquires and releases in any order, of contents crowding a few hashes of
// one part (long probe runs, wrapping, colliding), leave exactly what a
// plain count of references says: each held content found, none other.
func TestAcquireReleaseAgainstCounts(t *testing.T) {
	s := store.New()
	rng := rand.New(rand.NewPCG(1, 2))
	type held struct {
		r    *shard.Resource
		refs int
	}
	model := map[string]*held{}
	var keys []string
	// Every hash in part 0, the same few, each starting its probe at the
	// end of an eighth of the table: the last one's run wraps.
	var hashes []uint64
	for k := range uint64(8) {
		hashes = append(hashes, k<<61|(1<<61-64))
	}
	for step := range 20_000 {
		k := fmt.Sprint(rng.IntN(300))
		if h := model[k]; h != nil && rng.IntN(2) == 0 {
			s.Release(h.r)
			if h.refs--; h.refs == 0 {
				delete(model, k)
			}
		} else {
			r := &shard.Resource{Name: k, Any: []byte(k), Hash: hashes[rng.IntN(len(hashes))]}
			if h != nil {
				r.Hash = h.r.Hash
			}
			got := s.Acquire(r)
			switch {
			case h == nil:
				model[k], keys = &held{r: got, refs: 1}, append(keys, k)
			case got != h.r:
				t.Fatalf("step %d: Acquire(%s) = %p, want the held %p", step, k, got, h.r)
			default:
				h.refs++
			}
		}
		if step%97 != 0 {
			continue
		}
		for _, k := range keys {
			h := model[k]
			for _, hash := range hashes {
				got := s.Lookup(hash, []byte(k), []byte(k), nil, nil, "")
				if want := h != nil && h.r.Hash == hash; (got != nil) != want || want && got != h.r {
					t.Fatalf("step %d: Lookup(%x, %s) = %p, want held %v", step, hash, k, got, want)
				}
			}
		}
		if n, _ := s.Counts(); n != int64(len(model)) {
			t.Fatalf("step %d: %d held, want %d", step, n, len(model))
		}
	}
}

// LookupPlain finds, one at a time or in a batch a part at a time, the
// held plain resource of each hash and bytes: not one of the same hash
// and other bytes, nor one with a rare part, nor one not held.
func TestLookupPlain(t *testing.T) {
	for _, n := range []int{10, 500} {
		s := store.New()
		var hashes []uint64
		var raws [][]byte
		var want []*shard.Resource
		for i := range n {
			r := res(fmt.Sprint("p-", n, "-", i), "1")
			switch i % 4 {
			case 0: // held
				s.Acquire(r)
				want = append(want, r)
			case 1: // not held
				want = append(want, nil)
			case 2: // held with a rare part
				r.Rare = shard.NewRare(nil, []byte{8, 1}, "")
				s.Acquire(r)
				want = append(want, nil)
			case 3: // held, looked up with the same hash and other bytes
				s.Acquire(r)
				r = &shard.Resource{Name: r.Name, Any: []byte("other"), Hash: r.Hash}
				want = append(want, nil)
			}
			hashes, raws = append(hashes, r.Hash), append(raws, r.Any)
		}
		out := make([]*shard.Resource, n)
		found := s.LookupPlain(hashes, raws, out)
		wantFound := 0
		for i := range want {
			if out[i] != want[i] {
				t.Fatalf("%d: lookup %d = %v, want %v", n, i, out[i], want[i])
			}
			if want[i] != nil {
				wantFound++
			}
		}
		if found != wantFound {
			t.Fatalf("%d: found %d, want %d", n, found, wantFound)
		}
	}
}
