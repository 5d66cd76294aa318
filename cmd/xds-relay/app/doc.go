// Package app assembles a relay process from its parts: it parses and
// validates the configuration file, builds the shard registry, the upstream
// (an ADS control plane or the filesystem source), the downstream gRPC server
// and the admin HTTP server, and owns their goroutines' lifetimes.
//
// It is the only place where packages relay, shard and upstream meet.
package app
