// Package dedup owns the relay's answers to "is this the same as before?":
// deterministic content hashes of encoded resources and of resource sets
// (the versions the relay sends downstream), and the collapsing signal that
// coalesces bursts of "something changed" into one wake-up.
//
// It does not own the resources themselves (package shard does) nor any
// network I/O. It has no dependencies inside the module.
package dedup
