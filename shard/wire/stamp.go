package wire

import (
	"strconv"
	"sync"

	"google.golang.org/grpc/mem"
)

// Body is a nonce-less encoded response (see BodyBuilder, DeltaBodyBuilder),
// shared by every stream it is written to. It holds the bytes as a gRPC
// buffer, converted once, so that writing it to one more stream allocates
// nothing for it. The bytes must not be modified once a Body holds them:
// read-only after creation. Copies of a Body are the same body: Same tells,
// and a WeakBody refers to it without keeping it alive.
type Body struct{ buf *bodyBuf }

// bodyBuf is a body's gRPC buffer. A pointer, so that a body has an identity
// that weak references and cleanups can be attached to (see WeakBody); its
// methods are the embedded SliceBuffer's, whose Ref and Free are no-ops: any
// number of in-flight writes may reference the same body, and it is never
// returned to a pool.
type bodyBuf struct{ mem.SliceBuffer }

// NewBody wraps b, which is never modified afterwards.
func NewBody(b []byte) Body {
	if b == nil {
		return Body{}
	}
	return Body{buf: &bodyBuf{b}}
}

// Bytes returns the body's bytes, which must not be modified.
func (b Body) Bytes() []byte {
	if b.buf == nil {
		return nil
	}
	return b.buf.SliceBuffer
}

// Len is the body's size in bytes.
func (b Body) Len() int {
	if b.buf == nil {
		return 0
	}
	return len(b.buf.SliceBuffer)
}

// Same reports whether b and o are the same body (not merely equal bytes).
func (b Body) Same(o Body) bool { return b.buf == o.buf }

// Stamped is a response ready for one stream: a shared body and the
// stream's own nonce suffix. The codec writes it as a two-buffer slice.
// Owned by the stream's writer until gRPC has encoded it.
type Stamped struct {
	Body   Body
	suffix mem.Buffer
}

// Len is the number of bytes the message occupies on the wire.
func (s *Stamped) Len() int { return s.Body.Len() + s.suffix.Len() }

// maxSuffix bounds an encoded nonce field: a tag byte, a length byte and at
// most 13 base-36 digits of a uint64.
const maxSuffix = 2 + 13

// Stamper stamps nonces onto bodies for one stream. Stamping allocates
// nothing: a nonce's suffix is carved out of a slab shared by the streams of
// the stamper's arena, and the slab returns to its pool once gRPC has written
// (and freed) every message stamped from it. A slab a stalled write still
// references stays pinned until the connection closes, so slabs are small.
// Read-only after creation; safe for concurrent use (the arena locks).
type Stamper struct{ arena *arena }

// arenas spread streams over several slab arenas so concurrent writers
// rarely share a lock.
var arenas [16]arena

// NewStamper returns the stamper of stream id.
func NewStamper(id uint64) Stamper { return Stamper{arena: &arenas[id%uint64(len(arenas))]} }

// Stamp returns body with nonce n (see NonceString) for the wire.
func (st Stamper) Stamp(body Body, n uint64) Stamped {
	var digits, enc [maxSuffix]byte
	field := appendNonceField(enc[:0], strconv.AppendUint(digits[:0], n, 36))
	return Stamped{Body: body, suffix: st.arena.carve(field)}
}

// slabSize is above gRPC's pooling threshold (1 KiB), below which a buffer
// is not reference counted: mem.NewBuffer would box it, and nothing would
// tell when its writes are done.
const slabSize = 4096

var slabPool = mem.NewTieredBufferPool(slabSize)

// arena hands out suffixes from its current slab, to the streams whose
// stampers share it.
type arena struct {
	// Guarded by mu.
	mu   sync.Mutex
	slab mem.Buffer // the current slab, holding the arena's reference; nil before the first
	data []byte     // the current slab's bytes
	off  int        // bytes of data handed out
}

// carve copies enc into the current slab and returns a view of it.
func (a *arena) carve(enc []byte) mem.Buffer {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.slab == nil || a.off+len(enc) > len(a.data) {
		if a.slab != nil {
			a.slab.Free() // the slab returns to the pool after its last view
		}
		p := slabPool.Get(slabSize)
		a.slab, a.data, a.off = mem.NewBuffer(p, slabPool), *p, 0
	}
	// The bytes are written before the view exists; a view's bytes are never
	// written again, while gRPC reads earlier views of the same slab.
	copy(a.data[a.off:], enc)
	v := a.slab.Slice(a.off, a.off+len(enc))
	a.off += len(enc)
	return v
}

// NonceString is the nonce n as sent on the wire ("" for 0, which is never
// sent).
func NonceString(n uint64) string {
	if n == 0 {
		return ""
	}
	return strconv.FormatUint(n, 36)
}

// NonceIs reports whether s, a nonce a client echoed, is nonce n. It
// allocates nothing.
func NonceIs(s string, n uint64) bool {
	if n == 0 || len(s) > maxSuffix {
		return false
	}
	var digits [maxSuffix]byte
	return string(strconv.AppendUint(digits[:0], n, 36)) == s
}
