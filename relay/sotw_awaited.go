package relay

import "github.com/xds-relay/xds-relay/shard"

// Names awaited at the held version. With content-hash versions a name
// that comes into a shard changes its version, so a client is sent it by
// the version rule alone. With the upstream's versions passed through
// (upstream.versions: upstream) it may arrive at the version the client
// holds: the upstream answers a newly asked name at the type's version.
// So while the versions are the upstream's, a SotW stream remembers the
// names it subscribed that the shard lacked, and a response carrying one
// is sent although its version is the one held.

// awaitMissing records the names of sub that cur lacks, when cur's version
// is the upstream's; otherwise none (mu held).
func (t *sotwTypeSub) awaitMissing(cur *shard.Response, sub shard.Subscription) {
	t.awaited = t.awaited[:0]
	if cur == nil || !cur.UpstreamVersioned {
		t.awaited = nil
		return
	}
	for _, n := range sub.Names {
		if !cur.Has(n) {
			t.awaited = append(t.awaited, n)
		}
	}
}

// awaitedIn reports whether resp carries a name the client awaits.
func (t *sotwTypeSub) awaitedIn(resp *shard.Response) bool {
	for _, n := range t.awaited {
		if resp.Has(n) {
			return true
		}
	}
	return false
}

// received forgets the awaited names resp carries (it was sent).
func (t *sotwTypeSub) received(resp *shard.Response) {
	kept := t.awaited[:0]
	for _, n := range t.awaited {
		if !resp.Has(n) {
			kept = append(kept, n)
		}
	}
	t.awaited = kept
}
