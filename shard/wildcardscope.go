package shard

import "time"

// WildcardScope is what a control plane's wildcard stands for
// (upstream.wildcard). The spec leaves it to the server: "the server should
// use site-specific business logic to determine the full set of resources"
// a wildcard subscription gets, and a client may subscribe to "*" and to a
// name outside that set at once (Envoy's on-demand CDS).
type WildcardScope uint8

const (
	// WildcardEveryResource: the wildcard is every resource of the type, as
	// go-control-plane and istiod have it. Names beside a wildcard are
	// covered by it: the upstream is asked the wildcard alone (SotW), and a
	// name a wildcard answer lacks does not exist. The zero scope.
	WildcardEveryResource WildcardScope = iota
	// WildcardSiteSpecific: the control plane decides what its wildcard
	// holds. Names beside a wildcard are asked as names too, each waits for
	// its own answer, and a wildcard shard is served the wildcard's
	// resources only: not a name only another client's subscription brought
	// (an on-demand name, see table.onDemand).
	WildcardSiteSpecific
)

// SetWildcardScope sets what the wildcard stands for in every class created
// from then on (call it before any class exists).
func (r *Registry) SetWildcardScope(s WildcardScope) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wildcardScope = s
}

// siteWildcard reports whether the upstream's wildcard may leave names out
// (WildcardSiteSpecific).
func (t *table) siteWildcard() bool { return t.up.scope == WildcardSiteSpecific }

// classifyOnDemand records, for a resource of an upstream answer, whether it
// is in the wildcard's set or an on-demand name, with a site-specific
// wildcard asked. One subscription cannot tell which part of it an answer's
// resource is for, so the table infers it:
//   - a resource the upstream was not asked by name is the wildcard's;
//   - a resource newly held in answer to the request that asked it by name
//     (it was pending), after the wildcard was answered, is on demand: the
//     wildcard's answer did not carry it, though it existed;
//   - otherwise it keeps what it was, the wildcard's if nothing is known
//     (held already; the wildcard's first answer not in; or created after
//     its name was answered absent, which the wildcard would have brought
//     as well): serving a wildcard client one resource too many is safer
//     than one too few.
//
// A name asked by name that the control plane moves into or out of its
// wildcard set meanwhile is not seen to move (its answers are the same):
// it is classified anew once nobody asks for it by name.
func (t *table) classifyOnDemand(r *Resource, wasHeld, wildcardAnswered bool) {
	if !t.siteWildcard() || !t.up.reported || !t.up.requested.Wildcard {
		return
	}
	named := t.up.requested.Has(r.Name) || hasAny(t.up.requested, r.Aliases())
	switch {
	case !named:
		delete(t.onDemand, r.Name)
	case !wasHeld && wildcardAnswered && t.pending.awaited(r.Name):
		if t.onDemand == nil {
			t.onDemand = map[string]struct{}{}
		}
		t.onDemand[r.Name] = struct{}{}
	}
}

func hasAny(s Subscription, names []string) bool {
	for _, n := range names {
		if s.Has(n) {
			return true
		}
	}
	return false
}

// wildcardServes reports whether a wildcard shard subscribing sub is served
// r: every resource, but an on-demand one only to a shard naming it.
func (t *table) wildcardServes(sub Subscription, r *Resource) bool {
	if _, od := t.onDemand[r.Name]; !od {
		return true
	}
	return sub.Has(r.Name) || hasAny(sub, r.Aliases())
}

// dropOnDemandUnasked drops the on-demand resources sub (what the upstream
// is asked now, the wildcard included) no longer names and no shard
// subscribes by name: the wildcard does not keep them current. It returns
// their names.
func (t *table) dropOnDemandUnasked(sub Subscription, now time.Time) (dropped []string) {
	for n := range t.onDemand {
		r, ok := t.resources.get(n)
		if !ok {
			delete(t.onDemand, n)
			continue
		}
		if !t.needed(r, sub) {
			t.shadow(r, now)
			t.drop(n)
			dropped = append(dropped, n)
		}
	}
	if len(dropped) > 0 {
		t.resources.settle()
	}
	return dropped
}
