// Package xdstest is the test support shared by unit, e2e, fuzz, bench and
// conformance tests: one raw xDS client (Client) generic over the protocol
// (state of the world or incremental) and the service (ADS or one stream per
// type), and one go-control-plane v0.14 management server fixture
// (ControlPlane) over the snapshot cache (ADS mode or not) or linear caches,
// serving SotW and delta on one port.
//
// The client sends exactly the requests it is told to (legacy wildcard,
// explicit "*", names, "*" plus names, subscription changes), ACKs every
// response unless told to NACK the next one, reconnects with the versions it
// holds (SotW version_info, delta initial_resource_versions) and keeps what
// it holds by the client rules of the xDS spec: for SotW the last accepted
// response of Listener and Cluster, the merge of accepted responses for the
// other types; for delta the resources applied and removed; in both, only
// the names its current subscription covers. Tests that assert response by
// response read them in order with Next (each Event keeps the response as
// received); tests that assert state wait with WaitFor on Held.
//
// Resources builds small, valid resources of the four core types whose
// content is a generation number, so a test can say "cluster c1 at
// generation 3" and check it decodes to exactly that.
//
// SiteWildcard is a scripted ADS server (SotW and delta) whose wildcard set
// is site-specific, as the spec allows and go-control-plane's caches cannot
// be: a resource set on demand is outside the wildcard and reaches a stream
// only by name, so a client may subscribe to "*" and A with A outside it
// (Envoy's on-demand CDS).
//
// It owns no relay code: it is a peer of the relay, used from outside.
package xdstest
