package shard

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// table is one class's state for one type URL: the resources learned from the
// upstream and the shards that select from them.
type table struct {
	// Read-only after creation.
	typeURL   string
	fullState bool
	store     ResourceStore // where resources are held (nil: by the table alone)

	// Guarded by Class.mu: everything below.

	// up is what the upstream answered and was asked for (see
	// upstreamState for its phases).
	up upstreamState
	// pending: names newly wanted and not held that only the upstream can
	// tell about (see markPending), each waiting as its pendingName says.
	pending pendingNames

	resources resIndex
	aliases   map[string]string // alias -> resource name (delta upstreams' Resource.aliases)
	// onDemand: held resources outside a site-specific wildcard's set,
	// held for the shards naming them (wildcardscope.go); nil when none.
	onDemand map[string]struct{}
	// shadowed: resources dropped that the upstream may believe held, by
	// name (see shadow.go); nil when none. sweepTimer: the timer that will
	// sweep the expired ones (nil: none armed).
	shadowed   map[string]shadowedResource
	sweepTimer *time.Timer
	// graceTimer fires at graceAt, the earliest pending name's deadline
	// (nil: none armed; see timers.go).
	graceTimer *time.Timer
	graceAt    time.Time
	// What keeps a shadow from outliving its reason (shadowbounds.go):
	// orphaned, the names whose parent the control plane removed (the
	// time they were dropped since, zero while held); restored, the names
	// held again from a shadow that the upstream has not sent since (when);
	// resyncing, the upstream's next answer is its first on a new stream.
	orphaned  map[string]time.Time
	restored  map[string]time.Time
	resyncing bool

	shards    map[Key][]*Shard    // a slice only to survive hash collisions
	byName    map[string]shardSet // never an empty set
	wildcards map[*Shard]struct{}
	// namePayload is the sum of nameBytes over byName: the union's names
	// as the upstream request carries them (see Limits).
	namePayload int
	// The most entries byName and pending held since they were last sized
	// (see compact).
	byNamePeak, pendingPeak int
}

func newTable(typeURL string, scope WildcardScope) *table {
	return &table{
		up:        upstreamState{scope: scope},
		typeURL:   typeURL,
		fullState: xdstype.FullState(typeURL),
		aliases:   map[string]string{},
		shards:    map[Key][]*Shard{},
		byName:    map[string]shardSet{},
		wildcards: map[*Shard]struct{}{},
		pending:   pendingNames{},
	}
}

// PendingGrace is how long names of a full-state type (Listener, Cluster)
// that the upstream was asked for may stay unanswered before shards needing
// them are served without them. Some control planes never answer a request
// for names that do not exist; until then, answering a full-state request
// without a name would tell a client holding it that it was deleted.
const PendingGrace = 2 * time.Second

// interest is the union of every shard's subscription.
func (t *table) interest() Subscription {
	return Subscription{Wildcard: len(t.wildcards) > 0, Names: slices.Sorted(maps.Keys(t.byName))}
}

// add indexes a new shard; it reports whether the union interest changed.
func (t *table) add(s *Shard) (interestChanged bool) {
	t.shards[s.Key] = append(t.shards[s.Key], s)
	if s.Sub.Wildcard {
		interestChanged = len(t.wildcards) == 0
		t.wildcards[s] = struct{}{}
	}
	for _, n := range s.Sub.Names {
		set, held := t.byName[n]
		if !held {
			t.namePayload += nameBytes(n)
			interestChanged = true
			t.markPending(n)
		}
		t.byName[n] = set.with(s)
	}
	return interestChanged
}

// markPending records a newly wanted name whose state only the upstream can
// tell, with an upstream that subscribes by name: for full-state types, or
// any type when the upstream is incremental.
func (t *table) markPending(name string) {
	if !t.namesAwaitAnswer() || !t.up.unaskedName(name) {
		return
	}
	if _, held := t.resource(name); !held {
		t.pending.want(name)
	}
}

// namesAwaitAnswer reports whether names the table lacks wait for the
// upstream's answer before shards are served without them: for full-state
// types, or any type when the upstream is incremental.
func (t *table) namesAwaitAnswer() bool { return t.fullState || t.up.incremental }

// pendingIn returns the names of shard s still pending at now.
func (t *table) pendingIn(s *Shard, now time.Time) []string {
	if len(t.pending) == 0 || s.Sub.Wildcard && !t.siteWildcard() {
		return nil
	}
	var out []string
	for _, n := range s.Sub.Names {
		if p, ok := t.pending[n]; ok && p.waiting(now) {
			out = append(out, n)
		}
	}
	return out
}

