// Package store holds the relay's resources once per content, whichever
// classes, shards and versions refer to them. A resource is keyed by its
// content hash (shard.Resource.Hash: the Any and TTL bytes, aliases and the
// upstream version when passed through) and found only when its content is
// byte for byte the one asked for, so a hash collision holds two entries and
// never serves one's bytes for the other. Each class table counts its
// references (shard.ResourceStore); a resource is forgotten with its last.
//
// It owns the index and the counts, not the resources' lifetime in memory:
// a response built from a resource keeps it alive after the store forgot
// it. It decodes nothing; the upstream validator decides what enters.
package store
