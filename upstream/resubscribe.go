package upstream

import "github.com/xds-relay/xds-relay/shard"

// A SotW upstream may remember, per stream, what it sent for each name, and
// forget a name the stream stopped asking for only when it next answers the
// type: go-control-plane v0.14's linear cache cleans what it returned up
// while computing a response, and a response for a type that is not the
// full state is never sent with nothing in it. A name dropped and asked for
// again before that answer is, to the cache, one the relay still holds: it
// is sent again only once it changes. The relay, asked for it by no shard
// meanwhile, dropped the resource, so a client subscribing to it again
// waits for good (conformance linear/sotw seed 5007024: [c1 c2 c3 x], then
// [x], then [c2 c3 x] before any answer; only the changed c3 came).
//
// Listener and Cluster answers carry every resource asked for, so only the
// other types are tracked. A name the upstream sent, dropped, and asked for
// again before the type's next answer makes the stream restart (a
// *claimRestart, counted as a claim and paced by RestartPace): the new
// stream's first request claims no version, and the upstream sends what
// exists. An answer of the type forgets the dropped names (see
// answeredNames), so ordinary churn, with answers in between, restarts
// nothing.

// maxUnasked bounds the names a stream remembers as dropped since the
// type's last answer: names come from clients' subscriptions, so a class
// churning through more distinct names than this between two answers
// restarts its stream instead, which forgets them all.
const maxUnasked = 10000

// answeredNames records the names of an answer of typeURL the stream asked
// for: the upstream sent them. An answer also ends what the upstream
// remembered of the names dropped before it, unless it was computed before
// the upstream saw the request dropping them: one carrying a name no longer
// asked for was (conformance linear/sotw seed 5007024 again: [c3], sent for
// [c1 c2 c3 x] after the relay asked for nothing), and leaves them
// remembered. (One computed earlier, but carrying only names still asked
// for, cannot be told apart; it forgets them.)
func (ts *sotwTypeState) answeredNames(typeURL string, resources []*shard.Resource) {
	if shard.FullState(typeURL) {
		return
	}
	stale := false
	for _, r := range resources {
		if !ts.sub.Covers(r.Name, r.Aliases) {
			stale = true
			continue
		}
		if ts.sent == nil {
			ts.sent = map[string]struct{}{}
		}
		ts.sent[r.Name] = struct{}{}
	}
	if !stale {
		clear(ts.unasked)
	}
}

// resubscribed moves the names want drops from sent to unasked, and returns
// a *claimRestart when want asks again for one dropped since the type's
// last answer (or when too many are remembered).
func (ts *sotwTypeState) resubscribed(typeURL string, want shard.Subscription) error {
	if want.Wildcard || shard.FullState(typeURL) || ts.sub.Equal(want) {
		return nil // an ACK asks for nothing new: nothing to move
	}
	for _, n := range want.Added(ts.sub) {
		if _, ok := ts.unasked[n]; ok {
			return &claimRestart{typeURL: typeURL, name: n, resent: true}
		}
	}
	for n := range ts.sent {
		if want.Has(n) {
			continue
		}
		delete(ts.sent, n)
		if ts.unasked == nil {
			ts.unasked = map[string]struct{}{}
		}
		ts.unasked[n] = struct{}{}
	}
	if len(ts.unasked) > maxUnasked {
		return &claimRestart{typeURL: typeURL, resent: true}
	}
	return nil
}
