// Package relay owns the downstream side: the gRPC xDS services clients
// connect to (SotW and delta, ADS and per type), REST polling, and the
// state of each client stream (its node's class, its subscription per type
// URL, nonces, ACK/NACK bookkeeping, a delta client's removal order), with
// the connection, peer and admission limits in front of them. Each stream
// has one reader (requests → subscriptions) and, while responses are
// queued, one writer (shard responses → the wire); the writer stamps the
// stream's nonce onto a shard's shared encoded body and never marshals a
// response itself.
//
// It depends on packages shard (shared state), shard/wire (encoding),
// dedup, shard/drop and shard/clientlog (shared with upstream), and shard/xdstype
// (the resource types it decodes); it knows nothing about where resources
// come from (package upstream).
package relay
