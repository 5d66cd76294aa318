package wire

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of envoy.service.discovery.v3.DiscoveryResponse.
const (
	respVersionInfo  protowire.Number = 1
	respResources    protowire.Number = 2
	respTypeURL      protowire.Number = 4
	respNonce        protowire.Number = 5
	respControlPlane protowire.Number = 6
)

// Field numbers of google.protobuf.Any.
const (
	anyTypeURL protowire.Number = 1
	anyValue   protowire.Number = 2
)

// RawResponse is an upstream DiscoveryResponse with each resource kept as its
// encoded google.protobuf.Any. The slices alias the received buffer.
type RawResponse struct {
	VersionInfo string
	TypeURL     string
	Nonce       string
	Resources   [][]byte // each an encoded google.protobuf.Any
}

// ParseResponse splits an encoded DiscoveryResponse into its envelope fields
// and raw resources. Unknown fields (canary, control_plane) are skipped.
func ParseResponse(b []byte) (*RawResponse, error) {
	r := &RawResponse{}
	if err := ParseResponseInto(b, r); err != nil {
		return nil, err
	}
	return r, nil
}

// ParseResponseInto is ParseResponse into r, whose Resources slice it
// reuses (from its start): a caller parsing response after response need
// not grow one each time.
func ParseResponseInto(b []byte, r *RawResponse) error {
	*r = RawResponse{Resources: r.Resources[:0]}
	err := forEachBytesField(b, func(num protowire.Number, v []byte) {
		switch num {
		case respVersionInfo:
			r.VersionInfo = string(v)
		case respResources:
			r.Resources = append(r.Resources, v)
		case respTypeURL:
			r.TypeURL = string(v)
		case respNonce:
			r.Nonce = string(v)
		}
	})
	if err != nil {
		return fmt.Errorf("discovery response: %w", err)
	}
	return nil
}

// ParseAny returns the type URL and value of an encoded google.protobuf.Any.
func ParseAny(b []byte) (typeURL string, value []byte, err error) {
	t, value, err := AnyFields(b)
	return string(t), value, err
}

// AnyFields is ParseAny without a copy: the type URL aliases b, so a
// caller comparing it (string(typeURL) == want) allocates nothing.
func AnyFields(b []byte) (typeURL, value []byte, err error) {
	err = forEachBytesField(b, func(num protowire.Number, v []byte) {
		switch num {
		case anyTypeURL:
			typeURL = v
		case anyValue:
			value = v
		}
	})
	if err != nil {
		return nil, nil, err
	}
	return typeURL, value, nil
}

// forEachBytesField calls f for every length-delimited field of b and checks
// that the rest is well-formed.
func forEachBytesField(b []byte, f func(protowire.Number, []byte)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(m))
		}
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			f(num, v)
		}
		b = b[m:]
	}
	return nil
}

// ErrNoName reports a resource whose name field is absent or empty.
var ErrNoName = errors.New("resource has no name (field 1)")

// ResourceName returns the name of an encoded xDS resource: field 1, a string,
// in every v3 resource type (Listener.name, Cluster.name,
// ClusterLoadAssignment.cluster_name, RouteConfiguration.name, Secret.name,
// ...). The whole message is walked, so truncated or malformed wire data is
// reported instead of accepted.
func ResourceName(value []byte) (string, error) {
	name, err := ResourceNameBytes(value)
	return string(name), err
}

// ResourceNameBytes is ResourceName without a copy: the name aliases value.
func ResourceNameBytes(value []byte) ([]byte, error) {
	var name []byte
	err := forEachBytesField(value, func(num protowire.Number, v []byte) {
		if num == 1 {
			name = v
		}
	})
	if err != nil {
		return nil, err
	}
	if len(name) == 0 {
		return nil, ErrNoName
	}
	return name, nil
}

// AppendAny appends an encoded google.protobuf.Any.
func AppendAny(b []byte, typeURL string, value []byte) []byte {
	b = appendString(b, anyTypeURL, typeURL)
	return appendBytes(b, anyValue, value)
}

// BodyBuilder assembles a nonce-less DiscoveryResponse body from already
// encoded resources. The body is built once per shard version and shared,
// read-only, by every stream of the shard.
type BodyBuilder struct{ b []byte }

// NewBodyBuilder starts a body with version_info; sizeHint is the expected
// total size of the resources.
func NewBodyBuilder(version string, sizeHint int) *BodyBuilder {
	b := make([]byte, 0, sizeHint+len(version)+128)
	b = appendString(b, respVersionInfo, version)
	return &BodyBuilder{b: b}
}

// BodySize is the size of the body a BodyBuilder builds with version_info
// version, type_url typeURL and resources of resourceBytes bytes in all,
// each counted with ResourceSize.
func BodySize(version, typeURL string, resourceBytes int) int {
	return protowire.SizeTag(respVersionInfo) + protowire.SizeBytes(len(version)) + resourceBytes +
		protowire.SizeTag(respTypeURL) + protowire.SizeBytes(len(typeURL))
}

// ResourceSize is the size of the resources entry AddResource appends for
// an encoded Any of n bytes.
func ResourceSize(n int) int { return protowire.SizeTag(respResources) + protowire.SizeBytes(n) }

// AddResource appends one encoded google.protobuf.Any as a resources entry.
func (bb *BodyBuilder) AddResource(encodedAny []byte) {
	bb.b = appendBytes(bb.b, respResources, encodedAny)
}

// Finish appends type_url and returns the body.
func (bb *BodyBuilder) Finish(typeURL string) []byte {
	bb.b = appendString(bb.b, respTypeURL, typeURL)
	return bb.b
}

// NonceSuffix returns the encoding of the nonce field, to be written after a
// body built by BodyBuilder. Protobuf decoders accept fields in any order, so
// body+suffix decodes as the full DiscoveryResponse.
func NonceSuffix(nonce string) []byte {
	return appendNonceField(make([]byte, 0, len(nonce)+2), []byte(nonce))
}

// appendString appends field num holding s.
func appendString(b []byte, num protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}

// appendBytes appends field num holding v.
func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

// appendNonceField appends the nonce field holding nonce to b. (Spelled out:
// it is on the per-stream path, and appendBytes is too large to inline.)
func appendNonceField(b, nonce []byte) []byte {
	b = protowire.AppendTag(b, respNonce, protowire.BytesType)
	return protowire.AppendBytes(b, nonce)
}
