package wire

import "google.golang.org/protobuf/encoding/protowire"

// BodyChecker tells whether a body is the one a BodyBuilder (or a
// DeltaBodyBuilder) given the same calls would build, without building it:
// each call compares the next field in place. A cache of bodies keyed by a
// content hash checks a hit with it, so a hash collision cannot hand a
// stream another content's body. Comparing a resource the body shares with
// the check (the same bytes) costs no more than a pointer comparison.
type BodyChecker struct {
	rest []byte // what is left of the body to compare
	ok   bool   // every comparison so far matched
}

// CheckBody starts checking b against a body whose version_info (or
// system_version_info) is version.
func CheckBody(b Body, version string) *BodyChecker {
	c := &BodyChecker{rest: b.Bytes(), ok: b.buf != nil}
	expect(c, respVersionInfo, version)
	return c
}

// AddResource expects the resources entry BodyBuilder.AddResource appends.
func (c *BodyChecker) AddResource(encodedAny []byte) {
	expect(c, respResources, encodedAny)
}

// AddDeltaResource expects the entry DeltaEntry(name, version, aliases,
// encodedAny, ttl) makes, without making it.
func (c *BodyChecker) AddDeltaResource(name, version string, aliases []string, encodedAny, ttl []byte) {
	inner, ok := c.consume(deltaResources)
	if !ok {
		return
	}
	r := &BodyChecker{rest: inner, ok: true}
	expect(r, resName, name)
	for _, a := range aliases {
		expect(r, resAliases, a)
	}
	if version != "" {
		expect(r, resVersion, version)
	}
	if encodedAny != nil {
		expect(r, resResource, encodedAny)
	}
	if ttl != nil {
		expect(r, resTTL, ttl)
	}
	c.ok = r.ok && len(r.rest) == 0
}

// AddRemoved expects a removed_resources name.
func (c *BodyChecker) AddRemoved(name string) { expect(c, deltaRemoved, name) }

// Finish expects type_url and the body's end, and reports whether the whole
// body matched.
func (c *BodyChecker) Finish(typeURL string) bool {
	expect(c, respTypeURL, typeURL)
	return c.ok && len(c.rest) == 0
}

// expect consumes field num holding v, or marks the check failed.
func expect[T string | []byte](c *BodyChecker, num protowire.Number, v T) {
	if got, ok := c.consume(num); ok && string(got) != string(v) {
		c.ok = false
	}
}

// consume returns the value of the next field, which must be field num of
// the bytes type, or marks the check failed.
func (c *BodyChecker) consume(num protowire.Number) ([]byte, bool) {
	if !c.ok {
		return nil, false
	}
	n, typ, tl := protowire.ConsumeTag(c.rest)
	if tl < 0 || n != num || typ != protowire.BytesType {
		c.ok = false
		return nil, false
	}
	v, vl := protowire.ConsumeBytes(c.rest[tl:])
	if vl < 0 {
		c.ok = false
		return nil, false
	}
	c.rest = c.rest[tl+vl:]
	return v, true
}
