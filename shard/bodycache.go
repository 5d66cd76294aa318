package shard

import (
	"bytes"

	"github.com/xds-relay/xds-relay/shard/wire"
)

// bodyKind tells which encoding of a shard version a body is.
type bodyKind uint8

const (
	sotwBody      bodyKind = iota // Response.Body
	deltaFullBody                 // Response.DeltaFullBody
)

// bodyKey is what a body encodes: its kind, type URL and version string
// (the content hash, or the upstream's version passed through), and the
// content's set hash (sum): every resource's name and Hash, which covers
// its Any, TTL, aliases and upstream version. The sum is 64 bits, so a hit
// is checked byte for byte (wire.BodyChecker) before it is shared.
type bodyKey struct {
	kind    bodyKind
	typeURL string
	version string
	sum     uint64
}

// bodyCache shares encoded bodies between the shards of every class whose
// versions encode the same bytes: 100 classes with identical content hold
// one SotW body, not 100. It holds the bodies weakly, so a body lives
// exactly as long as a response (or an in-flight write) holds it; a cleanup
// forgets the entry once the body is collected. Safe for concurrent use;
// its lock is a leaf lock, taken under Class.mu, keptBody.mu or none.
type bodyCache struct {
	m weakMap[bodyKey, wire.WeakBody]
}

// bodies is the process-wide body cache: bodies are immutable and checked on
// every hit, so any number of relays in one process may share it.
var bodies = &bodyCache{}

// share returns the body cached under k if matches accepts it, or else
// build's, which it caches. matches and build are called without the lock.
func (c *bodyCache) share(k bodyKey, matches func(wire.Body) bool, build func() wire.Body) wire.Body {
	w, ok := c.m.get(k)
	if b, live := w.Body(); ok && live && matches(b) {
		return b
	}
	b := build()
	var shared wire.Body
	e, kept := c.m.put(k, b.Weak(), func(cur wire.WeakBody) bool {
		s, live := cur.Body()
		if live && bytes.Equal(s.Bytes(), b.Bytes()) {
			shared = s // another shard built the same body meanwhile
			return true
		}
		return false
	})
	if kept {
		return shared
	}
	wire.OnCollected(b, c.m.forget, e)
	return b
}

// cached reports whether k has an entry, live or not yet forgotten.
func (c *bodyCache) cached(k bodyKey) bool {
	_, ok := c.m.get(k)
	return ok
}

// sotwEncoder is what a SotW body is built or checked with
// (wire.BodyBuilder, wire.BodyChecker).
type sotwEncoder interface{ AddResource(encodedAny []byte) }

// addSotW adds the resources of a SotW body.
func addSotW(e sotwEncoder, rs []*Resource) {
	for _, r := range rs {
		e.AddResource(r.Any)
	}
}

// sotwBodyOf returns the SotW body of resources at version, shared with
// every shard, of any class, whose version encodes the same bytes.
func sotwBodyOf(typeURL, version string, contentSum uint64, rs []*Resource, size int) wire.Body {
	k := bodyKey{kind: sotwBody, typeURL: typeURL, version: version, sum: contentSum}
	return bodies.share(k, func(b wire.Body) bool {
		c := wire.CheckBody(b, version)
		addSotW(c, rs)
		return c.Finish(typeURL)
	}, func() wire.Body {
		bb := wire.NewBodyBuilder(version, size)
		addSotW(bb, rs)
		return wire.NewBody(bb.Finish(typeURL))
	})
}

// deltaFullBodyOf returns r's delta full-state body, shared with every
// shard, of any class, whose version encodes the same bytes. A hit is
// checked without encoding the resources' delta entries (see
// Resource.DeltaEntry): they are made, and kept, only to build.
func deltaFullBodyOf(r *Response) wire.Body {
	k := bodyKey{kind: deltaFullBody, typeURL: r.TypeURL, version: r.Version, sum: r.contentSum}
	return bodies.share(k, func(b wire.Body) bool {
		c := wire.CheckBody(b, r.Version)
		for _, res := range r.Resources {
			c.AddDeltaResource(res.Name, res.Version(), res.Aliases(), res.Any, res.TTL())
		}
		return c.Finish(r.TypeURL)
	}, func() wire.Body { return EncodeDelta(r.TypeURL, r.Version, r.Resources, nil) })
}
