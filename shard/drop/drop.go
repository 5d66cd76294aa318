package drop

import "sync/atomic"

// Reason names why something was not sent. The zero value is not a reason.
type Reason uint8

// The reasons. Downstream ones concern what a client stream was not sent,
// upstream ones what the relay did not take from, or send to, its control
// plane. docs/operations.md says when each happens and what to do.
const (
	_ Reason = iota
	// Superseded: a queued response was replaced by a newer one of the
	// same type before the client's writer got to it, or a response (or
	// heartbeat) told to the stream was older than its shard's current
	// one by then (its class tells outside its lock).
	Superseded
	// Collapsed: a slow client's queue overflowed and was reduced to the
	// latest state per type.
	Collapsed
	// Unsubscribed: a queued response was for a type or shard the client
	// left before it was written.
	Unsubscribed
	// AlreadyHeld: the client already holds (has been sent or declared)
	// exactly this version.
	AlreadyHeld
	// EmptyResponse: a delta response would carry no resource and no
	// removal, or a SotW response of a type without full-state semantics
	// would carry no resource.
	EmptyResponse
	// HeartbeatNotHeld: a TTL heartbeat for a version the client does not
	// hold (SotW: has not ACKed, or a client that takes no TTLs).
	HeartbeatNotHeld
	// StreamEnded: queued responses left when the stream ended.
	StreamEnded
	// StaleNonce: a client request answering an older nonce than the
	// stream's latest, ignored as the spec says.
	StaleNonce
	// UpstreamRejected: an upstream response failed validation, was
	// NACKed and never reached a client.
	UpstreamRejected
	// UpstreamUnsubscribed: an upstream answer for names or types the
	// relay no longer asks for.
	UpstreamUnsubscribed
	// UpstreamRepeated: an upstream response repeating the previous one
	// (a response storm); its ACK is deferred.
	UpstreamRepeated
	// UpstreamReplySuperseded: a deferred upstream ACK or NACK replaced by
	// a newer response before it was sent.
	UpstreamReplySuperseded
	// LoadNotRequested: load-report entries (a cluster and what it holds)
	// for a cluster the control plane did not ask about, not forwarded.
	LoadNotRequested
	// LoadOverLimit: load-report entries that would take the class's
	// upstream report past load_reporting.max_class_report_bytes, not
	// forwarded.
	LoadOverLimit

	numReasons
)

var names = [numReasons]string{
	Superseded:              "superseded",
	Collapsed:               "collapsed",
	Unsubscribed:            "unsubscribed",
	AlreadyHeld:             "already_held",
	EmptyResponse:           "empty_response",
	HeartbeatNotHeld:        "heartbeat_not_held",
	StreamEnded:             "stream_ended",
	StaleNonce:              "stale_nonce",
	UpstreamRejected:        "upstream_rejected",
	UpstreamUnsubscribed:    "upstream_unsubscribed",
	UpstreamRepeated:        "upstream_repeated",
	UpstreamReplySuperseded: "upstream_reply_superseded",
	LoadNotRequested:        "load_not_requested",
	LoadOverLimit:           "load_over_limit",
}

// String is the reason's metric label value.
func (r Reason) String() string {
	if r == 0 || r >= numReasons {
		return "unknown"
	}
	return names[r]
}

// All lists every reason, in declaration order.
func All() []Reason {
	all := make([]Reason, 0, numReasons-1)
	for r := Reason(1); r < numReasons; r++ {
		all = append(all, r)
	}
	return all
}

// Counters counts drops by reason. The zero value is ready; a nil
// *Counters counts nothing, so a component built without one (tests) needs
// no guard. Safe for concurrent use; Add never allocates or blocks.
type Counters struct {
	n [numReasons]atomic.Uint64 // accessed atomically
}

// Add counts one drop for r.
func (c *Counters) Add(r Reason) {
	c.AddN(r, 1)
}

// AddN counts n drops for r (a collapse dropping several responses).
func (c *Counters) AddN(r Reason, n int) {
	if c == nil || r == 0 || r >= numReasons || n <= 0 {
		return
	}
	c.n[r].Add(uint64(n))
}

// Count is one reason's total.
type Count struct {
	Reason Reason
	N      uint64
}

// Snapshot returns every reason's total, in declaration order, zeros
// included (so a dashboard lists each reason from the start).
func (c *Counters) Snapshot() []Count {
	out := make([]Count, 0, numReasons-1)
	for r := Reason(1); r < numReasons; r++ {
		var n uint64
		if c != nil {
			n = c.n[r].Load()
		}
		out = append(out, Count{Reason: r, N: n})
	}
	return out
}
