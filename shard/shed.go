package shard

import "time"

// Shedding: under memory pressure the relay gives up first what no client
// uses, oldest first (package overload decides when). What lingers is of
// two kinds: idle classes (no stream or poll holds a lease; kept for
// Lifecycle.Linger, or for good without one) and the lingering shards of
// ended streams (Class.Leave). Each kind is in age order already (a
// class's lingering queue; the classes' idleSince), so shedding everything
// that began to linger before a cutoff takes the oldest first without
// sorting anything.

// ShedCounts is what ShedLingering dropped.
type ShedCounts struct {
	Classes int // idle classes dropped whole (with their shards)
	Shards  int // lingering shards of classes in use removed
}

// OldestLingering returns when the longest-lingering idle class or shard
// began to linger; the zero time when nothing lingers.
func (r *Registry) OldestLingering() time.Time {
	var oldest time.Time
	older := func(t time.Time) {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.classes {
		if c.leases == 0 {
			older(c.idleSince)
			continue // its shards go with it
		}
		c.mu.Lock()
		if e := c.lingering.queue.Front(); e != nil {
			older(c.leftAt(e.Value.(*lingerEntry)))
		}
		c.mu.Unlock()
	}
	return oldest
}

// ShedLingering drops, at once, every idle class idle since before cutoff
// and every lingering shard left before it: their upstream interest
// narrows (a dropped class's upstream stream is closed) and a client coming
// back starts afresh, as after their linger. Lingers ended so count as
// evicted (shards) and dropped (a dropped class's shards). It returns what
// it dropped. Dropping a class waits for its source to stop (Lifecycle.
// Drop), with no lock held.
func (r *Registry) ShedLingering(cutoff time.Time) ShedCounts {
	var n ShedCounts
	var dropped []*Class
	r.mu.Lock()
	for _, c := range r.classes {
		if c.leases == 0 && c.idleSince.Before(cutoff) && !r.closed {
			dropped = append(dropped, c)
			continue
		}
		c.mu.Lock()
		for e := c.lingering.queue.Front(); e != nil; e = c.lingering.queue.Front() {
			le := e.Value.(*lingerEntry)
			if !c.leftAt(le).Before(cutoff) {
				break
			}
			c.evictLocked(le.s)
			n.Shards++
		}
		c.mu.Unlock()
	}
	for _, c := range dropped {
		r.removeLocked(c)
		r.drops.Add(1)
	}
	r.mu.Unlock()
	for _, c := range dropped {
		r.drop(c)
	}
	n.Classes = len(dropped)
	return n
}

// leftAt is when the lingering shard of e was left (Class.mu held): every
// shard of the class lingers for the same shardLinger.
func (c *Class) leftAt(e *lingerEntry) time.Time { return e.until.Add(-c.shardLinger) }

// HasShard reports whether the class holds a shard for (typeURL, sub): a
// subscription to it joins that shard and adds nothing to what the class
// holds.
func (c *Class) HasShard(typeURL string, sub Subscription) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tables[typeURL]
	return t != nil && t.lookup(KeyOf(c.Name, typeURL, sub), sub) != nil
}

// Lookup returns the class named name, or nil when the registry holds
// none (it creates nothing).
func (r *Registry) Lookup(name string) *Class {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.classes[name]
}
