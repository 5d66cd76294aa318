package store

import (
	"sync"
	"sync/atomic"

	"github.com/xds-relay/xds-relay/shard"
)

var _ shard.ResourceStore = (*Store)(nil)

// parts is the number of independently locked parts of the index: classes
// install their updates on their own goroutines.
const parts = 64

// Store is a content-addressed, reference-counted set of resources. The
// zero Store is not usable; call New. Safe for concurrent use.
type Store struct {
	parts [parts]part

	// Atomic: the held resources and their Any and TTL bytes (for gauges).
	resources, bytes atomic.Int64
}

// part is one lock's share of the index, by hash.
type part struct {
	mu sync.Mutex
	// Guarded by mu. A hash's entries are chained: distinct content may
	// share a hash. peak is the most hashes byHash held since it was last
	// made (see compact).
	byHash map[uint64]*entry
	peak   int
}

// entry is one held resource and its references (guarded by its part's mu).
type entry struct {
	r    *shard.Resource
	refs int
	next *entry // another content of the same hash
}

// New returns an empty store.
func New() *Store {
	s := &Store{}
	for i := range s.parts {
		s.parts[i].byHash = map[uint64]*entry{}
	}
	return s
}

func (s *Store) part(hash uint64) *part { return &s.parts[hash%parts] }

// Lookup returns the held resource of this content, or nil.
func (s *Store) Lookup(hash uint64, name []byte, anyBytes, ttl []byte, aliases []string, upstreamVersion string) *shard.Resource {
	p := s.part(hash)
	p.mu.Lock()
	defer p.mu.Unlock()
	for e := p.byHash[hash]; e != nil; e = e.next {
		if e.r.Name == string(name) && e.r.SameContent(anyBytes, ttl, aliases, upstreamVersion) {
			return e.r
		}
	}
	return nil
}

// Acquire takes a reference on the held resource of r's content (r itself
// when none is held) and returns it.
func (s *Store) Acquire(r *shard.Resource) *shard.Resource {
	p := s.part(r.Hash)
	p.mu.Lock()
	defer p.mu.Unlock()
	head := p.byHash[r.Hash]
	for e := head; e != nil; e = e.next {
		if e.r == r || e.r.Same(r.Name, r.Any, r.TTL(), r.Aliases(), r.UpstreamVersion()) {
			e.refs++
			return e.r
		}
	}
	p.byHash[r.Hash] = &entry{r: r, refs: 1, next: head}
	p.peak = max(p.peak, len(p.byHash))
	s.resources.Add(1)
	s.bytes.Add(size(r))
	return r
}

// Release returns a reference on r, which Acquire returned; the last one
// forgets r. Releasing a resource the store does not hold does nothing.
func (s *Store) Release(r *shard.Resource) {
	p := s.part(r.Hash)
	p.mu.Lock()
	defer p.mu.Unlock()
	link := p.byHash[r.Hash]
	var prev *entry
	for e := link; e != nil; prev, e = e, e.next {
		if e.r != r {
			continue
		}
		if e.refs--; e.refs > 0 {
			return
		}
		switch {
		case prev != nil:
			prev.next = e.next
		case e.next != nil:
			p.byHash[r.Hash] = e.next
		default:
			delete(p.byHash, r.Hash)
			p.compact()
		}
		s.resources.Add(-1)
		s.bytes.Add(-size(r))
		return
	}
}

// compactMin is the size below which a part's map is never re-made.
const compactMin = 1024

// compact re-makes byHash once it shrank to under a quarter of its peak: a
// Go map keeps the buckets of its largest size, so the resources of a
// dropped class would keep their room for good (mu held).
func (p *part) compact() {
	if p.peak < compactMin || len(p.byHash) >= p.peak/4 {
		return
	}
	m := make(map[uint64]*entry, len(p.byHash))
	for h, e := range p.byHash {
		m[h] = e
	}
	p.byHash, p.peak = m, len(m)
}

// Counts returns the number of resources held and their Any and TTL bytes.
func (s *Store) Counts() (resources, bytes int64) { return s.resources.Load(), s.bytes.Load() }

func size(r *shard.Resource) int64 { return int64(len(r.Any) + len(r.TTL())) }
