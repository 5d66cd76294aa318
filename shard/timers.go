package shard

import "time"

// A table's timers: the pending names' grace and the shadow sweep. Each
// table has at most one of each, owned by the table (guarded by Class.mu)
// and stopped when the table or its class is freed, so a dropped class is
// not kept alive by a timer. A timer's goroutine only takes the class lock
// and returns.

// armGraceLocked makes the table's grace timer fire at deadline, unless
// one fires earlier (it re-arms for the rest: expirePending), the deadline
// is zero or the class was freed. c.mu held.
func (c *Class) armGraceLocked(t *table, deadline time.Time) {
	if deadline.IsZero() || c.freed || c.tables[t.typeURL] != t {
		return
	}
	if t.graceTimer != nil {
		if !t.graceAt.After(deadline) {
			return
		}
		t.graceTimer.Stop()
	}
	typeURL := t.typeURL
	t.graceAt = deadline
	t.graceTimer = time.AfterFunc(time.Until(deadline)+time.Millisecond, func() { c.expirePending(typeURL) })
}

// stopTimers stops the table's timers: it is freed. Class.mu held.
func (t *table) stopTimers() {
	if t.graceTimer != nil {
		t.graceTimer.Stop()
		t.graceTimer = nil
	}
	if t.sweepTimer != nil {
		t.sweepTimer.Stop()
		t.sweepTimer = nil
	}
}
