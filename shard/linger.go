package shard

import (
	"container/list"
	"sync/atomic"
	"time"
)

// Shards of ended streams linger. A stream that ends does not unsubscribe
// its shards at once (Leave): a shard whose last stream ended stays in its
// table, with its names in the class's upstream interest, for the class's
// linger (Lifecycle.Linger). A client reconnecting meanwhile joins the same
// shard, kept current all along, so nothing is unsubscribed upstream and
// subscribed again, and a deletion made in between reaches the shard: a
// delta upstream never says that a name subscribed again does not exist,
// so a client re-subscribing it with initial_resource_versions would
// otherwise keep the deleted resource (issue 11).
//
// A lingering shard has no watchers: nothing calls into the stream that
// left it, but for a telling collected before it left (see tell.go). It gives way to live subscriptions that the class's Limits would
// otherwise refuse (admitEvicting), oldest first.

// MaxLingeringShards bounds the shards lingering in one class: one more
// evicts the oldest. Streams sharing a subscription share its shard, so a
// rolling restart lingers a shard per distinct subscription, not per
// client; the bound is for clients that end streams with ever new ones.
const MaxLingeringShards = 4096

// shardLinger is a class's queue of lingering shards. Every shard lingers
// for the same duration, so the queue, oldest first, is in expiry order;
// each shard is in it at most once (Shard.lingering), and it holds at most
// max. One timer per class is armed while the queue is not empty: its
// goroutine (time.AfterFunc) only takes the class lock, removes the shards
// whose linger passed and re-arms itself for the next. It is stopped when
// the class is freed or its registry closed (stop).
type shardLinger struct {
	// Read-only after creation.
	max    int           // MaxLingeringShards, or less in tests
	counts *lingerCounts // the registry's (shared by its classes), or the class's own

	// Guarded by Class.mu.
	queue   list.List   // of *lingerEntry, oldest first
	timer   *time.Timer // armed for the front's expiry; nil when none is
	stopped bool        // no more timers: the class was freed or its registry closed
}

type lingerEntry struct {
	s     *Shard
	until time.Time
}

// LingerOutcome is how a shard's linger ended.
type LingerOutcome int

const (
	// LingerReused: a stream (or REST poll) subscribed to it again.
	LingerReused LingerOutcome = iota
	// LingerExpired: its linger passed (in a class still in use it is
	// removed; an idle class keeps it until the class is dropped).
	LingerExpired
	// LingerEvicted: MaxLingeringShards newer ones, or a live shard the
	// class limits would refuse because of it, evicted it.
	LingerEvicted
	// LingerDropped: its class was dropped whole.
	LingerDropped
	numLingerOutcomes
)

var lingerOutcomeNames = [numLingerOutcomes]string{"reused", "expired", "evicted", "dropped"}

// LingerOutcomes lists every outcome, in order.
var LingerOutcomes = []LingerOutcome{LingerReused, LingerExpired, LingerEvicted, LingerDropped}

func (o LingerOutcome) String() string { return lingerOutcomeNames[o] }

// lingerCounts counts the lingers that ended, by outcome: the registry's
// are shared by its classes and outlive them. Atomic.
type lingerCounts [numLingerOutcomes]atomic.Int64

// LingerStats is how many shards linger now and how many lingers ended,
// by outcome (a shard that lingers again later counts again).
type LingerStats struct {
	Lingering int
	Ended     [numLingerOutcomes]int64 // by LingerOutcome
}

// take removes s from the queue (Class.mu held), counting its linger as
// ended by o if it lingered; the timer stays armed, and finds nothing or
// re-arms when it fires.
func (q *shardLinger) take(s *Shard, o LingerOutcome) {
	if s.lingering != nil {
		q.queue.Remove(s.lingering)
		s.lingering = nil
		q.counts[o].Add(1)
	}
}

// stop stops the timer for good and forgets the queue (Class.mu held):
// the lingering shards stay as they are. dropped: the class is dropped,
// which ends their lingers (counted); else the registry is closing.
func (q *shardLinger) stop(dropped bool) {
	q.stopped = true
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	if dropped {
		q.counts[LingerDropped].Add(int64(q.queue.Len()))
	}
	for e := q.queue.Front(); e != nil; e = e.Next() {
		e.Value.(*lingerEntry).s.lingering = nil
	}
	q.queue.Init()
}

