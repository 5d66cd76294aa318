package relay

import (
	"maps"
	"slices"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/drop"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// override is what a delta client holds of one name where that differs
// from its base, or what it is owed. The kind says which; a version is
// only ever a version.
//
//	notHeld       the client does not hold the name (it dropped it, or it
//	              left with the wildcard)
//	heldAt(v)     it holds version v (declared in initial_resource_versions,
//	              or a removal held back by the removal gate)
//	owedSend      (re)subscribed: send it if it exists; report it removed
//	              once it is known not to
//	owedTell      unsubscribed while the wildcard covers it (the spec's
//	              exception): send it if it exists, else report it removed,
//	              with the shard's first answer (never from a shard that
//	              has none: the relay does not know yet)
//
// Transitions (deltaTypeSub.apply, forgetWildcardOnly, advance):
//
//	subscribe n                                 → owedSend
//	"*" newly subscribed, n maybe held          → owedSend (see deltaTypeSub.maybe)
//	first request declares v for n              → heldAt(v) (v empty: notHeld,
//	                                              or owedSend if n is subscribed)
//	unsubscribe n under the wildcard            → owedTell
//	unsubscribe n held through base             → notHeld (and maybe held while a
//	                                              response is on its way); otherwise
//	                                              the entry goes
//	wildcard unsubscribed, n not named          → notHeld, unless owedSend
//	a response is written                       → entries go (the client is at base),
//	    but for: owedSend of a name neither present nor known absent; heldAt of a
//	    name not known absent; a removal the gate holds back (heldAt, or as claimed)
type override struct {
	kind    overrideKind
	version string // heldAt only
}

// overrideKind is the state of an override; an override is only ever
// replaced whole (deltaTypeSub.mark, advance's keep), never edited.
type overrideKind uint8

const (
	notHeld  overrideKind = iota // the zero override
	heldAt                       // with the version held (see holding)
	owedSend                     // sent if it exists, else removed once known absent
	owedTell                     // sent if it exists, else removed with the next answer
)

// holding is the override of a client holding version v; an empty version
// is no version: the client is taken not to hold the name.
func holding(v string) override {
	if v == "" {
		return override{}
	}
	return override{kind: heldAt, version: v}
}

// held reports whether the client holds the name, or is owed it.
func (o override) held() bool { return o.kind != notHeld }

// owed reports whether the client is owed an answer about the name.
func (o override) owed() bool { return o.kind == owedSend || o.kind == owedTell }

// at reports whether the client holds the name at version v.
func (o override) at(v string) bool { return o.kind == heldAt && o.version == v }

// deltaTypeSub is a delta stream's state for one type URL. What the client
// holds is base (a version of a shard, shared with every stream that holds
// it) amended by over, which is empty for a client in sync: so a stream in
// sync costs a pointer, however many resources it holds. Guarded by the
// stream's mu; shard is written only by the stream's reader.
type deltaTypeSub struct {
	typeSubBase
	wildcard bool
	names    map[string]struct{} // explicit subscriptions

	base   *shard.Response     // what the client holds, nil before the first response
	over   map[string]override // what the client holds where it is not base; nil when empty
	told   bool                // a response was sent for this type
	retell bool                // the last request changed what must be told (reader only)
	// answered is the latest nonce of the type the client's requests
	// echoed: a response stamped since (nonce != answered) may still be on
	// its way to the client.
	answered uint64
	// maybe: names marked not held while a response was on its way (the
	// client unsubscribed them, or the wildcard that covered them). That
	// response may carry them, and a client that applies it after its own
	// unsubscription holds them although over says it does not. When a
	// subscription covers such a name again (a newly subscribed "*", or
	// the name itself), the client is owed it: sent if it exists, reported
	// removed once known absent. The names stay until then, since the
	// client may hold them that long. Client-driven, so bounded: at most
	// limits.max_resource_names over the stream's types, the excess
	// forgotten (trimMaybeLocked). Nil when empty.
	maybe map[string]struct{}
	// holds: removals of this parent type held back until the client no
	// longer holds the removed resource's children, or a deadline (see
	// removalGate); each name is still claimed in over. Nil when none.
	holds map[string]heldRemoval
}

func newDeltaTypeSub(typeURL string) *deltaTypeSub {
	return &deltaTypeSub{typeSubBase: typeSubBase{typeURL: typeURL}, names: map[string]struct{}{}}
}

// mark sets what the client holds of name, overriding base.
func (d *deltaTypeSub) mark(name string, o override) {
	if d.over == nil {
		d.over = map[string]override{}
	}
	d.over[name] = o
}

func versionOf(r *shard.Response) string {
	if r == nil {
		return ""
	}
	return r.Version
}

// apply folds one request into the subscription (spec "Incremental xDS" and
// "How the client specifies what resources to return").
func (d *deltaTypeSub) apply(first bool, req *discoveryv3.DeltaDiscoveryRequest) {
	sub, unsub := req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe()
	if shard.DeltaLegacyWildcard(first, sub, unsub) {
		d.wildcard = true
	}
	if first {
		// Sized once for the names the request brings (bounded by
		// limits.max_resource_names): a reconnecting client's tens of
		// thousands of names would otherwise regrow both maps step by step.
		if len(d.names) == 0 && len(sub) > 0 {
			d.names = make(map[string]struct{}, len(sub))
		}
		if n := len(sub) + len(req.GetInitialResourceVersions()); d.over == nil && n > 0 {
			d.over = make(map[string]override, n)
		}
	}
	for _, n := range sub {
		if n == shard.Wildcard {
			if !d.wildcard {
				// A wildcard newly subscribed is answered, even with nothing
				// the client lacks: the answer tells it (a relay below,
				// waiting for its upstream's word) that what it holds is the
				// complete state.
				d.told = false
				d.oweMaybe()
			}
			d.wildcard = true
			continue
		}
		if n == "" {
			// A name that matches nothing (as go-control-plane has it): it
			// ends the legacy wildcard like any name (above), is never
			// requested upstream and is never reported removed.
			continue
		}
		// Sent even if the client seems to hold it: it may have forgotten it.
		d.names[n] = struct{}{}
		d.mark(n, override{kind: owedSend})
		delete(d.maybe, n)
		d.retell = true
	}
	if first {
		// Reconnect: what the client already holds is not sent again.
		for n, v := range req.GetInitialResourceVersions() {
			if _, named := d.names[n]; named && v == "" {
				// Claimed at no version (as an xds-relay below claims the
				// names it asks on a new stream): it stays owed, sent if
				// it exists and reported removed once known absent, as
				// go-control-plane answers such a claim.
				continue
			}
			d.mark(n, holding(v))
		}
	}
	for _, n := range unsub {
		if n == shard.Wildcard {
			if d.wildcard {
				d.wildcard = false
				d.forgetWildcardOnly()
			}
			continue
		}
		if _, ok := d.names[n]; !ok {
			continue // a phantom unsubscription ("" included): nothing to do
		}
		delete(d.names, n)
		switch {
		case d.wildcard:
			d.mark(n, override{kind: owedTell})
			d.retell = true
		case d.base != nil && d.base.Has(n), d.base != nil && d.base.Aliases[n] != "":
			d.mark(n, override{}) // the client drops it; no answer needed
			if name := d.base.Aliases[n]; name != "" {
				d.maybeHeld(name) // what a response carries goes by its name
			} else {
				d.maybeHeld(n)
			}
		default:
			// Nothing the client was sent goes by this name: forget it, so
			// that names subscribed and unsubscribed in turn leave nothing.
			delete(d.over, n)
		}
	}
}

// forgetWildcardOnly records that the client dropped what it held only
// through the wildcard, so those names are not reported removed.
func (d *deltaTypeSub) forgetWildcardOnly() {
	for n, v := range d.over {
		// Declared versions (initial_resource_versions) of names held only
		// through the wildcard are dropped with it; so is the answer owed to
		// an unsubscription the wildcard covered (the exception needs the
		// wildcard to stay).
		if _, named := d.names[n]; !named && v.kind != owedSend {
			d.over[n] = override{}
		}
	}
	if d.base == nil {
		return
	}
	for _, n := range d.base.Names {
		if _, named := d.names[n]; !named {
			d.mark(n, override{})
			d.maybeHeld(n)
		}
	}
}

// maybeHeld records that name, just marked not held, may be held all the
// same if a response is on its way (see maybe).
func (d *deltaTypeSub) maybeHeld(name string) {
	if d.nonce == d.answered {
		return // the client has read every response: it holds what over says
	}
	if d.maybe == nil {
		d.maybe = map[string]struct{}{}
	}
	d.maybe[name] = struct{}{}
}

// oweMaybe makes the names the client may hold owed to it, as the wildcard
// newly subscribed covers them again (see maybe). An answer already owed
// stays.
func (d *deltaTypeSub) oweMaybe() {
	for n := range d.maybe {
		if o, ok := d.over[n]; !ok || !o.owed() {
			d.mark(n, override{kind: owedSend})
		}
	}
	d.maybe = nil
}

func (d *deltaTypeSub) subscription() shard.Subscription {
	return shard.Subscription{Wildcard: d.wildcard, Names: slices.Sorted(maps.Keys(d.names))}
}

// held reports whether the client holds name (or is owed it).
func (d *deltaTypeSub) held(name string) bool {
	if o, ok := d.over[name]; ok {
		return o.held()
	}
	if d.base != nil {
		_, ok := d.base.Lookup(name)
		return ok
	}
	return false
}

// overridden returns the override of a resource, by its name or, when the
// client subscribed by alias, by an alias; an answer owed wins over a held
// version.
func (d *deltaTypeSub) overridden(r *shard.Resource) (override, bool) {
	o, ok := d.over[r.Name]
	if ok && o.owed() {
		return o, true
	}
	for _, a := range r.Aliases() {
		if ao, aok := d.over[a]; aok {
			if ao.owed() {
				return ao, true
			}
			if !ok {
				o, ok = ao, true
			}
		}
	}
	return o, ok
}

// holdsCurrent reports whether the client holds r at r's version.
func (d *deltaTypeSub) holdsCurrent(r *shard.Resource) bool {
	if o, ok := d.overridden(r); ok {
		return o.at(r.Version())
	}
	if d.base != nil {
		if br, ok := d.base.Lookup(r.Name); ok {
			return br.Version() == r.Version()
		}
	}
	return false
}

// advance moves the client to shard version c and returns the nonce-less
// response that does it, or why the client needs nothing: it holds c
// already (drop.AlreadyHeld), or the difference is empty
// (drop.EmptyResponse). A client that held c's previous version gets c's
// shared, once-encoded delta. Removals the gate holds back (nil: none) are
// left out, and still claimed.
func (d *deltaTypeSub) advance(c *shard.Response, gate *removalGate) (body wire.Body, why drop.Reason) {
	defer d.pruneHolds()
	// The first answer to a wildcard subscription is sent even when empty:
	// it tells the client the state it holds is complete.
	mustAnswer := d.wildcard && !d.told
	if len(d.over) == 0 && d.base == nil {
		// From nothing: every client starting here gets the same bytes.
		d.base, d.over = c, nil
		if len(c.Resources) == 0 && !d.wildcard {
			return wire.Body{}, drop.EmptyResponse
		}
		d.told = true
		return c.DeltaFullBody(), 0
	}
	if len(d.over) == 0 && d.base != nil && !mustAnswer {
		if d.base.Sum == c.Sum {
			return wire.Body{}, drop.AlreadyHeld
		}
		if c.HasPrev && c.PrevSum == d.base.Sum && (len(c.Removed) == 0 || gate == nil || !gate.holdsAny(c.Removed)) {
			d.base = c
			if len(c.Changed) == 0 && len(c.Removed) == 0 {
				return wire.Body{}, drop.EmptyResponse
			}
			d.told = true
			return c.DeltaBody(), 0
		}
	}
	changed, removed, keep := d.diffTo(c)
	if gate != nil && len(removed) > 0 {
		kept := removed[:0]
		for _, n := range removed {
			if !gate.hold(n) {
				kept = append(kept, n)
				continue
			}
			if keep == nil {
				keep = map[string]override{}
			}
			keep[n] = d.claim(n)
		}
		removed = kept
	}
	d.base, d.over = c, keep
	if len(changed) == 0 && len(removed) == 0 && !mustAnswer {
		return wire.Body{}, drop.EmptyResponse
	}
	d.told = true
	return shard.EncodeDelta(d.typeURL, c.Version, changed, removed), 0
}

// claim is what the client holds of name, as over records it: the
// override, else the version in base.
func (d *deltaTypeSub) claim(name string) override {
	if o, ok := d.over[name]; ok {
		return o
	}
	if d.base != nil {
		if r, ok := d.base.Lookup(name); ok {
			return holding(r.Version())
		}
	}
	return override{}
}

// diffTo computes what the client lacks of c and what it must drop, and the
// overrides still unresolved after that.
func (d *deltaTypeSub) diffTo(c *shard.Response) (changed []*shard.Resource, removed []string, keep map[string]override) {
	for _, r := range c.Resources {
		if !d.holdsCurrent(r) {
			changed = append(changed, r)
		}
	}
	for n, o := range d.over {
		if c.Has(n) {
			continue
		}
		switch o.kind {
		case notHeld:
		case owedTell:
			removed = append(removed, n)
		case owedSend, heldAt:
			if c.KnownAbsent(n) {
				removed = append(removed, n)
				continue
			}
			// owedSend: unknown yet, tell when it appears or is known
			// absent. heldAt (e.g. declared in initial_resource_versions):
			// not in c and not known absent, the client still holds it as
			// far as anyone knows; keep the claim, so a deletion learned
			// later is reported.
			if keep == nil {
				keep = map[string]override{}
			}
			keep[n] = o
		}
	}
	if d.base != nil && c.AbsenceKnown {
		for _, r := range d.base.Resources {
			if _, overridden := d.overridden(r); !overridden && c.KnownAbsent(r.Name) {
				removed = append(removed, r.Name)
			}
		}
	}
	slices.Sort(removed)
	return changed, removed, keep
}
