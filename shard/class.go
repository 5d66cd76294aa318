package shard

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
)

// Class is one node class: the resources its upstream sent, per type URL, and
// the shards its downstream streams subscribe to.
//
// Lock order: Registry.mu, then Class.mu. The class tells its watchers
// (ShardChanged, ShardHeartbeat) after releasing mu, one update after the
// other (see tell.go); an update waits for the previous one's telling with
// no lock held. Callers still must not hold a stream's lock (or any lock a
// Watcher takes) while calling into a class: Apply and ApplyUpdate tell
// before they return, and a Watcher takes its stream's lock, so subscribe,
// unsubscribe, apply and read it with no stream lock held.
type Class struct {
	// Read-only after creation (the registry sets onInterest, onFanout and
	// limits before it publishes the class).
	Name string
	// Node is the first downstream node seen for the class; the upstream node
	// is synthesized from it. Callers must not modify it.
	Node *corev3.Node
	// onInterest is told the type URL whose union subscription changed. Called
	// with mu held: it must not block (see dedup.Signal).
	onInterest func(typeURL string)
	// onFanout, if set, is told how long each update took from the upstream
	// to the last of its streams (see Response.FanoutStep).
	onFanout FanoutObserver
	// limits bound the union subscription (set before any stream
	// subscribes); nodeBytes is Node's encoded size, for the request
	// estimate.
	limits    Limits
	nodeBytes int
	// store holds the tables' resources, shared with other classes (nil:
	// each table holds its own).
	store ResourceStore
	// wildcardScope is what the upstream's wildcard stands for, copied
	// into each table.
	wildcardScope WildcardScope
	// onUnavailable are told when the upstream becomes unreachable
	// (unavailable.go).
	onUnavailable []UnavailableHook
	// shardLinger is how long a shard left by its last stream's end
	// lingers (Leave); zero: it goes at once.
	shardLinger time.Duration

	// Guarded by mu.
	mu     sync.Mutex
	tables map[string]*table // each table and its shards' watchers too
	// idle: no stream holds a lease on the class (it lingers); a shard whose
	// last watcher leaves is kept, with its upstream interest, for clients
	// that come back. Written under Registry.mu as well.
	idle bool
	// lingering: the shards left by ended streams, until their linger
	// passes (see linger.go).
	lingering shardLinger
	// toldTail is closed once the last tells collected is told (nil before
	// the first): the next one waits for it (see tell.go).
	toldTail chan struct{}
	// freed: the class was dropped and its resources released; an update
	// still arriving is not installed.
	freed bool

	// What the upstream sent and whether it is reachable (unavailable.go);
	// its own lock.
	reach upstreamReach

	// Guarded by Registry.mu (see registry.go).
	leases    int         // streams (and REST polls) using the class
	idleSince time.Time   // when leases last dropped to 0
	linger    *time.Timer // pending linger expiry, nil when none
	dropped   bool        // removed from the registry; never used again
}

func newClass(name string, node *corev3.Node, onInterest func(string)) *Class {
	if onInterest == nil {
		onInterest = func(string) {}
	}
	return &Class{Name: name, Node: proto.Clone(node).(*corev3.Node), onInterest: onInterest, tables: map[string]*table{},
		nodeBytes: proto.Size(node), lingering: shardLinger{max: MaxLingeringShards, counts: new(lingerCounts)}}
}

func (c *Class) table(typeURL string) *table {
	t := c.tables[typeURL]
	if t == nil {
		t = newTable(typeURL, c.wildcardScope)
		t.store = c.store
		c.tables[typeURL] = t
	}
	return t
}

// TrySubscribe registers w on the shard for (typeURL, sub), creating the
// shard (and building its response from what the class already knows) if it
// is the first such subscription. The union interest grows when sub asks for
// names no other shard did. A new shard that would push the class past its
// Limits is refused with a *LimitError, and nothing changes: joining an
// existing shard never changes the union, and is never refused.
func (c *Class) TrySubscribe(typeURL string, sub Subscription, w Watcher) (*Shard, error) {
	return c.subscribe(typeURL, sub, w, true)
}

func (c *Class) subscribe(typeURL string, sub Subscription, w Watcher, limited bool) (*Shard, error) {
	key := KeyOf(c.Name, typeURL, sub)
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tables[typeURL]
	var s *Shard
	if t != nil {
		s = t.lookup(key, sub)
	}
	if s == nil {
		// Before any table exists: a refused type leaves nothing behind.
		if limited {
			if err := c.admitEvicting(typeURL, sub); err != nil {
				return nil, err
			}
		}
		t = c.table(typeURL) // an eviction may have freed the type's table
		s = &Shard{Key: key, Class: c, TypeURL: typeURL, Sub: sub, watchers: map[Watcher]struct{}{}}
		interestChanged := t.add(s) // first: it marks names only the upstream can answer
		t.rebuild(s)
		if interestChanged {
			c.onInterest(typeURL)
		}
	}
	c.lingering.take(s, LingerReused) // a lingering shard is in use again
	s.watchers[w] = struct{}{}
	s.told = nil
	return s, nil
}