// Leave removes w from s as its stream ended. A shard left by its last
// watcher lingers for the class's linger, keeping its names in the
// upstream interest, unless a stream subscribes to it again meanwhile or
// MaxLingeringShards newer ones evict it;
// without a linger (or once the registry is closed) it goes at once, as
// with Unsubscribe. A stream changing its subscription uses Unsubscribe.
func (c *Class) Leave(s *Shard, w Watcher) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(s.watchers, w)
	s.told = nil
	if len(s.watchers) > 0 || s.lingering != nil {
		return
	}
	if c.shardLinger <= 0 || c.lingering.stopped {
		c.removeShardLocked(s)
		return
	}
	if c.lingering.queue.Len() >= c.lingering.max {
		c.evictLocked(c.lingering.queue.Front().Value.(*lingerEntry).s)
	}
	until := time.Now().Add(c.shardLinger)
	s.lingering = c.lingering.queue.PushBack(&lingerEntry{s: s, until: until})
	if c.lingering.timer == nil {
		c.lingering.timer = time.AfterFunc(c.shardLinger, c.lingerExpired)
	}
}

// lingerExpired runs on the class's linger timer: it removes the shards
// whose linger passed, narrowing the upstream interest, and re-arms the
// timer for the next. An idle class (no stream at all) keeps them until its
// own linger ends, which drops the class whole (Registry).
func (c *Class) lingerExpired() {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := &c.lingering
	q.timer = nil
	if q.stopped {
		return
	}
	now := time.Now()
	for e := q.queue.Front(); e != nil; e = q.queue.Front() {
		le := e.Value.(*lingerEntry)
		if le.until.After(now) {
			q.timer = time.AfterFunc(le.until.Sub(now), c.lingerExpired)
			return
		}
		q.take(le.s, LingerExpired)
		if !c.idle {
			c.removeShardLocked(le.s)
		}
	}
}

// evictLocked removes the lingering shard s at once (mu held).
func (c *Class) evictLocked(s *Shard) {
	c.lingering.take(s, LingerEvicted)
	c.removeShardLocked(s)
}

// admitEvicting is admit, except that lingering shards give way: a new
// shard that the class's limits refuse only because of shards no stream
// watches evicts them, oldest first, as many as it takes. A shard refused
// even without them evicts nothing (mu held).
func (c *Class) admitEvicting(typeURL string, sub Subscription) *LimitError {
	err := c.admit(c.tables[typeURL], typeURL, sub, false)
	if err == nil || c.lingering.queue.Len() == 0 || c.admit(c.tables[typeURL], typeURL, sub, true) != nil {
		return err
	}
	for err != nil {
		limit := err.Limit
		victims := c.lingerVictims(typeURL, limit)
		if len(victims) == 0 {
			return err // not reached: without lingering shards it was admitted
		}
		for _, s := range victims {
			c.evictLocked(s)
			if err = c.admit(c.tables[typeURL], typeURL, sub, false); err == nil || err.Limit != limit {
				break
			}
		}
	}
	return nil
}

// lingerVictims returns, oldest first, the lingering shards whose eviction
// can lift limit for a new shard of typeURL (mu held): for the type limit,
// those of other types that only lingering shards subscribe to; for the
// others, those of typeURL.
func (c *Class) lingerVictims(typeURL, limit string) []*Shard {
	var out []*Shard
	for e := c.lingering.queue.Front(); e != nil; e = e.Next() {
		s := e.Value.(*lingerEntry).s
		switch {
		case limit != LimitTypes && s.TypeURL == typeURL:
		case limit == LimitTypes && s.TypeURL != typeURL && !c.tables[s.TypeURL].hasShards(true):
		default:
			continue
		}
		out = append(out, s)
	}
	return out
}

// hasShards reports whether shards subscribe to t; liveOnly: shards that
// do not linger (mu held).
func (t *table) hasShards(liveOnly bool) bool {
	if !liveOnly {
		return len(t.shards) > 0
	}
	for _, list := range t.shards {
		for _, s := range list {
			if s.lingering == nil {
				return true
			}
		}
	}
	return false
}

// unionSize is t's union interest as admit counts it.
type unionSize struct {
	names, payload int
	wildcard       bool
	has            func(name string) bool
}

// union returns the size of t's union interest (nil t: empty); liveOnly:
// of the shards that do not linger (mu held).
func (t *table) union(liveOnly bool) unionSize {
	if t == nil {
		return unionSize{has: func(string) bool { return false }}
	}
	if !liveOnly {
		return unionSize{names: len(t.byName), payload: t.namePayload, wildcard: len(t.wildcards) > 0,
			has: func(n string) bool { _, ok := t.byName[n]; return ok }}
	}
	live := map[string]struct{}{}
	u := unionSize{has: func(n string) bool { _, ok := live[n]; return ok }}
	for _, list := range t.shards {
		for _, s := range list {
			if s.lingering != nil {
				continue
			}
			u.wildcard = u.wildcard || s.Sub.Wildcard
			for _, n := range s.Sub.Names {
				if _, ok := live[n]; !ok {
					live[n] = struct{}{}
					u.names++
					u.payload += nameBytes(n)
				}
			}
		}
	}
	return u
}
