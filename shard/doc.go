// Package shard owns the relay's shared state: node classes (which nodes share
// configuration, by operator rules), the resources each class learned from
// its upstream, and shards — the (class, type URL, resource-name set) groups
// that every downstream subscription is hashed into. A shard holds one encoded
// response per version, built once and written to all of its streams.
//
// It does not own streams, nonces or any network I/O: downstream streams
// register as Watchers (package relay), and the upstream feeds resources in
// with Class.Apply (package upstream). It depends only on dedup, wire,
// ruleerr and xdstype.
package shard
