package relay

import (
	"slices"
	"time"

	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// Children before parents. A delta client holding a Cluster and its
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
// delayed.

// removalGate decides, while one response of a parent type is written to a
// delta stream, which parent removals wait. It lives on the writer's stack
// (owned by the writer goroutine), used with the stream's mu held.
type removalGate struct {
	parent, child *deltaTypeSub
	wait          time.Duration
	now           time.Time // taken on first use
	armAt         time.Time // the earliest deadline set by this gate (zero: none)
}

// removalGate returns the gate for writing d's responses, or false when no
// removal of d's type waits (mu held).
func (s *deltaStream) removalGate(d *deltaTypeSub) (removalGate, bool) {
	wait := s.srv.opts.ParentRemovalWait
	ct := xdstype.ChildType(d.typeURL)
	if wait <= 0 || ct == "" {
		return removalGate{}, false
	}
	child, _ := s.types.get(ct)
	if child == nil || child.shard == nil {
		return removalGate{}, false
	}
	if cur := child.shard.Current(); cur == nil || !cur.AbsenceKnown {
		return removalGate{}, false // the children's removal will never be told
	}
	return removalGate{parent: d, child: child, wait: wait}, true
}

// heldRemoval is a parent removal held back: until when, and the children
// of the parent version the client holds. Guarded by the stream's mu, as
// the deltaTypeSub holding it.
type heldRemoval struct {
	until    time.Time
	children []string
	emptied  []string // the children the client held emptied when the wait began
}

// hold reports whether the removal of the parent name must wait, starting
// the wait if it is new.
func (g *removalGate) hold(name string) bool {
	if g == nil {
		return false
	}
	if g.now.IsZero() {
		g.now = time.Now()
	}
	h, waiting := g.parent.holds[name]
	if waiting {
		return g.now.Before(h.until) && g.childHeld(h)
	}
	if g.parent.base == nil {
		return false
	}
	r, ok := g.parent.base.Lookup(name)
	if !ok {
		return false
	}
	h = heldRemoval{until: g.now.Add(g.wait), children: r.Children()}
	h.emptied = g.emptied(h.children)
	if !g.childHeld(h) {
		return false
	}
	if g.parent.holds == nil {
		g.parent.holds = map[string]heldRemoval{}
	}
	g.parent.holds[name] = h
	if g.armAt.IsZero() || h.until.Before(g.armAt) {
		g.armAt = h.until
	}
	return true
}

// childHeld reports whether the client holds one of h's children whose
// removal can still come: any but one emptied since the wait began. istiod
// removes a Cluster, then empties its assignment instead of removing it;
// an assignment emptied before (a cluster without endpoints) may still be
// removed after its Cluster (go-control-plane sends both removals).
func (g *removalGate) childHeld(h heldRemoval) bool {
	for _, c := range h.children {
		if g.child.held(c) && (!g.child.heldEmptied(c) || slices.Contains(h.emptied, c)) {
			return true
		}
	}
	return false
}

// emptied returns the children the client holds emptied; nil when none.
func (g *removalGate) emptied(children []string) []string {
	var out []string
	for _, c := range children {
		if g.child.heldEmptied(c) {
			out = append(out, c)
		}
	}
	return out
}

// holdsAny reports whether some of names must wait.
func (g *removalGate) holdsAny(names []string) bool {
	held := false
	for _, n := range names {
		held = g.hold(n) || held // every name: each new wait starts now
	}
	return held
}

// releaseHoldsLocked queues the current response of every parent type some
// of whose held removals may go now (their children are gone, the client
// dropped them, or the wait is over), and arms the timer for the rest (mu
// held; any goroutine).
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
			case !gated || !now.Before(h.until) || !g.childHeld(h):
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

// armHoldTimerLocked makes sure the stream looks at its held removals again
// by deadline (mu held). One timer per stream, stopped when the stream ends.
func (s *deltaStream) armHoldTimerLocked(deadline time.Time) {
	if s.holdTimer != nil || s.stopped {
		return // a pending timer fires no later, and re-arms for the rest
	}
	s.holdTimer = time.AfterFunc(time.Until(deadline)+time.Millisecond, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.holdTimer = nil
		s.releaseHoldsLocked()
	})
}

// stopHoldTimer stops the timer at the stream's end.
func (s *deltaStream) stopHoldTimer() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holdTimer != nil {
		s.holdTimer.Stop()
		s.holdTimer = nil
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