// Unsubscribe removes w from s; the last watcher leaving removes the shard
// and drops names nobody needs from the union interest. (A stream that
// ends leaves its shards with Leave, to linger.)
func (c *Class) Unsubscribe(s *Shard, w Watcher) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(s.watchers, w)
	s.told = nil
	if len(s.watchers) > 0 || s.lingering != nil || c.idle {
		return // an idle class keeps its shards until its linger ends
	}
	c.removeShardLocked(s)
}

// removeShardLocked removes a shard nobody watches from its table, telling
// the upstream hook if the union interest changed (mu held).
func (c *Class) removeShardLocked(s *Shard) {
	if t := c.tables[s.TypeURL]; t != nil {
		if t.remove(s) {
			c.onInterest(s.TypeURL)
		}
		c.freeIfIdle(t)
	}
}

// freeIfIdle drops t if it holds nothing and its upstream need not be told
// anything more of it (mu held): no shard, no resource, no pending name, and
// the upstream was never asked for the type or was last asked for nothing.
// A type's next subscription starts a new table, as its first did.
func (c *Class) freeIfIdle(t *table) {
	if len(t.shards) == 0 && t.resources.len() == 0 && len(t.pending) == 0 && len(t.shadowed) == 0 && t.up.askedForNothing() &&
		c.tables[t.typeURL] == t {
		delete(c.tables, t.typeURL)
		t.stopTimers()
	}
}

// Requested tells the class what its upstream was just asked for, for
// typeURL. Resources outside it (and outside the current interest) are
// dropped: the upstream will not keep them current. Only upstreams that
// subscribe by name call it; a source holding the complete state does not.
//
// Newly requested names the class does not hold stay pending until the
// upstream answers, or PendingGrace has passed: for Listener and Cluster, and
// for every type when the upstream is incremental (its answers are exact).
//
// It returns the names of the resources it dropped. A resource outside sub
// that a shard subscribed to again since the interest sub was built from is
// kept, though the upstream was told to forget it: an incremental upstream
// must be asked for it again in a way that says the class holds it.
func (c *Class) Requested(typeURL string, sub Subscription, incremental bool) (dropped []string) {
	now := time.Now()
	var ts tells
	c.mu.Lock()
	if sub.Empty() && c.tables[typeURL] == nil {
		c.mu.Unlock()
		return nil // nothing asked of a type the class holds nothing of
	}
	t := c.table(typeURL)
	deadline, dropped, restored := t.setRequested(sub, incremental, now)
	c.armGraceLocked(t, deadline)
	if len(restored) > 0 {
		c.rebuildLocked(context.Background(), t, t.affected(restored), now, &ts)
	}
	t.compact()
	c.freeIfIdle(t)
	c.sweepShadowLater(t)
	c.takeTurnLocked(&ts)
	c.mu.Unlock()
	ts.tellOutside()
	return dropped
}

// AwaitsNames reports whether the upstream was last asked for names of
// typeURL that the class neither holds nor knows to be absent: pending
// names (Listener and Cluster, or any type of an incremental upstream),
// whose answer is owed; or that it holds on a shadow's word alone
// (shadowbounds.go), which the upstream is to confirm. A SotW upstream's request then claims no version
// (upstream/sotw.go), so that the upstream answers them.
func (c *Class) AwaitsNames(typeURL string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tables[typeURL]
	return t != nil && (t.pending.asked() || t.awaitsRestored())
}

// Interest returns the union of the subscriptions of typeURL's shards.
func (c *Class) Interest(typeURL string) Subscription {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.tables[typeURL]; t != nil {
		return t.interest()
	}
	return Subscription{}
}

// TypeURLs returns the type URLs the class has state or shards for, sorted.
func (c *Class) TypeURLs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.tables))
}

