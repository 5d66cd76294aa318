// Package rendezvous owns highest-random-weight (rendezvous) hashing: which
// members of a set a key goes to. Every caller with the same set picks the
// same members for the same key, with no coordination; a member leaving
// moves only its own keys, and a member joining a set of N takes about
// 1/(N+1) of the keys, each from whichever member had it. It knows nothing
// of connections, health or classes: package upstream gives it the live
// members and a class's name.
package rendezvous
