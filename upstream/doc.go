// Package upstream owns the relay's side of the control plane: one ADS stream
// per node class (SotW or delta), over a pool of gRPC connections carrying
// as many streams each as the peer allows. Each stream subscribes, per type
// URL, to the union of what the class's downstream shards need, validates
// every response (ACKing good ones, NACKing bad ones with error_detail, so a
// bad response never reaches a client), and installs good ones into the
// class with shard.Class.ApplyUpdate. A broken stream is re-established with
// jittered exponential backoff; its first request of a type asks at no
// version (SotW) or claims what the class holds (delta), so the upstream
// sends what differs. Downstream clients keep the last good state meanwhile.
// The relay also restarts a healthy stream itself when only a new stream
// can ask what is needed (RestartReason), and every resync interval.
// A stream that cannot be opened because no connection can be made is such
// a failure too, counted apart (connectFailure); a class whose upstream stays
// unreachable past Config.UnavailableAfter is marked so in its class, which
// the downstream side uses to turn away the clients it has nothing for
// (availability.go).
//
// With class affinity (Config.Affinity) the upstream is a tier of members,
// listed or resolved from the address (resolve.go), each with its own
// connection pool: a class's stream goes to the live member rendezvous
// hashing picks for its name (package upstream/rendezvous), so every relay
// in front of the tier sends a class to the same member. A member whose
// connection fails leaves the live set until it is ready again, and a class
// whose pick changes moves its stream (members.go, move.go).
//
// Responses are received undecoded, into pooled buffers (wire.Pooled), and
// resources stay the bytes the control plane sent: nothing is re-marshaled,
// and what a class keeps is copied out before the buffer is reused.
//
// What it receives and does not pass on, or answer at once, is counted by
// reason in a *drop.Counters (Config.Drops): a rejected response, one for a
// type not subscribed to, a repeat in a storm, a deferred reply superseded.
//
// What the control plane's messages make it log, NACK and report (a
// resource's name, a version, a reason) is cut to bounded lengths, and the
// warnings they cause are rate-limited with a count of those suppressed
// (upstreamlog.go, Config.LogGate).
//
// It never imports package relay; it knows classes through package shard,
// shares shard/drop and shard/clientlog with relay, and depends otherwise
// on shard/wire, shard/xdstype and dedup.
package upstream
