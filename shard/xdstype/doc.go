// Package xdstype is the registry of the xDS resource types the relay knows:
// one Type per type, holding everything the relay knows of it — its type URL
// (go-control-plane's pkg/resource/v3 constants), its message (the decoder),
// its v3 per-type service and REST path, whether SotW responses carry its full
// state, the type its resources refer to by name and how to read those names,
// its place in the file source's apply order, its metric label, its short
// name on the status page, and whether it is a secret. Every per-type
// decision of the relay reads a field here (as grpc-go's xdsclient reads its
// ResourceType{TypeURL, AllResourcesRequiredInSotW, Decoder}); adding a type
// is one entry in xdstype.go plus its tests.
//
// A type the registry does not list is still relayed over ADS, checked at
// the wire level only: it has no per-type service, no REST path, no full
// state, no children, the metric label "other", and it is decoded only if
// its message happens to be linked in. ECDS (TypedExtensionConfig) is such a
// type: it is not served per type, so it is not listed.
//
// Importing the package also links in the messages the relay decodes
// nested in registered ones (decode.go), so that validation, REST-JSON and
// the file source resolve every Any they meet.
//
// It is a leaf: within the module it depends on nothing; outside it, on
// go-control-plane's generated types and services, grpc and protobuf.
// Packages shard, relay, upstream, upstream/filesource and the app read it.
package xdstype
