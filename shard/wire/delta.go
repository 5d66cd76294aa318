package wire

import "google.golang.org/protobuf/encoding/protowire"

// Field numbers of envoy.service.discovery.v3.DeltaDiscoveryResponse. Its
// nonce is field 5, as in DiscoveryResponse, so NonceSuffix serves both.
const (
	deltaSystemVersion protowire.Number = 1
	deltaResources     protowire.Number = 2
	deltaTypeURL       protowire.Number = 4
	deltaRemoved       protowire.Number = 6
)

// Field numbers of envoy.service.discovery.v3.Resource.
const (
	resVersion  protowire.Number = 1
	resResource protowire.Number = 2
	resName     protowire.Number = 3
	resAliases  protowire.Number = 4
	resTTL      protowire.Number = 6
)

// ResourceTypeURL is the type URL of envoy.service.discovery.v3.Resource,
// the wrapper that carries a TTL in SotW responses.
const ResourceTypeURL = "type.googleapis.com/envoy.service.discovery.v3.Resource"

// appendResource appends an encoded Resource message (no outer tag): name,
// aliases, version (if any), the encoded Any (nil for a heartbeat) and the
// encoded TTL Duration (if any).
func appendResource(b []byte, name, version string, aliases []string, encodedAny, ttl []byte) []byte {
	b = appendString(b, resName, name)
	for _, a := range aliases {
		b = appendString(b, resAliases, a)
	}
	if version != "" {
		b = appendString(b, resVersion, version)
	}
	if encodedAny != nil {
		b = appendBytes(b, resResource, encodedAny)
	}
	if ttl != nil {
		b = appendBytes(b, resTTL, ttl)
	}
	return b
}

// DeltaEntry encodes one resources entry of a DeltaDiscoveryResponse (the
// field tag included): a Resource with name, aliases, version, the encoded
// Any (nil: a TTL heartbeat) and the TTL (nil: none). It is built once per
// resource version and shared by every response that carries it.
func DeltaEntry(name, version string, aliases []string, encodedAny, ttl []byte) []byte {
	inner := appendResource(nil, name, version, aliases, encodedAny, ttl)
	b := make([]byte, 0, len(inner)+protowire.SizeTag(deltaResources)+protowire.SizeVarint(uint64(len(inner))))
	return appendBytes(b, deltaResources, inner)
}

// WrappedAny encodes a google.protobuf.Any holding a Resource wrapper, as
// SotW responses carry resources with a TTL (and heartbeats, encodedAny nil)
// to clients that support xds.config.supports-resource-in-sotw.
func WrappedAny(name string, encodedAny, ttl []byte) []byte {
	return AppendAny(nil, ResourceTypeURL, appendResource(nil, name, "", nil, encodedAny, ttl))
}

// DeltaBodyBuilder assembles a nonce-less DeltaDiscoveryResponse from
// entries made by DeltaEntry and removed names.
type DeltaBodyBuilder struct{ b []byte }

// NewDeltaBodyBuilder starts a body with system_version_info.
func NewDeltaBodyBuilder(systemVersion string, sizeHint int) *DeltaBodyBuilder {
	b := make([]byte, 0, sizeHint+len(systemVersion)+128)
	b = appendString(b, deltaSystemVersion, systemVersion)
	return &DeltaBodyBuilder{b: b}
}

// AddEntry appends one entry made by DeltaEntry.
func (d *DeltaBodyBuilder) AddEntry(entry []byte) { d.b = append(d.b, entry...) }

// AddRemoved appends one removed_resources name.
func (d *DeltaBodyBuilder) AddRemoved(name string) {
	d.b = appendString(d.b, deltaRemoved, name)
}

// Finish appends type_url and returns the body.
func (d *DeltaBodyBuilder) Finish(typeURL string) []byte {
	d.b = appendString(d.b, deltaTypeURL, typeURL)
	return d.b
}

// RawDeltaResponse is a DeltaDiscoveryResponse with each resource kept as its
// encoded envoy.service.discovery.v3.Resource. Slices alias the input.
type RawDeltaResponse struct {
	SystemVersionInfo string
	TypeURL           string
	Nonce             string
	Resources         [][]byte // each an encoded Resource
	Removed           []string
}

// ParseDeltaResponse splits an encoded DeltaDiscoveryResponse into its
// envelope fields, raw resources and removed names.
func ParseDeltaResponse(b []byte) (*RawDeltaResponse, error) {
	r := &RawDeltaResponse{}
	err := forEachBytesField(b, func(num protowire.Number, v []byte) {
		switch num {
		case deltaSystemVersion:
			r.SystemVersionInfo = string(v)
		case deltaResources:
			r.Resources = append(r.Resources, v)
		case deltaTypeURL:
			r.TypeURL = string(v)
		case respNonce:
			r.Nonce = string(v)
		case deltaRemoved:
			r.Removed = append(r.Removed, string(v))
		}
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// DeltaResource is an envoy.service.discovery.v3.Resource as received.
type DeltaResource struct {
	Name    string
	Version string
	Aliases []string
	Any     []byte // the encoded google.protobuf.Any; nil for a TTL heartbeat
	TTL     []byte // the encoded google.protobuf.Duration; nil when none
}

// ParseDeltaResource reads one encoded Resource.
func ParseDeltaResource(b []byte) (DeltaResource, error) {
	var r DeltaResource
	err := forEachBytesField(b, func(num protowire.Number, v []byte) {
		switch num {
		case resName:
			r.Name = string(v)
		case resVersion:
			r.Version = string(v)
		case resResource:
			r.Any = v
		case resTTL:
			r.TTL = v
		case resAliases:
			r.Aliases = append(r.Aliases, string(v))
		}
	})
	return r, err
}
