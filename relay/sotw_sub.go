package relay

import (
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// sotwTypeSub is a SotW stream's state for one type URL. Guarded by the
// stream's mu; shard is written only by the stream's reader.
type sotwTypeSub struct {
	typeSubBase
	names       shard.SotWNames // the legacy wildcard's rule, as the client's requests went
	sentVersion string          // version of the last response sent (or known held)
	force       bool            // send the shard's response even if sentVersion matches
	// claimed: sentVersion is the version_info the client declared on its
	// first request, not one the relay sent; it vouches for the content
	// only where versions are content hashes.
	claimed      bool
	ackedVersion string
	// sentSum is the Sum of the response sent (or known held) at
	// sentVersion: an upstream's version may stay while the content
	// changes (a name newly asked for is answered at the type's version).
	sentSum uint64
	// What the client holds, for the removal order (sotw_order.go): sent,
	// the shard response last sent (nil: unknown, as after a version the
	// client declared); kept, the Clusters sent with it whose removal
	// waits (sorted by name), and removals, their waits; carried, the
	// RouteConfigurations sent before that sent left out (still held).
	sent     *shard.Response
	kept     []*shard.Resource
	removals map[string]heldRemoval
	carried  []*shard.Resource
}

func newSotWTypeSub(typeURL string) *sotwTypeSub {
	return &sotwTypeSub{typeSubBase: typeSubBase{typeURL: typeURL}}
}

// updateSend decides, after the subscription of t changed from old (nil: no
// shard) to t.shard, whether the client must be sent the new shard's response
// even if it looks current. Rules (spec "When to send an update" and
// "resend any newly requested resources"):
//   - first request for the type: always send, except for a wildcard-only
//     Listener/Cluster subscription whose version_info already equals the
//     shard's version (a reconnect to a relay of the same tier);
//   - a newly added wildcard: send;
//   - newly added names that exist: send, even if unchanged;
//   - names only removed, or added names that do not exist (yet): nothing to
//     send; the client already holds the rest, and a name that appears later
//     changes the shard's version and is pushed then;
//   - added names while the new shard has no answer yet (a name pending at
//     the upstream): its answer is sent, even at the version last sent.
func (t *sotwTypeSub) updateSend(first bool, old *shard.Shard, clientVersion string) {
	cur := t.shard.Current()
	sub := t.shard.Sub
	switch {
	case first:
		if sub.Wildcard && len(sub.Names) == 0 && xdstype.FullState(t.typeURL) && clientVersion != "" {
			t.sentVersion, t.claimed = clientVersion, true
		} else {
			t.force = true
		}
	case old == nil:
		t.force = true
	case sub.Wildcard && !old.Sub.Wildcard:
		t.force = true
	default:
		added := sub.Added(old.Sub)
		if cur == nil && len(added) > 0 {
			// The new shard waits for the upstream (a name pending): what
			// the added names are is not known yet. Its answer goes out even
			// if its version is the one last sent: that may predate the
			// client dropping a name it now asks for again.
			t.force = true
			return
		}
		for _, n := range added {
			if cur != nil && cur.Has(n) {
				t.force = true
				return
			}
		}
		if oc := old.Current(); !t.force && oc != nil && oc.Version == t.sentVersion && cur != nil {
			// Up to date before, and nothing new exists: the new content is a
			// subset of what the client holds.
			t.carried = t.carriedAfter(cur)
			t.sentVersion, t.sentSum, t.sent = cur.Version, cur.Sum, cur
		}
	}
}

// holds reports whether the client holds resp: it was sent (or declared)
// at resp's version and, where that version is the upstream's, which may
// stay while the content changes, with resp's content. A version the
// client only claimed vouches for the content only if it is a content hash:
// an upstream's version_info may name other content on another relay's
// upstream stream.
func (t *sotwTypeSub) holds(resp *shard.Response) bool {
	switch {
	case t.force || resp.Version != t.sentVersion:
		return false
	case !resp.UpstreamVersioned:
		return true
	}
	return !t.claimed && resp.Sum == t.sentSum
}
