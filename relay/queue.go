package relay

import (
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/drop"
)

// queued is a shard response captured when the shard changed, waiting for a
// stream's writer; S is the stream's per-type state. A value, guarded by
// the stream's mu while queued.
type queued[S comparable] struct {
	sub   S
	shard *shard.Shard
	resp  *shard.Response
	hb    *shard.Heartbeat // set for a TTL heartbeat (resp is then nil)
	// tracked: queued because the shard told this stream of resp, so the
	// stream owes resp one FanoutStep when it writes or drops it.
	tracked bool
}

// dropped settles a queued entry that will not be written.
func (e queued[S]) dropped() {
	if e.tracked {
		e.resp.FanoutStep()
	}
}

// maxPending bounds a stream's queue. A client that keeps up never has more
// than a few entries; one that falls this far behind is served the latest
// state instead of every step (see collapse).
const maxPending = 64

// responseQueue is a stream's bounded queue of responses to write. It keeps
// the class's update order across types (make-before-break on ADS): a
// response supersedes a queued one only when it is of the same type and
// nothing was queued after it, so every step the upstream ordered across
// types reaches the client in that order. What it drops it counts in
// drops.
type responseQueue[S comparable] struct {
	// Read-only after creation.
	drops *drop.Counters // nil: not counted

	// Guarded by the stream's mu.
	entries   []queued[S]
	collapses int // times the queue overflowed
}

// push queues resp (nil: nothing to queue); tracked as for queued. It
// reports whether the queue collapsed.
func (q *responseQueue[S]) push(sub S, sh *shard.Shard, resp *shard.Response, tracked bool) (collapsed bool) {
	if resp == nil {
		return false
	}
	e := queued[S]{sub: sub, shard: sh, resp: resp, tracked: tracked}
	if n := len(q.entries); n > 0 && q.entries[n-1].sub == sub && q.entries[n-1].hb == nil {
		q.entries[n-1].dropped()
		q.drops.Add(drop.Superseded)
		q.entries[n-1] = e
		return false
	}
	q.entries = append(q.entries, e)
	if len(q.entries) > maxPending {
		q.collapse()
		return true
	}
	return false
}

// pushHeartbeat queues a TTL heartbeat. It never supersedes an update (an
// update queued after it supersedes it, and carries the TTLs itself).
func (q *responseQueue[S]) pushHeartbeat(sub S, sh *shard.Shard, hb *shard.Heartbeat) (collapsed bool) {
	q.entries = append(q.entries, queued[S]{sub: sub, shard: sh, hb: hb})
	if len(q.entries) > maxPending {
		q.collapse()
		return true
	}
	return false
}

// collapse reduces the queue of a client far behind to one entry per type:
// each at the position of the type's first entry, with its latest response.
// The client then jumps to the latest state; cross-type order is kept only
// as far as first-queued order allows. Heartbeats are dropped: the next
// update carries the TTLs.
func (q *responseQueue[S]) collapse() {
	before := len(q.entries)
	latest := map[S]queued[S]{}
	var order []S
	for _, e := range q.entries {
		if e.hb != nil {
			continue
		}
		if prev, ok := latest[e.sub]; !ok {
			order = append(order, e.sub)
		} else {
			prev.dropped()
		}
		latest[e.sub] = e
	}
	clear(q.entries)
	q.entries = q.entries[:0]
	for _, s := range order {
		q.entries = append(q.entries, latest[s])
	}
	q.collapses++
	q.drops.AddN(drop.Collapsed, before-len(q.entries))
}

// drain calls f for each queued entry, in order, and empties the queue.
// Called with the stream's mu held, like push.
func (q *responseQueue[S]) drain(f func(queued[S])) {
	for _, e := range q.entries {
		f(e)
	}
	clear(q.entries)
	q.entries = q.entries[:0]
}

// discard settles every queued entry, empties the queue and returns how
// many entries there were (the stream ended with them unwritten).
func (q *responseQueue[S]) discard() int {
	n := len(q.entries)
	q.drain(queued[S].dropped)
	return n
}
