package shard

// A class tells its watchers outside its lock. An update rebuilds its
// shards under Class.mu and collects what their watchers are owed (a
// tells: each shard's new response or heartbeat, and the watchers it had
// then); it releases the lock, then tells them. A client subscribing,
// unsubscribing or ending meanwhile waits for the rebuild only, not for a
// fan-out to every stream of a shard (issue 14: 10,000 streams).
//
// The class's updates are told one at a time, in the order they took the
// lock: each collected tells takes a turn under the lock (after the
// previous one's) and waits for it before telling. So a watcher is told
// of a shard's responses in the order they were built, and of the class's
// types in the order the upstream changed them, as when the class told
// them under its lock. Two things a watcher sees now that it did not: a
// response that is no longer the shard's current one (a later update
// rebuilt the shard before this one was told; its tell follows), and a
// tell after it left the shard (Unsubscribe and Leave do not wait for a
// telling in progress). The Watcher contract says what to do with both.

// tell is what one shard's watchers are owed by one update.
type tell struct {
	s        *Shard
	resp     *Response  // a new response; nil for a heartbeat
	hb       *Heartbeat // a TTL heartbeat; nil for a new response
	watchers []Watcher  // the shard's watchers when it was collected
}

// tells is what one update owes the watchers of its class, collected under
// Class.mu and told after it is released (tellOutside).
type tells struct {
	list []tell
	// Set by takeTurnLocked: the previous tells' done (nil: none to wait
	// for), and this one's, closed once it is told.
	prev, done chan struct{}
}

// add collects a new response (or heartbeat) of s for its current watchers
// (Class.mu held).
func (ts *tells) add(s *Shard, resp *Response, hb *Heartbeat) {
	if len(s.watchers) == 0 {
		return
	}
	ts.list = append(ts.list, tell{s: s, resp: resp, hb: hb, watchers: s.watcherList()})
}

// takeTurnLocked places ts after every tells collected before it (Class.mu
// held). A tells with nothing to tell takes no turn.
func (c *Class) takeTurnLocked(ts *tells) {
	if len(ts.list) == 0 {
		return
	}
	ts.prev, ts.done = c.toldTail, make(chan struct{})
	c.toldTail = ts.done
}

// tellOutside waits for the previous tells of the class to be told, then
// tells ts (Class.mu not held). A watcher that panics still ends the turn.
func (ts *tells) tellOutside() {
	if ts.done == nil {
		return
	}
	defer close(ts.done)
	if ts.prev != nil {
		<-ts.prev
	}
	for _, t := range ts.list {
		for _, w := range t.watchers {
			if t.hb != nil {
				w.ShardHeartbeat(t.s, t.hb)
			} else {
				w.ShardChanged(t.s, t.resp)
			}
		}
	}
}

// watcherList returns the shard's watchers as a slice shared read-only by
// the tells collected until they change (Class.mu held), so that an update
// of an unchanged set of watchers copies nothing.
func (s *Shard) watcherList() []Watcher {
	if s.told == nil {
		s.told = make([]Watcher, 0, len(s.watchers))
		for w := range s.watchers {
			s.told = append(s.told, w)
		}
	}
	return s.told
}
