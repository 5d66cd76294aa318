// Package wire owns the relay's hand-made protobuf encoding of the xDS
// envelope messages: parsing an upstream DiscoveryResponse into raw resource
// bytes without decoding or re-marshaling them, building a downstream
// DiscoveryResponse body once per shard version, stamping the per-stream nonce
// onto it without re-encoding, and the gRPC codec that writes such stamped
// responses as a zero-copy buffer slice.
//
// It knows the field numbers of DiscoveryResponse and google.protobuf.Any and
// nothing about shards, streams or resource contents.
package wire
