package store

import (
	"bytes"
	"math/bits"
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

// part is one lock's share of the index, by hash: an open-addressed table
// of the held resources, found by their Hash with linear probing, and
// their reference counts, 12 bytes a slot at most 4/5 full (a Go map of
// hash to an entry took about 55 bytes a resource). Distinct content of
// one hash takes two slots, each found by comparing the content.
type part struct {
	mu sync.Mutex
	// Guarded by mu. held[i] is nil when slot i is empty; refs[i] counts
	// its references. n is the number of held resources.
	held []*shard.Resource
	refs []int32
	n    int
}

// New returns an empty store.
func New() *Store { return &Store{} }

func (s *Store) part(hash uint64) *part { return &s.parts[hash%parts] }

// home is the slot a hash's probe starts at: its high bits scaled to the
// table (the low ones chose the part).
func (p *part) home(hash uint64) int {
	hi, _ := bits.Mul64(hash, uint64(len(p.held)))
	return int(hi)
}

// next is the slot after i, wrapping.
func (p *part) next(i int) int {
	if i++; i == len(p.held) {
		return 0
	}
	return i
}

// Lookup returns the held resource of this content, or nil.
func (s *Store) Lookup(hash uint64, name []byte, anyBytes, ttl []byte, aliases []string, upstreamVersion string) *shard.Resource {
	p := s.part(hash)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return nil
	}
	for i := p.home(hash); p.held[i] != nil; i = p.next(i) {
		if r := p.held[i]; r.Hash == hash && r.Name == string(name) && r.SameContent(anyBytes, ttl, aliases, upstreamVersion) {
			return r
		}
	}
	return nil
}

// LookupPlain sets out[i] to the held plain resource of hash hashes[i]
// and Any bytes raws[i], when there is one; see shard.ResourceStore. A
// batch of many (a SotW response's whole state) is looked up a part at a
// time, each part locked once rather than once a resource (an uncontended
// lock and unlock were most of a lookup's time).
func (s *Store) LookupPlain(hashes []uint64, raws [][]byte, out []*shard.Resource) (found int) {
	if len(hashes) < 2*parts {
		for i, hash := range hashes {
			p := s.part(hash)
			p.mu.Lock()
			found += p.lookupPlain(hash, raws[i], &out[i])
			p.mu.Unlock()
		}
		return found
	}
	// The positions of hashes, ordered by part: a counting sort.
	var start [parts + 1]int32
	for _, hash := range hashes {
		start[hash%parts+1]++
	}
	for i := 1; i <= parts; i++ {
		start[i] += start[i-1]
	}
	buf := orders.Get().(*[]int32)
	defer orders.Put(buf)
	if cap(*buf) < len(hashes) {
		*buf = make([]int32, len(hashes))
	}
	order := (*buf)[:len(hashes)]
	next := start
	for i, hash := range hashes {
		order[next[hash%parts]] = int32(i)
		next[hash%parts]++
	}
	for pi := range parts {
		lo, hi := start[pi], start[pi+1]
		if lo == hi {
			continue
		}
		p := &s.parts[pi]
		p.mu.Lock()
		for _, i := range order[lo:hi] {
			found += p.lookupPlain(hashes[i], raws[i], &out[i])
		}
		p.mu.Unlock()
	}
	return found
}

// orders pools LookupPlain's positions by part.
var orders = sync.Pool{New: func() any { return new([]int32) }}

// lookupPlain sets *out to the held plain resource of hash and Any bytes
// raw, if there is one, and returns 1 then (0 otherwise). p.mu is held.
func (p *part) lookupPlain(hash uint64, raw []byte, out **shard.Resource) int {
	if p.n == 0 {
		return 0
	}
	for j := p.home(hash); p.held[j] != nil; j = p.next(j) {
		if r := p.held[j]; r.Hash == hash && r.Plain() && bytes.Equal(r.Any, raw) {
			*out = r
			return 1
		}
	}
	return 0
}

// Acquire takes a reference on the held resource of r's content (r itself
// when none is held) and returns it.
func (s *Store) Acquire(r *shard.Resource) *shard.Resource {
	p := s.part(r.Hash)
	p.mu.Lock()
	defer p.mu.Unlock()
	if 5*(p.n+1) > 4*len(p.held) {
		p.resize(2 * (p.n + 1))
	}
	i := p.home(r.Hash)
	for ; p.held[i] != nil; i = p.next(i) {
		if h := p.held[i]; h == r || h.Hash == r.Hash && h.Same(r.Name, r.Any, r.TTL(), r.Aliases(), r.UpstreamVersion()) {
			p.refs[i]++
			return h
		}
	}
	p.held[i], p.refs[i] = r, 1
	p.n++
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
	if p.n == 0 {
		return
	}
	i := p.home(r.Hash)
	for ; p.held[i] != r; i = p.next(i) {
		if p.held[i] == nil {
			return
		}
	}
	if p.refs[i]--; p.refs[i] > 0 {
		return
	}
	p.remove(i)
	s.resources.Add(-1)
	s.bytes.Add(-size(r))
	if p.n < len(p.held)/4 && len(p.held) > minSlots {
		// A table keeps its size: a dropped class's resources would keep
		// their room for good.
		p.resize(p.n * 3 / 2)
	}
}

// remove empties slot i, moving back the entries after it that probed past
// it (backward-shift deletion: no tombstones, probes stay short).
func (p *part) remove(i int) {
	for j := p.next(i); p.held[j] != nil; j = p.next(j) {
		h := p.home(p.held[j].Hash)
		// j's entry may fill i unless its home lies cyclically in (i, j].
		if i <= j && (h <= i || h > j) || i > j && h <= i && h > j {
			p.held[i], p.refs[i] = p.held[j], p.refs[j]
			i = j
		}
	}
	p.held[i], p.refs[i] = nil, 0
	p.n--
}

// minSlots is the size below which a part's table is never shrunk.
const minSlots = 64

// resize makes the table anew, of size slots (minSlots at least).
func (p *part) resize(size int) {
	size = max(minSlots, size)
	held, refs := p.held, p.refs
	p.held, p.refs = make([]*shard.Resource, size), make([]int32, size)
	for k, r := range held {
		if r == nil {
			continue
		}
		i := p.home(r.Hash)
		for p.held[i] != nil {
			i = p.next(i)
		}
		p.held[i], p.refs[i] = r, refs[k]
	}
}

// Counts returns the number of resources held and their Any and TTL bytes.
func (s *Store) Counts() (resources, bytes int64) { return s.resources.Load(), s.bytes.Load() }

func size(r *shard.Resource) int64 { return int64(len(r.Any) + len(r.TTL())) }
