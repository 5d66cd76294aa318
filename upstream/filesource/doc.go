// Package filesource owns the relay's embedded default upstream: the
// resources of a directory of YAML or JSON files, each holding one
// DiscoveryResponse in the proto3 JSON mapping (as Envoy's filesystem
// subscriptions accept), reloaded when the directory changes.
//
// A Source loads the directory into a complete state per type URL (every
// resource decoded, validated, named and re-encoded deterministically, so the
// same files give the same bytes and hashes on every relay) and installs it
// into node classes with shard.Class.Apply, replacing what they had. It has
// the same Attach/Close shape as upstream.Client, so the relay uses either. A
// load that fails (bad file, unknown type, duplicate name) is logged and
// reported by Status; the last good state stays in place. So does it when a
// load has no resource at all (ErrNoResources), or none of a type the
// served state has and no file declares empty (ErrTypesEmptied).
//
// It owns the directory watch (Run, one goroutine owned by the caller) but no
// network I/O, streams or shards: those are packages relay and shard.
package filesource
