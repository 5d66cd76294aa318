package relay

import (
	"slices"
	"time"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// Removal order: a removal reaches a client only once it is safe for it.
// Two rules, one machinery (the gate below, its waits and one timer per
// stream), both bounded by Options.ParentRemovalWait:
//
//   - Children before parents (delta clients; delta_order.go): a Cluster's
//     (Listener's) removal waits while the client holds one of its
//     ClusterLoadAssignments (RouteConfigurations) whose removal can still
//     come.
//   - Referrers before what they stopped referring to (both protocols;
//     issue 23, X8): a Cluster's removal waits while the client holds a
//     RouteConfiguration or Listener that routes to it (its route actions,
//     inline routes, TCP proxies: shard.Resource.References), until the
//     change that stops referring to it was sent; a RouteConfiguration's
//     removal (delta) waits while the client holds a Listener naming it
//     that is not itself being removed (that one waits for its route's
//     removal by the first rule). The spec's make-before-break: an upstream
//     may send a Cluster's removal before the route change that makes it
//     safe (go-control-plane sends each type as it comes), and a client
//     told of it first fails its route's cluster (grpc-go reports the
//     cluster missing, not the new route).
//
// The relations a client's held resources have are read from what the
// stream sent it, so each rule costs nothing to a stream that holds no
// such resource, and a stream whose response removes nothing pays nothing.

// referrer is a type whose resources refer to those of another by name,
// and how: by rel. skipAbsent: a referrer being removed itself does not
// hold the removal (it waits for this one by the first rule).
type referrer struct {
	typeURL    string
	rel        shard.Relation
	skipAbsent bool
}

// referrersOf are the types whose resources may refer to those of typeURL.
func referrersOf(typeURL string) []referrer {
	switch typeURL {
	case xdstype.Cluster.URL:
		return clusterReferrers
	case xdstype.Route.URL:
		return routeReferrers
	}
	return nil
}

var (
	clusterReferrers = []referrer{{typeURL: xdstype.Route.URL, rel: shard.RoutesTo}, {typeURL: xdstype.Listener.URL, rel: shard.RoutesTo}}
	routeReferrers   = []referrer{{typeURL: xdstype.Listener.URL, rel: shard.Names, skipAbsent: true}}
)

// removalView is what a removal gate reads of a stream's state for one
// type: *deltaTypeSub, *sotwTypeSub (mu held).
type removalView interface {
	// heldResource is the resource the client holds under name, if known.
	heldResource(name string) (*shard.Resource, bool)
	// refersTo reports whether the client holds a resource referring to
	// name by rel (not counting, with skipAbsent, one known absent).
	refersTo(rel shard.Relation, skipAbsent bool, name string) bool
	// namesUnheld reports whether a resource the client holds names a
	// child (Resource.Children) that routes, the children's type, does
	// not hold (nil: none held).
	namesUnheld(routes removalView) bool
}

// gateRef is one referrer type of a stream, as a gate reads it.
type gateRef struct {
	view removalView
	referrer
}

// removalGate decides, while one response of a type is written to a
// stream, which of its removals wait. It lives on the writer's stack
// (owned by the writer goroutine, or the goroutine releasing holds), used
// with the stream's mu held.
type removalGate struct {
	view  removalView             // what the client holds of the type
	holds *map[string]heldRemoval // the type's held removals
	child *deltaTypeSub           // the children's type (nil: no child removal can come)
	refs  [2]gateRef              // the referrer types the client holds something of
	nrefs int
	// routes, listeners: the stream's views of those types, for a Cluster
	// gate (nil: none); awaited caches routeAwaited (0: not asked yet,
	// 1: yes, 2: no).
	routes, listeners removalView
	awaited           uint8
	wait              time.Duration
	now               time.Time // taken on first use
	armAt             time.Time // the earliest deadline set by this gate (zero: none)
}

// addReferrer adds v, the stream's state for the referrer type rf of the
// gate's type typeURL, to g.
func (g *removalGate) addReferrer(typeURL string, rf referrer, v removalView) {
	if g.nrefs == len(g.refs) {
		return
	}
	g.refs[g.nrefs] = gateRef{view: v, referrer: rf}
	g.nrefs++
	if typeURL == xdstype.Cluster.URL {
		switch rf.typeURL {
		case xdstype.Route.URL:
			g.routes = v
		case xdstype.Listener.URL:
			g.listeners = v
		}
	}
}

// heldRemoval is a removal held back: until when, the resource the client
// holds (its content, for the referrer rule) and its children, and the
// children the client held emptied when the wait began. Guarded by the
// stream's mu, as the type state holding it.
type heldRemoval struct {
	until    time.Time
	res      *shard.Resource
	children []string
	emptied  []string
}

// hold reports whether the removal of name must wait, starting the wait
// if it is new.
func (g *removalGate) hold(name string) bool {
	if g == nil {
		return false
	}
	if g.now.IsZero() {
		g.now = time.Now()
	}
	h, waiting := (*g.holds)[name]
	if waiting {
		return g.now.Before(h.until) && g.blocked(name, h)
	}
	r, ok := g.view.heldResource(name)
	if !ok {
		return false
	}
	h = heldRemoval{until: g.now.Add(g.wait), res: r, children: r.Children()}
	if g.child != nil {
		h.emptied = g.emptied(h.children)
	}
	if !g.blocked(name, h) {
		return false
	}
	if *g.holds == nil {
		*g.holds = map[string]heldRemoval{}
	}
	(*g.holds)[name] = h
	if g.armAt.IsZero() || h.until.Before(g.armAt) {
		g.armAt = h.until
	}
	return true
}

// blocked reports whether the removal of name, held as h, must still wait:
// a child of it whose removal can still come is held, or a referrer.
func (g *removalGate) blocked(name string, h heldRemoval) bool {
	return g.child != nil && g.childHeld(h) || g.referred(name) || g.routeAwaited()
}

// routeAwaited reports, for a Cluster gate, whether the client holds a
// Listener naming a RouteConfiguration it does not hold yet: a Listener
// changed from an inline route to RDS refers to the clusters of a route
// still on its way, which may be the one being removed (grpc-go reports
// it missing until the route comes).
func (g *removalGate) routeAwaited() bool {
	if g.awaited == 0 {
		g.awaited = 2
		if g.listeners != nil && g.listeners.namesUnheld(g.routes) {
			g.awaited = 1
		}
	}
	return g.awaited == 1
}

// unheldChild reports whether one of r's children is not held by routes
// (nil: none is).
func unheldChild(r *shard.Resource, routes removalView) bool {
	for _, c := range r.Children() {
		if routes == nil {
			return true
		}
		if _, ok := routes.heldResource(c); !ok {
			return true
		}
	}
	return false
}

// referred reports whether the client holds a resource referring to name.
func (g *removalGate) referred(name string) bool {
	for _, rf := range g.refs[:g.nrefs] {
		if rf.view.refersTo(rf.rel, rf.skipAbsent, name) {
			return true
		}
	}
	return false
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

// refersIn reports whether res refers to name by rel.
func refersIn(rel shard.Relation, res *shard.Resource, name string) bool {
	return slices.Contains(rel.Of(res), name)
}

// armHoldTimerLocked makes sure the stream looks at its held removals
// again by deadline (mu held). One timer per stream, stopped when the
// stream ends.
func (s *stream[S, Req]) armHoldTimerLocked(deadline time.Time) {
	if s.holdTimer != nil || s.stopped {
		return // a pending timer fires no later, and re-arms for the rest
	}
	s.holdTimer = time.AfterFunc(time.Until(deadline)+time.Millisecond, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.holdTimer = nil
		s.proto.releaseHoldsLocked()
	})
}

// stopHoldTimer stops the timer at the stream's end.
func (s *stream[S, Req]) stopHoldTimer() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holdTimer != nil {
		s.holdTimer.Stop()
		s.holdTimer = nil
	}
}
