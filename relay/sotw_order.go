package relay

import (
	"slices"
	"strings"
	"time"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/wire"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// Removal order for SotW clients (removal_order.go has the rules): the one
// removal a SotW client is told of that can overtake its safety is a
// Cluster's (a full-state CDS response without it), which waits while the
// client holds a RouteConfiguration or Listener routing to it. A CDS
// response that would remove such a Cluster is sent with the Cluster as
// the client holds it (kept), at a version of its own, until the route
// change was sent (the client then holds no referrer of it), the client
// no longer asks for the Cluster, or Options.ParentRemovalWait passed;
// the shard's response is then sent as it is. SotW clients are never told
// of EDS and RDS removals, so nothing else is held for them.

// removalGate returns the gate for writing t's responses, or false when no
// removal of t's type waits (mu held).
func (s *sotwStream) removalGate(t *sotwTypeSub) (removalGate, bool) {
	wait := s.srv.opts.ParentRemovalWait
	if wait <= 0 || t.typeURL != xdstype.Cluster.URL {
		return removalGate{}, false
	}
	g := removalGate{view: t, holds: &t.removals, wait: wait}
	for _, rf := range referrersOf(t.typeURL) {
		if r, _ := s.types.get(rf.typeURL); r != nil && r.shard != nil && (r.sent != nil || len(r.carried) > 0) {
			g.addReferrer(t.typeURL, rf, r)
		}
	}
	if g.nrefs == 0 {
		return removalGate{}, false
	}
	return g, true
}

// heldResource implements removalView: what the client holds under name,
// as last sent (or kept), while it still asks for it.
func (t *sotwTypeSub) heldResource(name string) (*shard.Resource, bool) {
	if t.shard == nil || !t.shard.Sub.Covers(name, nil) {
		return nil, false
	}
	if i, ok := slices.BinarySearchFunc(t.kept, name, byName); ok {
		return t.kept[i], true
	}
	for _, r := range t.carried {
		if r.Name == name {
			return r, true
		}
	}
	if t.sent != nil {
		return t.sent.Lookup(name)
	}
	return nil, false
}

// refersTo implements removalView: a resource the client holds (last sent
// while it still asks for it) refers to name.
func (t *sotwTypeSub) refersTo(rel shard.Relation, _ bool, name string) bool {
	if t.shard == nil {
		return false
	}
	held := func(r *shard.Resource) bool { return refersIn(rel, r, name) && t.shard.Sub.Covers(r.Name, nil) }
	if t.sent != nil && t.sent.Refers(rel, name) && slices.ContainsFunc(t.sent.Resources, held) {
		return true
	}
	return slices.ContainsFunc(t.carried, held) || slices.ContainsFunc(t.kept, held)
}

// namesUnheld implements removalView, over what was last sent (and
// carried, kept) while the client still asks for it.
func (t *sotwTypeSub) namesUnheld(routes removalView) bool {
	if t.shard == nil {
		return false
	}
	if t.sent != nil {
		for _, r := range t.sent.Resources {
			if t.shard.Sub.Covers(r.Name, nil) && unheldChild(r, routes) {
				return true
			}
		}
	}
	for _, list := range [2][]*shard.Resource{t.carried, t.kept} {
		for _, r := range list {
			if t.shard.Sub.Covers(r.Name, nil) && unheldChild(r, routes) {
				return true
			}
		}
	}
	return false
}

func byName(r *shard.Resource, name string) int { return strings.Compare(r.Name, name) }

// keptLocked returns the resources resp would remove that the client must
// keep for now (see removalGate), sorted by name; nil when none (mu held).
func (s *sotwStream) keptLocked(t *sotwTypeSub, resp *shard.Response) []*shard.Resource {
	if t.sent == nil && len(t.kept) == 0 {
		return nil
	}
	g, ok := s.removalGate(t)
	if !ok {
		return nil
	}
	var kept []*shard.Resource
	keep := func(r *shard.Resource) {
		if !resp.Has(r.Name) && g.hold(r.Name) {
			kept = append(kept, r)
		}
	}
	if len(t.kept) == 0 && resp.HasPrev && resp.PrevSum == t.sent.Sum {
		// The client holds the shard's previous version: its removals
		// are the version's, found once for every stream.
		for _, n := range resp.Removed {
			if r, ok := t.sent.Lookup(n); ok && t.shard.Sub.Covers(n, nil) {
				keep(r)
			}
		}
	} else {
		for _, r := range t.kept {
			if t.shard.Sub.Covers(r.Name, nil) {
				keep(r)
			}
		}
		if t.sent != nil {
			for _, r := range t.sent.Resources {
				if _, dup := slices.BinarySearchFunc(t.kept, r.Name, byName); !dup && t.shard.Sub.Covers(r.Name, nil) {
					keep(r)
				}
			}
		}
	}
	if !g.armAt.IsZero() {
		s.armHoldTimerLocked(g.armAt)
	}
	slices.SortFunc(kept, func(a, b *shard.Resource) int { return strings.Compare(a.Name, b.Name) })
	return kept
}

// keptBody is resp's SotW body with kept added, at a version of its own
// (resp's, marked with what is kept): the client holds that content, and
// the shard's own version is sent once nothing is kept.
func (s *sotwStream) keptBody(resp *shard.Response, kept []*shard.Resource) (wire.Body, string) {
	var sum dedup.SetSum
	size := resp.BodyLen
	for _, r := range kept {
		sum.Add(r.Name, r.Hash)
		size += len(r.Any) + 16
	}
	version := resp.Version + "+kept." + dedup.Version(sum.Sum(resp.TypeURL))
	all := make([]*shard.Resource, 0, len(resp.Resources)+len(kept))
	all = append(all, resp.Resources...)
	all = append(all, kept...)
	slices.SortFunc(all, func(a, b *shard.Resource) int { return strings.Compare(a.Name, b.Name) })
	bb := wire.NewBodyBuilder(version, size)
	for _, r := range all {
		if s.resourceInSotW && r.TTL() != nil {
			bb.AddResource(wire.WrappedAny(r.Name, r.Any, r.TTL()))
		} else {
			bb.AddResource(r.Any)
		}
	}
	return wire.NewBody(bb.Finish(resp.TypeURL)), version
}

// carriedAfter returns what the client holds of a RouteConfiguration
// subscription after resp is sent: a SotW response of the type need not
// list every resource, so one held before and left out is still held,
// while the client asks for it (only the referrer types are tracked).
func (t *sotwTypeSub) carriedAfter(resp *shard.Response) []*shard.Resource {
	if t.typeURL != xdstype.Route.URL || t.shard == nil {
		return nil
	}
	var out []*shard.Resource
	add := func(r *shard.Resource) {
		if !resp.Has(r.Name) && t.shard.Sub.Covers(r.Name, nil) && !slices.ContainsFunc(out, func(o *shard.Resource) bool { return o.Name == r.Name }) {
			out = append(out, r)
		}
	}
	for _, r := range t.carried {
		add(r)
	}
	if t.sent != nil {
		for _, r := range t.sent.Resources {
			add(r)
		}
	}
	return out
}

// releaseHoldsLocked implements protocol: it queues the current CDS
// response again when a Cluster kept may go now (no referrer holds it,
// the client stopped asking for it, it is back, or the wait is over), and
// arms the timer for the rest (mu held; any goroutine).
func (s *sotwStream) releaseHoldsLocked() {
	var next time.Time
	now := time.Now()
	for _, t := range s.types.all() {
		if len(t.removals) == 0 || t.shard == nil || t == s.switching {
			continue
		}
		g, gated := s.removalGate(t)
		cur := t.shard.Current()
		release := false
		for n, h := range t.removals {
			switch {
			case cur == nil || cur.Has(n) || !t.shard.Sub.Covers(n, nil):
				delete(t.removals, n) // back, or not asked for: nothing to hold
				release = true
			case !gated || !now.Before(h.until) || !g.blocked(n, h):
				release = true
			case next.IsZero() || h.until.Before(next):
				next = h.until
			}
		}
		if release && cur != nil {
			s.pushLocked(t, t.shard, cur, false)
		}
	}
	if !next.IsZero() {
		s.armHoldTimerLocked(next)
	}
}
