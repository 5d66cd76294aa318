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

// SetSum is the hash of a set of (name, resource hash) members, such as a
// shard's resources: a member's hash is a strong 64-bit hash of its name's
// hash and its resource hash (MemberHash), and the set's is the sum of its
// members' hashes mod 2^64, sealed with the type URL and the member count
// (Sum). A sum does not depend on the order members are added in, and a
// member is taken out again by subtracting its hash (Remove), so a table
// keeps the sum of everything it holds as resources come and go, and a
// class update that changes one resource of 1,000 costs two member hashes,
// not a hash of all 1,000.
//
// Why a sum is safe where a sequential hash was used: a sum identifies a
// shard's content (Response.Sum), and a collision would lose an update.
// Two distinct sets collide when the sum of their differing members'
// hashes is equal mod 2^64; with member hashes that behave as independent
// random 64-bit values (xxhash over 16 bytes, every bit of both inputs
// avalanching) that happens with probability 2^-64 for any fixed pair of
// sets, what it was for the sequential hash. An XOR of member hashes would
// be linear over GF(2): among any 65 candidate members some subsets have
// equal XORs, found by Gaussian elimination in an instant; a sum needs a
// generalized-birthday search. A member hash separable into name and
// content parts (f(name) + g(hash)) would collide when two names swap
// contents: MemberHash mixes both through one hash, and TestSetSum checks
// the swap. Like the sequential hash before it, a sum is not
// collision-resistant against someone choosing names to collide: the names
// come from the relay's own control plane.
//
// The zero value is the empty set. Not safe for concurrent use.
type SetSum struct {
	acc uint64 // sum of the members' hashes, mod 2^64
	n   int    // members
}

// MemberHash is the hash of one member of a resource set.
func MemberHash(name string, resourceHash uint64) uint64 {
	return pairHash(xxhash.Sum64String(name), resourceHash)
}

// pendingTag marks a member that is a pending name, not a resource.
const pendingTag = 0x70656e64696e6721 // "pending!"

func pairHash(a, b uint64) uint64 {
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[:8], a)
	binary.LittleEndian.PutUint64(buf[8:], b)
	return xxhash.Sum64(buf[:])
}

// Add adds the member (name, resourceHash).
func (s *SetSum) Add(name string, resourceHash uint64) {
	s.acc += MemberHash(name, resourceHash)
	s.n++
}

// Remove takes out a member added before.
func (s *SetSum) Remove(name string, resourceHash uint64) {
	s.acc -= MemberHash(name, resourceHash)
	s.n--
}

// AddPending adds a name the set's owner waits to learn about: a member
// unlike any resource's (its hash is a 24-byte hash, a resource's a
// 16-byte one).
func (s *SetSum) AddPending(name string) {
	var buf [24]byte
	binary.LittleEndian.PutUint64(buf[:8], xxhash.Sum64String(name))
	binary.LittleEndian.PutUint64(buf[8:16], pendingTag)
	binary.LittleEndian.PutUint64(buf[16:], pendingTag)
	s.acc += xxhash.Sum64(buf[:])
	s.n++
}

// Len is the number of members.
func (s SetSum) Len() int { return s.n }

// Sum returns the hash of the set as resources of typeURL.
func (s SetSum) Sum(typeURL string) uint64 {
	var buf [24]byte
	binary.LittleEndian.PutUint64(buf[:8], xxhash.Sum64String(typeURL))
	binary.LittleEndian.PutUint64(buf[8:16], s.acc)
	binary.LittleEndian.PutUint64(buf[16:], uint64(s.n))
	return xxhash.Sum64(buf[:])
}

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
