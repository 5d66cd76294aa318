package shard

import (
	"testing"
	"time"
)

// A dropped class's table timers are stopped: neither the pending names'
// grace nor the shadow sweep keeps the class reachable after free. A
// table arms at most one grace timer, at the earliest deadline.
func TestFreedClassStopsItsTimers(t *testing.T) {
	c, _ := newTestClass(t)
	w := &recorder{}
	c.Subscribe(ClusterType, NewSubscription([]string{"x"}, false), w)
	c.Requested(ClusterType, c.Interest(ClusterType), false) // x pending: a grace deadline
	c.Subscribe(ClusterType, NewSubscription([]string{"y"}, false), w)
	c.Requested(ClusterType, c.Interest(ClusterType), false) // y: a later deadline, same timer
	c.mu.Lock()
	tb := c.tables[ClusterType]
	grace, at := tb.graceTimer, tb.graceAt
	c.sweepShadowLater(tb) // nothing shadowed: no sweep
	noSweep := tb.sweepTimer == nil
	tb.shadowed = map[string]shadowedResource{"r": {r: res("r", "1"), since: time.Now()}}
	c.sweepShadowLater(tb)
	sweep := tb.sweepTimer
	c.mu.Unlock()
	if grace == nil || sweep == nil || !noSweep {
		t.Fatalf("timers armed: grace %v, sweep %v (a sweep with nothing shadowed: %v)", grace != nil, sweep != nil, !noSweep)
	}
	if d := time.Until(at); d > PendingGrace || d <= 0 {
		t.Fatalf("grace timer at %v from now, want the first deadline, within PendingGrace", d)
	}
	c.free()
	if grace.Stop() || sweep.Stop() {
		t.Fatal("a timer of the freed class was still pending")
	}
}
