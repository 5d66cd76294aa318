// Package shard owns the relay's shared state: node classes (which nodes share
// configuration, by operator rules) and the registry that leases, lingers
// and drops them; each class's tables, one per type URL, with the resources
// it learned from its upstream, its pending names and shadows; and shards —
// the (class, type URL, resource-name set) groups that every downstream
// subscription is hashed into, lingering a while after their last stream
// ends. A shard holds one response per version whose bodies are built once
// (shared across classes) and written to all of its streams.
//
// It does not own streams, nonces or any network I/O: downstream streams
// register as Watchers (package relay), told after the class lock is
// released; the upstream feeds updates in with Class.ApplyUpdate (package
// upstream; the file source with Class.Apply); the resources are held once
// per content behind ResourceStore (package shard/store). Within the module
// it depends only on dedup, shard/wire, shard/ruleerr and shard/xdstype.
package shard