// Update is one upstream update of a type URL.
type Update struct {
	// Kind says what the update tells about the type's state (the zero
	// kind merges).
	Kind UpdateKind
	// Resources are new or changed resources (UpdateFull: all of them).
	Resources []*Resource
	// Removed are names deleted (UpdateIncremental).
	Removed []string
	// Heartbeats refresh the TTL of resources held, without changing them
	// (spec "TTL": a Resource with no resource and the same version).
	Heartbeats []HeartbeatEntry
	// Version, when set, is the upstream's version_info, passed through as
	// the SotW version of the shards whose content this update (or a later
	// rebuild) changes; empty: versions are content hashes.
	Version string
	// Ctx is the update's context (its trace), handed to the fan-out
	// observer; nil is context.Background.
	Ctx context.Context
	// Distinct: no two Resources share a name (the source checked, as the
	// upstream's validator does). An update of a full state then costs no
	// set of its names unless something was deleted.
	Distinct bool
	// Asked: the update answers a request of a source that subscribes by
	// name (one that calls Requested). For a type the class holds no table
	// of, it answers a request made before the type was last asked for
	// nothing (and its table freed), and is dropped, as keepAsked drops a
	// late answer's names no longer asked: a new table would take it for
	// a complete source's state, kept current for nobody, and serve a
	// resource deleted since to the type's next subscriber. So is one for
	// a table the upstream was not asked for anything yet (created by a
	// shard after the old one was freed).
	Asked bool
}

// HeartbeatEntry is one resource's TTL refresh.
type HeartbeatEntry struct {
	Name string
	TTL  []byte
}

// Apply installs an upstream update of typeURL. With replace, the update is
// the complete state (resources absent from it are deleted); otherwise it is
// merged. Shards whose content changed get a new encoded response and their
// watchers are told, in shard then watcher order, before Apply returns
// (after the class's earlier updates were told, and with no lock held).
func (c *Class) Apply(typeURL string, update []*Resource, replace bool) {
	kind := UpdateMerge
	if replace {
		kind = UpdateFull
	}
	c.ApplyUpdate(typeURL, Update{Kind: kind, Resources: update})
}

// ApplyUpdate installs u into typeURL's table, rebuilds the shards it
// affects and tells their watchers, then forwards its heartbeats. The
// watchers are told after the class lock is released (see tell.go).
func (c *Class) ApplyUpdate(typeURL string, u Update) {
	start := time.Now()
	var ts tells
	c.mu.Lock()
	c.applyLocked(typeURL, u, start, &ts)
	c.takeTurnLocked(&ts)
	c.mu.Unlock()
	ts.tellOutside()
}

// applyLocked is ApplyUpdate under mu: what the watchers are owed goes to
// ts.
func (c *Class) applyLocked(typeURL string, u Update, start time.Time, ts *tells) {
	switch t := c.tables[typeURL]; {
	case c.freed:
		return // dropped: nothing may hold a resource any more
	case t == nil && (len(u.Resources) == 0 || u.Asked):
		return // nothing to hold, and no shard to tell: the type's next shard starts afresh
	case t != nil && u.Asked && !t.up.reported:
		// A table the upstream was not asked for anything yet (the type's
		// next shard came after it was freed): the answer is to a request
		// of the freed table, and dropped as above.
		return
	}
	t := c.table(typeURL)
	resources := t.keepAsked(u.Resources, start)
	c.sweepShadowLater(t)
	kept := len(resources) // distinct if u.Resources are: heartbeats add to them below
	beats := u.Heartbeats[:0:0]
	for _, hb := range u.Heartbeats {
		r, ok := t.resources.get(hb.Name)
		switch {
		case !ok:
		case !bytes.Equal(r.TTL(), hb.TTL):
			// A new TTL is a new version of the resource (spec: the TTL is
			// updated by re-sending the resource with it), so every client,
			// including later ones, gets it.
			resources = append(resources, r.withTTL(hb.TTL))
		default:
			if u.Kind == UpdateFull {
				resources = append(resources, r) // still there, unchanged
			}
			beats = append(beats, hb)
		}
	}
	// A heartbeat's resource may repeat one of the update's names.
	distinct := u.Distinct && len(resources) == kept
	changed, gone := t.apply(resources, u.Kind == UpdateFull, distinct)
	for _, n := range u.Removed {
		if r, ok := t.resources.get(n); ok {
			gone = append(gone, r)
		}
		changed = append(changed, t.drop(n)...)
		if u.Kind == UpdateIncremental && t.pending.told(n) {
			// An incremental upstream said it is gone: known absent now.
			changed = append(changed, n)
		}
	}
	c.orphanChildren(t, gone) // the control plane removed them: their children's shadows go
	var shards map[*Shard]struct{}
	if u.Kind.answers() {
		c.markReceived(typeURL) // before any watcher is told of it
		changed = append(changed, t.confirm(resources, beats)...)
		changed = append(changed, t.pending.answerCame()...)
		if t.up.answer(u.Kind, u.Version) {
			// The first answer, or the re-asked wildcard's: every shard.
			shards = map[*Shard]struct{}{}
			for _, list := range t.shards {
				for _, s := range list {
					shards[s] = struct{}{}
				}
			}
		}
	}
	if shards == nil && len(changed) > 0 {
		shards = t.affected(changed)
	}
	ctx := u.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	c.rebuildLocked(ctx, t, shards, start, ts)
	c.heartbeatLocked(t, beats, ts)
}