// remove drops a shard nobody watches any more and prunes resources nobody
// needs; it reports whether the union interest changed.
func (t *table) remove(s *Shard) (interestChanged bool) {
	list := slices.DeleteFunc(t.shards[s.Key], func(o *Shard) bool { return o == s })
	if len(list) == 0 {
		delete(t.shards, s.Key)
	} else {
		t.shards[s.Key] = list
	}
	if s.Sub.Wildcard {
		delete(t.wildcards, s)
		interestChanged = len(t.wildcards) == 0
	}
	t.byNamePeak = max(t.byNamePeak, len(t.byName))
	for _, n := range s.Sub.Names {
		set := t.byName[n].without(s)
		if !set.empty() {
			t.byName[n] = set
		} else {
			delete(t.byName, n)
			t.namePayload -= nameBytes(n)
			interestChanged = true
			t.pending.unwanted(n) // never asked for, and nobody waits for it
		}
	}
	// Resources stay until the upstream is told it need not send them any
	// more (setRequested): until then they are still current.
	return interestChanged
}

// compactMin is the size below which a table's maps are never re-made.
const compactMin = 1024

// compact re-makes the maps that shrank to under a quarter of their peak:
// a Go map keeps the buckets of its largest size, so after a client with
// 100,000 names leaves, the table would hold their room for good.
func (t *table) compact() {
	t.byName = shrink(t.byName, &t.byNamePeak)
	t.pending = shrink(t.pending, &t.pendingPeak)
}

func shrink[K comparable, V any](m map[K]V, peak *int) map[K]V {
	*peak = max(*peak, len(m))
	if *peak < compactMin || len(m) >= *peak/4 {
		return m
	}
	out := make(map[K]V, len(m)) // maps.Clone would keep m's size
	for k, v := range m {
		out[k] = v
	}
	*peak = len(out)
	return out
}

// setRequested records what the upstream was asked for and drops resources
// it will no longer keep current: those neither requested nor in the
// current interest. A wildcard requested anew is awaited until the next
// answer, so wildcard shards are not served a partial state meanwhile.
// Shadowed resources sub asks for again are held again (see shadow.go). It
// returns the earliest grace deadline it started (zero: none), the names of
// the resources it dropped, and the names shards may know the restored ones
// by.
func (t *table) setRequested(sub Subscription, incremental bool, now time.Time) (deadline time.Time, dropped, restored []string) {
	prevRequested := t.up.requested
	// A wildcard re-asked and dropped before its answer came: the names
	// it covered were not pending (asking the wildcard cleared them), and
	// no answer of it will serve the named shards that lack them.
	wildcardUnanswered := t.up.wildcardAwaited() && !sub.Wildcard && !t.siteWildcard()
	t.up.ask(sub, incremental)
	restored = t.restoreShadowed(sub, now)
	if t.up.coversByWildcard() {
		// A wildcard answer is complete: nothing is pending by name.
		t.pendingPeak = max(t.pendingPeak, len(t.pending))
		clear(t.pending)
		return time.Time{}, nil, restored
	}
	if t.namesAwaitAnswer() {
		// Names asked for by this request, not held and not asked before
		// (or only under the unanswered wildcard): the very first request
		// of a type, too, whose names nobody could mark pending when they
		// were subscribed.
		for _, n := range sub.Names {
			if _, held := t.resource(n); !held && (wildcardUnanswered || !prevRequested.Has(n)) {
				if _, ok := t.pending[n]; !ok {
					t.pending.want(n)
				}
			}
		}
	}
	t.pendingPeak = max(t.pendingPeak, len(t.pending))
	for n := range t.pending {
		if !sub.Has(n) {
			if _, named := t.byName[n]; !named {
				// Not asked for any more, and no shard waits for it: its
				// answer would be dropped anyway.
				delete(t.pending, n)
			}
			continue
		}
		// Other types than Listener and Cluster are served without the
		// name meanwhile (nothing is inferred from a partial answer), and
		// the name is never declared absent by a timer: only the
		// upstream's answer does.
		if d := t.pending.ask(n, t.fullState, now); !d.IsZero() {
			deadline = d
		}
	}
	if len(t.wildcards) > 0 && sub.Wildcard {
		// A site-specific wildcard keeps current only its own set: the
		// names no longer asked beside it go.
		return deadline, t.dropOnDemandUnasked(sub, now), restored
	}
	// Without the wildcard asked (a wildcard shard may be subscribed whose
	// request is still to be sent), the upstream keeps current only what
	// it was asked for: a delta upstream told to forget the rest answers a
	// later wildcard without them and never reports their deletion.
	for r := range t.resources.all {
		if !t.needed(r, sub) {
			t.shadow(r, now)
			t.drop(r.Name)
			dropped = append(dropped, r.Name)
		}
	}
	t.resources.settle()
	return deadline, dropped, restored
}

// lookup finds the shard for sub, if one exists.
func (t *table) lookup(key Key, sub Subscription) *Shard {
	for _, s := range t.shards[key] {
		if s.Sub.Equal(sub) {
			return s
		}
	}
	return nil
}

