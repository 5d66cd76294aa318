package upstream

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/wire"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// RejectError is a response the relay NACKs: the upstream is alive but sent
// something that must not reach clients. It is distinct from a broken stream.
type RejectError struct{ Reason string }

func (e *RejectError) Error() string { return e.Reason }

// reject is a RejectError of format, its upstream values cut (cutArgs):
// format is the relay's own text, never the upstream's.
func reject(format string, args ...any) error {
	return &RejectError{Reason: fmt.Sprintf(format, cutArgs(args)...)}
}

// validator checks upstream resources. A resource whose content the
// relay already holds (in the class's store, for this class or another) is
// not decoded again: the held resource, with the children recorded when it
// was first decoded, is used instead of a copy, and finding it allocates
// nothing. A SotW resource held as it is (the type's last response
// carried it too, or another class's) is found by its hash and bytes
// alone (see sotwFast). Not safe for concurrent use.
type validator struct {
	// Read-only after creation.
	// passVersions: a resource keeps the upstream's version (candidate
	// version), which its hash includes.
	passVersions bool
	// store holds the resources of every class (nil: none is shared, each
	// resource is decoded and copied).
	store shard.ResourceStore
}

func newValidator() *validator { return &validator{} }

// candidate is one resource of a response, before validation.
type candidate struct {
	raw      []byte   // the encoded google.protobuf.Any of the resource
	ttl      []byte   // the encoded TTL Duration, nil when none
	declared string   // the name a Resource wrapper gave it ("" when none)
	aliases  []string // the aliases a delta Resource gave it
	version  string   // the version a delta Resource gave it
}

// unwrapSotW turns the resources of a SotW response into candidates and
// heartbeats: a resource wrapped in envoy.service.discovery.v3.Resource (for
// its TTL) is unwrapped; a wrapper without a resource is a heartbeat.
func unwrapSotW(raws [][]byte) ([]candidate, []shard.HeartbeatEntry, error) {
	return unwrapSotWInto(raws, make([]candidate, 0, len(raws)))
}

// unwrapSotWInto is unwrapSotW appending the candidates to cands.
func unwrapSotWInto(raws [][]byte, cands []candidate) ([]candidate, []shard.HeartbeatEntry, error) {
	var beats []shard.HeartbeatEntry
	for i, raw := range raws {
		anyType, value, err := wire.AnyFields(raw)
		if err != nil {
			return nil, nil, reject("resources[%d]: malformed google.protobuf.Any: %v", i, err)
		}
		if string(anyType) != wire.ResourceTypeURL {
			cands = append(cands, candidate{raw: raw})
			continue
		}
		r, err := wire.ParseDeltaResource(value)
		switch {
		case err != nil:
			return nil, nil, reject("resources[%d]: malformed Resource wrapper: %v", i, err)
		case r.Any == nil && r.Name == "":
			return nil, nil, reject("resources[%d]: Resource wrapper with neither resource nor name", i)
		case r.Any == nil:
			beats = append(beats, shard.HeartbeatEntry{Name: r.Name, TTL: bytes.Clone(r.TTL)})
		default:
			cands = append(cands, candidate{raw: r.Any, ttl: r.TTL, declared: r.Name})
		}
	}
	return cands, beats, nil
}

// resources validates the resources of one response of typeURL: each must
// be a well-formed Any of the response's type, decodable when the type is
// known to the relay, with a non-empty name (matching its wrapper's, if
// any) unique within the response.
func (v *validator) resources(typeURL string, cands []candidate) ([]*shard.Resource, error) {
	return v.resourcesInto(typeURL, cands, make([]*shard.Resource, 0, len(cands)), make(map[string]struct{}, len(cands)))
}

// resourcesInto is resources appending to out, with seen (empty) for the
// names met.
func (v *validator) resourcesInto(typeURL string, cands []candidate, out []*shard.Resource, seen map[string]struct{}) ([]*shard.Resource, error) {
	msgType := messageType(typeURL)
	for i, c := range cands {
		r, err := v.resource(typeURL, msgType, i, c)
		if err != nil {
			return nil, err
		}
		if _, dup := seen[r.Name]; dup {
			return nil, reject("resources[%d]: duplicate resource name %q", i, r.Name)
		}
		seen[r.Name] = struct{}{}
		out = append(out, r)
	}
	return out, nil
}

// messageType is typeURL's message type: a registered type's, else any
// linked in; nil when the relay does not know it.
func messageType(typeURL string) protoreflect.MessageType {
	if t := xdstype.Lookup(typeURL); t != nil {
		return t.Message
	}
	if mt, err := protoregistry.GlobalTypes.FindMessageByURL(typeURL); err == nil {
		return mt
	}
	return nil
}

// resource validates resources[i] of a response of typeURL, but for its
// name's uniqueness; msgType is messageType(typeURL).
func (v *validator) resource(typeURL string, msgType protoreflect.MessageType, i int, c candidate) (*shard.Resource, error) {
	anyType, value, err := wire.AnyFields(c.raw)
	if err != nil {
		return nil, reject("resources[%d]: malformed google.protobuf.Any: %v", i, err)
	}
	if string(anyType) != typeURL {
		return nil, reject("resources[%d]: type %q does not match the response type_url %q", i, anyType, typeURL)
	}
	nameBytes, err := wire.ResourceNameBytes(value)
	if err != nil {
		return nil, reject("resources[%d]: %v", i, err)
	}
	if c.declared != "" && c.declared != string(nameBytes) {
		return nil, reject("resources[%d]: Resource.name %q does not match the resource's name %q", i, c.declared, nameBytes)
	}
	hash := dedup.ResourceHashFull(c.raw, c.ttl, c.aliases)
	upstreamVersion := ""
	if v.passVersions && c.version != "" {
		upstreamVersion = c.version
		hash = dedup.WithVersion(hash, c.version)
	}
	if v.store != nil {
		if held := v.store.Lookup(hash, nameBytes, c.raw, c.ttl, c.aliases, upstreamVersion); held != nil {
			return held, nil // checked when first held
		}
	}
	name := string(nameBytes) // shared with the copied bytes by NewResource
	var children, refs []string
	if msgType != nil {
		msg := msgType.New().Interface()
		if err := proto.Unmarshal(value, msg); err != nil {
			return nil, reject("resources[%d] %q: undecodable %s: %v", i, name, shortType(typeURL), err)
		}
		if t := xdstype.Lookup(typeURL); t != nil && t.Children != nil {
			children = t.Children(msg)
		}
		refs = xdstype.References(msg)
	}
	// Copy: raw aliases the whole received message, which must not stay
	// pinned by the one resource that outlives it.
	rare := shard.NewRare(slices.Clone(c.aliases), bytes.Clone(c.ttl), upstreamVersion)
	return shard.NewResource(name, bytes.Clone(c.raw), hash, rare, children, refs), nil
}

func shortType(typeURL string) string {
	if i := strings.LastIndexByte(typeURL, '/'); i >= 0 {
		return typeURL[i+1:]
	}
	return typeURL
}
