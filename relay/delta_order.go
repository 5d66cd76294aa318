package relay

import (
	"time"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// Removal order for delta clients (removal_order.go has both rules).
// Children before parents: a delta client holding a Cluster and its
// ClusterLoadAssignment (a Listener and its RouteConfiguration) is told of
// the child's removal before the parent's: the spec's make-before-break
// order removes stale clusters together with their endpoints and allows
// either order, and some clients (Istio's delta adsc) fail when a parent
// goes first. Upstreams send the two removals in either order (go-control-
// plane's delta server does), so a parent's removal that would reach a
// client still holding one of its children, whose removal the relay can
// still learn (the child's shard knows absence), is held back: the response
// is sent without it and the client keeps claiming the parent, until the
// client no longer holds the children (their removal was written, or the
// client unsubscribed), holds them only emptied since (an assignment without
// endpoints: istiod sends that after the Cluster's removal instead of its
// own, so none follows), or Options.ParentRemovalWait has passed. The held
// removal is then sent on its own. Nothing is held for clients whose child
// removals can never come (a SotW upstream's EDS and RDS), so they are not
// delayed. A removal held by a referrer (the second rule) is held alike.

// removalGate returns the gate for writing d's responses, or false when no
// removal of d's type waits (mu held).
func (s *deltaStream) removalGate(d *deltaTypeSub) (removalGate, bool) {
	wait := s.srv.opts.ParentRemovalWait
	if wait <= 0 {
		return removalGate{}, false
	}
	g := removalGate{view: d, holds: &d.holds, wait: wait}
	if ct := xdstype.ChildType(d.typeURL); ct != "" {
		child, _ := s.types.get(ct)
		if child != nil && child.shard != nil {
			if cur := child.shard.Current(); cur != nil && cur.AbsenceKnown {
				g.child = child // the children's removal can be told
			}
		}
	}
	for _, rf := range referrersOf(d.typeURL) {
		if r, _ := s.types.get(rf.typeURL); r != nil && (r.base != nil || len(r.holds) > 0) {
			g.addReferrer(d.typeURL, rf, r)
		}
	}
	if g.child == nil && g.nrefs == 0 {
		return removalGate{}, false
	}
	return g, true
}

// heldResource implements removalView: the resource the client holds
// through its base (a claimed version elsewhere has no content here).
func (d *deltaTypeSub) heldResource(name string) (*shard.Resource, bool) {
	if d.base == nil {
		return nil, false
	}
	return d.base.Lookup(name)
}

// refersTo implements removalView: a resource of d's base the client still
// holds, or a removal of d's type held back, refers to name.
func (d *deltaTypeSub) refersTo(rel shard.Relation, skipAbsent bool, name string) bool {
	if d.base != nil && d.base.Refers(rel, name) {
		var cur *shard.Response
		if skipAbsent && d.shard != nil {
			cur = d.shard.Current()
		}
		for _, r := range d.base.Resources {
			if !refersIn(rel, r, name) {
				continue
			}
			if o, over := d.over[r.Name]; over && !o.held() {
				continue // dropped by the client
			}
			if cur != nil && cur.KnownAbsent(r.Name) {
				continue // being removed itself
			}
			return true
		}
	}
	if skipAbsent {
		return false // a held removal is of a resource being removed
	}
	for _, h := range d.holds {
		if h.res != nil && refersIn(rel, h.res, name) {
			return true
		}
	}
	return false
}

// namesUnheld implements removalView, over the resources of d's base the
// client has not dropped.
func (d *deltaTypeSub) namesUnheld(routes removalView) bool {
	if d.base == nil {
		return false
	}
	for _, r := range d.base.Resources {
		if o, over := d.over[r.Name]; over && !o.held() {
			continue
		}
		if unheldChild(r, routes) {
			return true
		}
	}
	return false
}

// releaseHoldsLocked queues the current response of every type some of
// whose held removals may go now (their children are gone, the client
// dropped them, no referrer holds them, or the wait is over), and arms
// the timer for the rest (mu held; any goroutine).
func (s *deltaStream) releaseHoldsLocked() {
	var next time.Time
	now := time.Now()
	for _, d := range s.types.all() {
		if len(d.holds) == 0 || d.shard == nil || d == s.switching {
			continue
		}
		g, gated := s.removalGate(d)
		cur := d.shard.Current()
		release := false
		for n, h := range d.holds {
			switch {
			case cur == nil || !cur.KnownAbsent(n):
				delete(d.holds, n) // no removal due any more (the resource is back)
			case !gated || !now.Before(h.until) || !g.blocked(n, h):
				release = true
			case next.IsZero() || h.until.Before(next):
				next = h.until
			}
		}
		if release {
			s.pushLocked(d, d.shard, d.shard.Current(), false)
		}
	}
	if !next.IsZero() {
		s.armHoldTimerLocked(next)
	}
}

// pruneHolds forgets the waits of removals no longer claimed: written,
// or the resource is back.
func (d *deltaTypeSub) pruneHolds() {
	for n := range d.holds {
		if _, claimed := d.over[n]; !claimed {
			delete(d.holds, n)
		}
	}
}
