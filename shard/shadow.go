package shard

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
// for it all along would hold it too.
//
// Listener and Cluster are not shadowed: a SotW response of theirs lists
// every resource asked for, so a late answer carries the name again. Nor are
// incremental upstreams' types: the class tells a delta upstream what it
// holds (initial_resource_versions). The shadow ends with the upstream
// stream's memory of the type (UpstreamHoldsNothing), with the class, or
// when a name is held again; it is bounded by shadowLimit.

// shadowLimit is the most resources one table shadows; a drop beyond it is
// not shadowed (the newest drops are the ones forgone: a table this large
// churns names faster than an upstream's stale answer lives).
const shadowLimit = 4 * compactMin

// shadows reports whether t keeps what it drops: a type whose SotW answers
// may list only what changed, from an upstream that subscribes by name.
func (t *table) shadows() bool { return !t.fullState && !t.up.incremental && t.up.reported }

// shadow keeps r, which t drops (or never held: an answer's resource no
// longer asked for), as the upstream may believe the class holds it. r is
// not held in the store while shadowed.
func (t *table) shadow(r *Resource) {
	if !t.shadows() {
		return
	}
	if _, ok := t.shadowed[r.Name]; !ok && len(t.shadowed) >= shadowLimit {
		return
	}
	if t.shadowed == nil {
		t.shadowed = map[string]*Resource{}
	}
	t.shadowed[r.Name] = r
}

// restoreShadowed holds again the shadowed resources sub asks for (by name,
// alias, or the wildcard) that t does not hold, and forgets the shadow of
// names held. It returns the names shards may know the restored ones by.
func (t *table) restoreShadowed(sub Subscription) (restored []string) {
	for name, r := range t.shadowed {
		if !sub.Covers(name, r.Aliases()) {
			continue
		}
		delete(t.shadowed, name)
		if _, held := t.resources.get(name); held {
			continue
		}
		t.resources.put(t.hold(r))
		t.pending.told(name)
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
// nothing of it, so nothing dropped is shadowed any more.
func (c *Class) UpstreamHoldsNothing(typeURL string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.tables[typeURL]; t != nil && len(t.shadowed) > 0 {
		t.shadowed = nil
		c.freeIfIdle(t)
	}
}