// apply merges an upstream update into the table and returns the names whose
// content changed. With replace, resources absent from update are deleted
// (and returned as gone).
// distinct says no two of update share a name (the source checked): the
// table then finds a full state's deletions by counting, and builds a set
// of the update's names only when there are some.
func (t *table) apply(update []*Resource, replace, distinct bool) (changed []string, gone []*Resource) {
	var seen map[string]struct{}
	if replace && !distinct {
		seen = getNameSet()
		defer putNameSet(seen)
	}
	var held *ptrSet
	if distinct && len(update) >= ptrSetMin && 2*len(update) >= t.resources.len() {
		// (Distinct names only: with two of a name, the second must
		// replace the first even when it is the one held before.)
		held = t.heldPtrs()
		defer held.release()
	}
	// With a site-specific wildcard asked, each resource is the wildcard's
	// or on demand (classifyOnDemand): judged against what the upstream had
	// answered before this update.
	classify := t.siteWildcard() && t.up.requested.Wildcard
	wildcardAnswered := t.up.phase == answered
	for _, r := range update {
		if seen != nil {
			seen[r.Name] = struct{}{}
		}
		if classify {
			_, wasHeld := t.resources.get(r.Name)
			t.classifyOnDemand(r, wasHeld, wildcardAnswered)
		}
		if held != nil && held.has(r) {
			continue // the very resource held under its name: unchanged
		}
		old, ok := t.resources.get(r.Name)
		if ok && old.sameAs(r) {
			continue
		}
		r = t.hold(r) // the held resource of r's content, if any
		if ok {
			changed = append(changed, t.unindexAliases(old)...)
			t.unhold(old)
		}
		t.resources.put(r)
		t.pending.told(r.Name) // the upstream has told about it: no longer pending
		for _, a := range r.Aliases() {
			t.aliases[a] = r.Name
		}
		changed = append(changed, r.Name)
		changed = append(changed, r.Aliases()...)
	}
	if !replace || seen == nil && t.resources.len() == len(update) {
		// Distinct names, every one of them held: none held is absent.
		t.resources.settle()
		return changed, nil
	}
	if seen == nil {
		seen = getNameSet()
		defer putNameSet(seen)
		for _, r := range update {
			seen[r.Name] = struct{}{}
		}
	}
	for r := range t.resources.all {
		if _, ok := seen[r.Name]; !ok {
			gone = append(gone, r)
			changed = append(changed, t.drop(r.Name)...)
		}
	}
	t.resources.settle()
	return changed, gone
}

// nameSets pools the name sets apply finds a full state's deletions with:
// every class's update of a full-state type needs one as large as the state.
var nameSets = sync.Pool{New: func() any { return map[string]struct{}{} }}

func getNameSet() map[string]struct{} { return nameSets.Get().(map[string]struct{}) }

// putNameSet pools an emptied set; one that held more than 16 × compactMin names is left to
// the collector rather than kept that large.
func putNameSet(m map[string]struct{}) {
	if len(m) > 16*compactMin {
		return
	}
	clear(m)
	nameSets.Put(m)
}

// drop deletes a resource; it returns the names shards may know it by.
func (t *table) drop(name string) []string {
	r, ok := t.resources.get(name)
	if !ok {
		return nil
	}
	t.resources.remove(name)
	delete(t.onDemand, name)
	t.unhold(r)
	return append(t.unindexAliases(r), name)
}

func (t *table) unindexAliases(r *Resource) []string {
	for _, a := range r.Aliases() {
		if t.aliases[a] == r.Name {
			delete(t.aliases, a)
		}
	}
	return r.Aliases()
}

// resource finds a resource by name or alias.
func (t *table) resource(name string) (*Resource, bool) {
	if r, ok := t.resources.get(name); ok {
		return r, true
	}
	if n, ok := t.aliases[name]; ok {
		return t.resources.get(n)
	}
	return nil, false
}

// keepAsked returns the resources of an upstream answer that the upstream
// was last asked for (by name or alias), when it subscribes by name. An
// answer the upstream sent before an unsubscription reached it can arrive
// after: its resources for names no longer asked would be kept current by
// nobody, and one deleted meanwhile would be served to its next subscriber
// and never reported removed. The slice is copied only when one goes.
func (t *table) keepAsked(resources []*Resource, now time.Time) []*Resource {
	if !t.up.reported || t.up.requested.Wildcard {
		return resources
	}
	for i, r := range resources {
		if !t.up.askedFor(r) {
			kept := slices.Clone(resources[:i])
			t.shadow(r, now) // the upstream believes the class holds what it sent
			for _, r := range resources[i+1:] {
				if t.up.askedFor(r) {
					kept = append(kept, r)
				} else {
					t.shadow(r, now)
				}
			}
			return kept
		}
	}
	return resources
}

// needed reports whether a shard subscribes to r by name or alias, or sub
// (what the upstream was asked for) names it.
func (t *table) needed(r *Resource, sub Subscription) bool {
	if _, ok := t.byName[r.Name]; ok || sub.Has(r.Name) {
		return true
	}
	for _, a := range r.Aliases() {
		if _, ok := t.byName[a]; ok || sub.Has(a) {
			return true
		}
	}
	return false
}

// affected returns the shards whose content may depend on the named
// resources: the wildcard shards and those subscribing to one of names.
func (t *table) affected(names []string) map[*Shard]struct{} {
	out := maps.Clone(t.wildcards)
	for _, n := range names {
		t.byName[n].addTo(out)
	}
	return out
}
