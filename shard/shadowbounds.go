package shard

import (
	"time"

	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// A shadow never outlives what justifies it (issue 23, X6). A shadow is
// the content a SotW upstream may believe the class holds (shadow.go);
// three things end that belief, or show it wrong, and each ends the shadow:
//
//   - The parent goes. A full-state CDS (LDS) answer without a Cluster
//     (Listener), or a delta upstream's removal of it, says the control
//     plane dropped it; the ClusterLoadAssignment (RouteConfiguration) it
//     named is not served again from a shadow: its shadow is forgotten,
//     and, while still held, the name is marked orphaned, so that its drop
//     makes no shadow either. A recreated Cluster then gets its endpoints
//     from the control plane, not the deleted ones (grpc-go routed every
//     RPC to an endpoint the control plane no longer had). The mark goes
//     when the upstream sends the name again, or ShadowHold after its drop.
//   - Time. A resource restored from a shadow is held only on the shadow's
//     word; the request that asked for it again claims no version
//     (AwaitsNames), which go-control-plane answers with every name asked
//     that exists. Unless the upstream sends it within ShadowHold, it is
//     dropped again (its shards rebuilt without it).
//   - A new upstream stream. Its first request of a type claims no version,
//     and the upstream's first answer on it tells the state of every name
//     asked, as a Listener or Cluster answer does (the relay relies on that
//     for them: AwaitsNames): a held resource of another type that the
//     answer lacks though it was asked (by name or the wildcard) is one the
//     control plane no longer has, and is dropped. So a periodic resync
//     (upstream.resync_interval) clears what the control plane deleted
//     while no SotW answer could say so. Clients already holding it keep
//     it, as SotW says nothing of a deletion of these types; new shards
//     are served without it.

// orphan reports whether name's parent was removed (see orphanChildren),
// so that its drop at now makes no shadow; the mark then lasts ShadowHold
// (an answer sent before the drop may still carry it).
func (t *table) orphan(name string, now time.Time) bool {
	at, ok := t.orphaned[name]
	if ok && at.IsZero() {
		t.orphaned[name] = now
	}
	return ok
}

// orphanChildren records that the control plane removed the parents gone
// of c's table pt (mu held): the children none of pt's held resources
// still names lose their shadow, and those held are marked orphaned.
func (c *Class) orphanChildren(pt *table, gone []*Resource) {
	ct := c.tables[xdstype.ChildType(pt.typeURL)]
	if ct == nil || len(gone) == 0 || !ct.shadows() && len(ct.shadowed) == 0 {
		return
	}
	var candidates []string
	for _, p := range gone {
		for _, ch := range p.Children() {
			_, shadowed := ct.shadowed[ch]
			_, held := ct.resources.get(ch)
			if shadowed || held && ct.shadows() {
				candidates = append(candidates, ch)
			}
		}
	}
	if len(candidates) == 0 {
		return
	}
	named := map[string]struct{}{} // children of the parents still held
	for r := range pt.resources.all {
		for _, ch := range r.Children() {
			named[ch] = struct{}{}
		}
	}
	for _, ch := range candidates {
		if _, ok := named[ch]; ok {
			continue
		}
		delete(ct.shadowed, ch)
		if _, held := ct.resources.get(ch); held && len(ct.orphaned) < shadowLimit {
			if ct.orphaned == nil {
				ct.orphaned = map[string]time.Time{}
			}
			ct.orphaned[ch] = time.Time{}
		}
	}
}

// expireOrphans forgets the orphan marks of names dropped ShadowHold ago.
func (t *table) expireOrphans(now time.Time) {
	for n, at := range t.orphaned {
		if !at.IsZero() && now.Sub(at) >= ShadowHold {
			delete(t.orphaned, n)
		}
	}
}

// markRestored records that name was held again from its shadow at now.
func (t *table) markRestored(name string, now time.Time) {
	if t.restored == nil {
		t.restored = map[string]time.Time{}
	}
	t.restored[name] = now
}

// expireRestored drops what was restored from a shadow ShadowHold ago and
// not sent by the upstream since; it returns the names shards may know
// the dropped ones by.
func (t *table) expireRestored(now time.Time) (gone []string) {
	for n, at := range t.restored {
		if now.Sub(at) < ShadowHold {
			continue
		}
		delete(t.restored, n)
		gone = append(gone, t.drop(n)...)
	}
	if len(gone) > 0 {
		t.resources.settle()
	}
	return gone
}

// awaitsRestored reports whether t holds a resource on a shadow's word
// alone: the upstream is to be asked in a way that makes it send it.
func (t *table) awaitsRestored() bool { return len(t.restored) > 0 }

// confirm records what an upstream answer (not heartbeats only) told: the
// names it carried, as resources or heartbeats, are the control plane's
// again, no longer orphaned nor held on a shadow's word. The first answer
// on a new stream (resyncing) also drops what was asked and is not in it.
// It returns the names shards may know the dropped ones by.
func (t *table) confirm(resources []*Resource, beats []HeartbeatEntry) (gone []string) {
	if len(t.orphaned) > 0 || len(t.restored) > 0 {
		for _, r := range resources {
			delete(t.orphaned, r.Name)
			delete(t.restored, r.Name)
		}
		for _, hb := range beats {
			delete(t.orphaned, hb.Name)
			delete(t.restored, hb.Name)
		}
	}
	if !t.resyncing {
		return nil
	}
	t.resyncing = false
	if t.fullState || t.up.incremental || !t.up.reported {
		return nil
	}
	sent := make(map[string]struct{}, len(resources)+len(beats))
	for _, r := range resources {
		sent[r.Name] = struct{}{}
	}
	for _, hb := range beats {
		sent[hb.Name] = struct{}{}
	}
	var absent []string
	for r := range t.resources.all {
		if _, ok := sent[r.Name]; !ok && t.up.askedFor(r) {
			absent = append(absent, r.Name)
		}
	}
	for _, n := range absent {
		delete(t.restored, n)
		delete(t.orphaned, n)
		gone = append(gone, t.drop(n)...)
	}
	if len(gone) > 0 {
		t.resources.settle()
	}
	return gone
}
