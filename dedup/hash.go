package dedup

import (
	"encoding/binary"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// ResourceHash is the content hash of one encoded resource (an encoded
// google.protobuf.Any). Two relays that receive the same bytes compute the
// same hash, so per-resource versions agree across a relay tier.
func ResourceHash(encoded []byte) uint64 { return xxhash.Sum64(encoded) }

// ResourceHashFull is the content hash of a resource with its TTL and
// aliases (delta upstreams): a change of either is a change of the resource.
func ResourceHashFull(encoded, ttl []byte, aliases []string) uint64 {
	if ttl == nil && len(aliases) == 0 {
		return ResourceHash(encoded)
	}
	d := xxhash.New()
	_, _ = d.Write(encoded)
	if ttl != nil {
		_, _ = d.Write([]byte{0xff, 't', 't', 'l'})
		_, _ = d.Write(ttl)
	}
	for _, a := range aliases {
		_, _ = d.Write([]byte{0xff, 'a'})
		_, _ = d.WriteString(a)
	}
	return d.Sum64()
}

// WithVersion mixes an upstream's version of a resource into its content
// hash, for relays that pass upstream versions through: a new version is
// then a change of the resource even when its bytes are the same.
func WithVersion(hash uint64, version string) uint64 {
	d := xxhash.New()
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], hash)
	_, _ = d.Write(buf[:])
	_, _ = d.WriteString(version)
	return d.Sum64()
}

// SetHasher hashes an ordered set of (name, resource hash) pairs into a
// version. Callers feed the pairs in a canonical order (sorted by name) so the
// result does not depend on the order the upstream used.
//
// The zero value is not usable; call NewSetHasher. Owned by the goroutine
// that created it; not safe for concurrent use.
type SetHasher struct {
	d   *xxhash.Digest
	buf [8]byte
}

// NewSetHasher returns a hasher for one resource set of typeURL.
func NewSetHasher(typeURL string) *SetHasher {
	h := &SetHasher{d: xxhash.New()}
	h.writeString(typeURL)
	return h
}

func (h *SetHasher) writeString(s string) {
	binary.LittleEndian.PutUint64(h.buf[:], uint64(len(s)))
	_, _ = h.d.Write(h.buf[:])
	_, _ = h.d.WriteString(s)
}

// Add feeds one member of the set.
func (h *SetHasher) Add(name string, resourceHash uint64) {
	h.writeString(name)
	binary.LittleEndian.PutUint64(h.buf[:], resourceHash)
	_, _ = h.d.Write(h.buf[:])
}

// Sum returns the set's hash.
func (h *SetHasher) Sum() uint64 { return h.d.Sum64() }

// Version renders a content hash as the version string sent to clients.
// It is fixed-width hex so versions sort and compare cheaply in logs.
func Version(sum uint64) string {
	const digits = 16
	s := strconv.FormatUint(sum, 16)
	if len(s) < digits {
		s = "0000000000000000"[:digits-len(s)] + s
	}
	return s
}
