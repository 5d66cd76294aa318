// Package drop owns the reasons the relay decides not to send something it
// was given (a queued response, an upstream answer, a client request), and
// their lock-free counters. It is a leaf: relay and upstream count into one
// Counters, and the app shows them as xds_relay_drops_total{reason}, at
// /debug/drops and on the status page. It sits under shard, the layer both
// relay and upstream build on, so that neither imports the other's
// packages; it depends on nothing but the standard library.
//
// The set of reasons is fixed at compile time, so the metric's label is
// bounded and a count costs one atomic add (as tailscale's DERP server counts
// its dropReason).
package drop
