package shard

import (
	"context"
	"time"
)

// Shadowed resources: what a table dropped that its state-of-the-world
// upstream may still believe the class holds.
//
// A SotW upstream sends a RouteConfiguration or ClusterLoadAssignment only
// when it changed from what it believes the stream holds (go-control-plane's
// linear cache keeps that belief per stream and type). The relay drops a
// resource once no request asks for it (setRequested, keepAsked), but the
// upstream's belief can outlive the drop: go-control-plane ignores a request
// whose nonce is older than its last response, and a response computed for
// the earlier request and sent after the later one restores the belief
// (the stream's "returned resources" are set from each response sent). A
// name asked for again is then never sent again unless it changes, and a
// class that dropped it would serve its clients nothing for it, for good
// (conformance seed linear/sotw 5007024).
//
// So such a table keeps what it dropped, and restores a name when it is
// asked for again: the upstream's silence about it then means "unchanged",
// which the shadow's content is; an upstream that did forget sends it again,
// and its content replaces the shadow's. The one cost: a resource deleted
// upstream while shadowed is served again when re-asked, which a SotW
// upstream could not have reported for these types anyway (the spec's
// "Deleting Resources": SotW has no deletion for them), so a class asking
// for it all along would hold it too. Bounded (shadowbounds.go): not when
// the control plane removed its parent, and for ShadowHold at most unless
// the upstream sends it again.
//
// Listener and Cluster are not shadowed: a SotW response of theirs lists
// every resource asked for, and a request asking for one the class lacks
// claims no version (Class.AwaitsNames), which the upstream answers with
// it, or without it if it was deleted. Nor are
// incremental upstreams' types: the class tells a delta upstream what it
// holds (initial_resource_versions). A shadowed resource is forgotten
// ShadowHold after its drop (the upstream's stale belief lives only until
// it processes a request that leaves the name out, sent at the latest in
// reply to its answer in flight), when the upstream stream's memory of the
// type ends (UpstreamHoldsNothing), with the class, or when the name is
// held again; a table shadows at most shadowLimit.

// shadowLimit is the most resources one table shadows; a drop beyond it is
// not shadowed (the newest drops are the ones forgone: a table this large
// churns names faster than an upstream's stale answer lives).
const shadowLimit = 4 * compactMin

// ShadowHold is how long a dropped resource stays shadowed: many round
// trips of a loaded control plane. A table holding only shadows is freed
// once they expire (between ShadowHold and twice it after the drop).
const ShadowHold = 15 * time.Second

// shadowedResource is a resource a table dropped, and when.
type shadowedResource struct {
	r     *Resource
	since time.Time
	// onDemand: it was held outside a site-specific wildcard's set, so
	// only a request naming it asks for it again.
	onDemand bool
}

// asksAgain reports whether sub asks for the shadowed resource: by name,
// alias or a wildcard whose set it was in.
func (t *table) asksAgain(sub Subscription, sr shadowedResource) bool {
	if sub.Wildcard && sr.onDemand {
		sub.Wildcard = false
	}
	return sub.Covers(sr.r.Name, sr.r.Aliases())
}

// shadows reports whether t keeps what it drops: a type whose SotW answers
// may list only what changed, from an upstream that subscribes by name.
func (t *table) shadows() bool { return !t.fullState && !t.up.incremental && t.up.reported }

// shadow keeps r, which t drops (or never held: an answer's resource no
// longer asked for), as the upstream may believe the class holds it. r is
// not held in the store while shadowed.
func (t *table) shadow(r *Resource, now time.Time) {
	delete(t.restored, r.Name)
	if !t.shadows() || t.orphan(r.Name, now) {
		return
	}
	if _, ok := t.shadowed[r.Name]; !ok && len(t.shadowed) >= shadowLimit {
		return
	}
	if t.shadowed == nil {
		t.shadowed = map[string]shadowedResource{}
	}
	_, onDemand := t.onDemand[r.Name]
	t.shadowed[r.Name] = shadowedResource{r: r, since: now, onDemand: onDemand}
}

// restoreShadowed holds again the shadowed resources sub asks for (by name,
// alias, or the wildcard) that t does not hold, and forgets the shadow of
// names held, and the expired ones. It returns the names shards may know
// the restored ones by.
func (t *table) restoreShadowed(sub Subscription, now time.Time) (restored []string) {
	for name, sr := range t.shadowed {
		r := sr.r
		if now.Sub(sr.since) >= ShadowHold {
			delete(t.shadowed, name) // expired
			continue
		}
		if !t.asksAgain(sub, sr) {
			continue
		}
		delete(t.shadowed, name)
		if _, held := t.resources.get(name); held {
			continue
		}
		t.resources.put(t.hold(r))
		if sr.onDemand {
			if t.onDemand == nil {
				t.onDemand = map[string]struct{}{}
			}
			t.onDemand[name] = struct{}{}
		}
		t.pending.told(name)
		t.markRestored(name, now)
		for _, a := range r.Aliases() {
			t.aliases[a] = name
		}
		restored = append(restored, name)
		restored = append(restored, r.Aliases()...)
	}
	if len(restored) > 0 {
		t.resources.settle()
	}
	return restored
}

// UpstreamHoldsNothing tells the class that its upstream stream asks for
// typeURL with nothing of it answered on the stream (a new stream, or the
// type's first request on it): the upstream believes the class holds
// nothing of it, so nothing dropped is shadowed any more, and its first
// answer, to a request claiming no version, tells the state of every name
// asked (see resyncing).
func (c *Class) UpstreamHoldsNothing(typeURL string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tables[typeURL]
	if t == nil {
		return
	}
	t.resyncing = !t.fullState && t.resources.len() > 0
	if len(t.shadowed) > 0 {
		t.shadowed = nil
		c.freeIfIdle(t)
	}
}

// sweepShadowLater arranges for t's shadows (and what was restored from
// them, and its orphan marks) to be forgotten once expired (mu held): one
// timer a table at a time, whose goroutine only takes the class lock and
// returns.
func (c *Class) sweepShadowLater(t *table) {
	if len(t.shadowed) == 0 && len(t.restored) == 0 && len(t.orphaned) == 0 || t.sweepTimer != nil || c.freed {
		return
	}
	t.sweepTimer = time.AfterFunc(ShadowHold+time.Millisecond, func() { c.sweepShadow(t) })
}

// sweepShadow forgets t's expired shadows and orphan marks, drops what was
// restored from a shadow and not confirmed within ShadowHold (its shards
// are told), frees t if nothing else keeps it, and sweeps again later for
// the rest.
func (c *Class) sweepShadow(t *table) {
	var ts tells
	c.mu.Lock()
	t.sweepTimer = nil
	if c.freed || c.tables[t.typeURL] != t {
		c.mu.Unlock()
		return
	}
	now := time.Now()
	for name, sr := range t.shadowed {
		if now.Sub(sr.since) >= ShadowHold {
			delete(t.shadowed, name)
		}
	}
	t.expireOrphans(now)
	if gone := t.expireRestored(now); len(gone) > 0 {
		c.rebuildLocked(context.Background(), t, t.affected(gone), now, &ts)
	}
	c.freeIfIdle(t)
	c.sweepShadowLater(t)
	c.takeTurnLocked(&ts)
	c.mu.Unlock()
	ts.tellOutside()
}