// heartbeatLocked collects, for the watchers of each shard holding some of
// the refreshed resources, a heartbeat at the shard's current version
// (mu held).
func (c *Class) heartbeatLocked(t *table, hbs []HeartbeatEntry, ts *tells) {
	if len(hbs) == 0 {
		return
	}
	names := make([]string, len(hbs))
	ttls := make(map[string][]byte, len(hbs))
	for i, hb := range hbs {
		names[i] = hb.Name
		ttls[hb.Name] = hb.TTL
	}
	for s := range t.affected(names) {
		cur := s.current.Load()
		if cur == nil {
			continue
		}
		h := &Heartbeat{Response: cur}
		for _, n := range names {
			if r, ok := cur.Lookup(n); ok {
				h.Resources = append(h.Resources, r)
				h.TTLs = append(h.TTLs, ttls[n])
			}
		}
		if len(h.Resources) == 0 {
			continue
		}
		ts.add(s, nil, h)
	}
}

// rebuildLocked rebuilds shards and collects, for the watchers of those
// whose response changed, the new response (mu held).
func (c *Class) rebuildLocked(ctx context.Context, t *table, shards map[*Shard]struct{}, start time.Time, ts *tells) {
	for s := range shards {
		if t.rebuild(s) {
			cur := s.current.Load()
			if c.onFanout != nil && len(s.watchers) > 0 {
				f := &fanout{ctx: ctx, start: start, done: c.onFanout}
				f.pending.Store(int64(len(s.watchers)))
				cur.fanout.Store(f)
			}
			ts.add(s, cur, nil)
		}
	}
}

// expirePending serves shards whose pending names' grace has passed.
func (c *Class) expirePending(typeURL string) {
	var ts tells
	c.mu.Lock()
	if t := c.tables[typeURL]; t != nil {
		t.graceTimer = nil
		if names := t.pending.expire(time.Now()); len(names) > 0 {
			// An upstream silent for the whole grace has answered
			// "nothing": also when it never answered this type at all.
			t.up.silentThroughGrace(t.fullState)
			c.rebuildLocked(context.Background(), t, t.affected(names), time.Now(), &ts)
		}
		c.armGraceLocked(t, t.pending.nextDeadline()) // for the names still waiting
	}
	c.takeTurnLocked(&ts)
	c.mu.Unlock()
	ts.tellOutside()
}

func (c *Class) shardCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.tables {
		n += len(t.shards)
	}
	return n
}

// LingeringShards is how many of the class's shards linger (Leave).
func (c *Class) LingeringShards() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lingering.queue.Len()
}

// TableStatus describes one type URL's table in a class (what the upstream
// sent and the shards selecting from it), for the admin endpoints.
type TableStatus struct {
	TypeURL   string        `json:"type_url"`
	Received  bool          `json:"received"`
	Resources int           `json:"resources"`
	Pending   int           `json:"pending,omitempty"` // names waiting for the upstream's answer
	Interest  Subscription  `json:"interest"`
	Shards    []ShardStatus `json:"shards"`
}

// ShardStatus describes one shard, for the admin endpoints.
type ShardStatus struct {
	Key       string   `json:"key"`
	Wildcard  bool     `json:"wildcard"`
	Names     []string `json:"names,omitempty"`
	Version   string   `json:"version,omitempty"`
	Resources int      `json:"resources"`
	Bytes     int      `json:"bytes"`
	Streams   int      `json:"streams"`
	// Lingering: left by its last stream's end, kept for the class's
	// linger (see Class.Leave).
	Lingering bool `json:"lingering,omitempty"`
}

// Status returns a consistent view of the class's tables and shards.
func (c *Class) Status() []TableStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]TableStatus, 0, len(c.tables))
	for _, typeURL := range slices.Sorted(maps.Keys(c.tables)) {
		t := c.tables[typeURL]
		ts := TableStatus{TypeURL: typeURL, Received: t.up.hasAnswered(), Resources: t.resources.len(), Pending: len(t.pending), Interest: t.interest(), Shards: []ShardStatus{}}
		for _, list := range t.shards {
			for _, s := range list {
				ss := ShardStatus{Key: keyString(s.Key), Wildcard: s.Sub.Wildcard, Names: s.Sub.Names, Streams: len(s.watchers),
					Lingering: s.lingering != nil}
				if r := s.Current(); r != nil {
					ss.Version, ss.Resources, ss.Bytes = r.Version, len(r.Names), r.BodyLen
				}
				ts.Shards = append(ts.Shards, ss)
			}
		}
		slices.SortFunc(ts.Shards, func(a, b ShardStatus) int {
			if a.Key < b.Key {
				return -1
			} else if a.Key > b.Key {
				return 1
			}
			return 0
		})
		out = append(out, ts)
	}
	return out
}
