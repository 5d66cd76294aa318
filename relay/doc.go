// Package relay owns the downstream side: the gRPC xDS services clients
// connect to, and the state of each client stream (its node's class, its
// subscription per type URL, nonces, ACK/NACK bookkeeping). Each stream has
// one reader (requests → subscriptions) and one writer (shard responses →
// the wire); the writer stamps the stream's nonce onto a shard's shared
// encoded body and never marshals a response itself.
//
// It assembles packages shard (shared state) and shard/wire (encoding); it
// knows nothing about where resources come from (package upstream).
package relay
