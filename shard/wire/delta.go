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
	resTTL      protowire.Number = 6
)

// DeltaEntry encodes one resources entry of a DeltaDiscoveryResponse (the
// field tag included): a Resource with name, version and the encoded Any.
// It is built once per resource version and shared by every response that
// carries it.
func DeltaEntry(name, version string, encodedAny []byte) []byte {
	inner := protowire.SizeTag(resName) + protowire.SizeBytes(len(name)) +
		protowire.SizeTag(resVersion) + protowire.SizeBytes(len(version)) +
		protowire.SizeTag(resResource) + protowire.SizeBytes(len(encodedAny))
	b := make([]byte, 0, protowire.SizeTag(deltaResources)+protowire.SizeBytes(inner))
	b = protowire.AppendTag(b, deltaResources, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(inner))
	b = protowire.AppendTag(b, resName, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, resVersion, protowire.BytesType)
	b = protowire.AppendString(b, version)
	b = protowire.AppendTag(b, resResource, protowire.BytesType)
	return protowire.AppendBytes(b, encodedAny)
}

// DeltaBodyBuilder assembles a nonce-less DeltaDiscoveryResponse from
// entries made by DeltaEntry and removed names.
type DeltaBodyBuilder struct{ b []byte }

// NewDeltaBodyBuilder starts a body with system_version_info.
func NewDeltaBodyBuilder(systemVersion string, sizeHint int) *DeltaBodyBuilder {
	b := make([]byte, 0, sizeHint+len(systemVersion)+128)
	b = protowire.AppendTag(b, deltaSystemVersion, protowire.BytesType)
	b = protowire.AppendString(b, systemVersion)
	return &DeltaBodyBuilder{b: b}
}

// AddEntry appends one entry made by DeltaEntry.
func (d *DeltaBodyBuilder) AddEntry(entry []byte) { d.b = append(d.b, entry...) }

// AddRemoved appends one removed_resources name.
func (d *DeltaBodyBuilder) AddRemoved(name string) {
	d.b = protowire.AppendTag(d.b, deltaRemoved, protowire.BytesType)
	d.b = protowire.AppendString(d.b, name)
}

// Finish appends type_url and returns the body.
func (d *DeltaBodyBuilder) Finish(typeURL string) []byte {
	d.b = protowire.AppendTag(d.b, deltaTypeURL, protowire.BytesType)
	d.b = protowire.AppendString(d.b, typeURL)
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

// forEachBytesField calls f for every length-delimited field of b and checks
// that the rest is well-formed.
func forEachBytesField(b []byte, f func(protowire.Number, []byte)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			f(num, v)
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return protowire.ParseError(m)
		}
		b = b[m:]
	}
	return nil
}

// DeltaResource is an envoy.service.discovery.v3.Resource as received.
type DeltaResource struct {
	Name    string
	Version string
	Any     []byte // the encoded google.protobuf.Any; nil for a TTL heartbeat
	HasTTL  bool
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
			r.HasTTL = true
		}
	})
	return r, err
}
