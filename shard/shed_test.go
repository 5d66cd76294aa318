package shard

import (
	"testing"
	"testing/synctest"
	"time"
)

// Shedding takes what lingers oldest first: a cutoff drops the idle classes
// and the lingering shards that began to linger before it, and nothing in
// use; OldestLingering says where the oldest starts.
func TestShedLingeringOldestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, dropped, _ := lifecycleRegistry(t, Lifecycle{Linger: time.Hour})
		acquire := func(cluster string) *Class {
			c, err := r.Acquire(node(cluster))
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		a, b, c := acquire("a"), acquire("b"), acquire("c")
		live, gone := &recorder{}, &recorder{}
		kept := a.Subscribe(edsType, NewSubscription([]string{"live"}, false), live)
		oldShard := a.Subscribe(edsType, NewSubscription([]string{"old"}, false), gone)
		b.Subscribe(edsType, NewSubscription([]string{"b"}, false), gone)
		young := c.Subscribe(edsType, NewSubscription([]string{"young"}, false), gone)

		if got := r.OldestLingering(); !got.IsZero() {
			t.Fatalf("OldestLingering = %v with nothing lingering, want zero", got)
		}
		t0 := time.Now()
		a.Leave(oldShard, gone) // a is in use: its shard lingers alone
		time.Sleep(time.Minute) // the bubble's fake clock
		t1 := time.Now()
		r.Release(b) // b idle: the whole class lingers
		time.Sleep(time.Minute)
		c.Leave(young, gone)

		if got := r.OldestLingering(); !got.Equal(t0) {
			t.Fatalf("OldestLingering = %v, want %v (a's shard)", got, t0)
		}
		if n := r.ShedLingering(t0.Add(time.Second)); n != (ShedCounts{Shards: 1}) {
			t.Fatalf("shed %+v before t0+1s, want a's old shard only", n)
		}
		if shardsOf(a, edsType)[0] != kept || len(shardsOf(a, edsType)) != 1 {
			t.Fatalf("a's shards after the shed: %v, want only the live one", shardsOf(a, edsType))
		}
		if got := r.OldestLingering(); !got.Equal(t1) {
			t.Fatalf("OldestLingering = %v, want %v (class b)", got, t1)
		}
		if n := r.ShedLingering(time.Now().Add(time.Nanosecond)); n != (ShedCounts{Classes: 1, Shards: 1}) {
			t.Fatalf("shed %+v of everything, want class b and c's shard", n)
		}
		if got := <-dropped; got != b {
			t.Fatalf("dropped %s, want b", got.Name)
		}
		if n := len(r.Classes()); n != 2 {
			t.Fatalf("%d classes left, want a and c", n)
		}
		if got := r.OldestLingering(); !got.IsZero() {
			t.Fatalf("OldestLingering = %v after shedding all, want zero", got)
		}
		if st := r.Lingers(); st.Lingering != 0 || st.Ended[LingerEvicted] != 2 {
			t.Fatalf("lingers %+v, want none left and 2 evicted", st)
		}
		if !a.HasShard(edsType, NewSubscription([]string{"live"}, false)) || a.HasShard(edsType, NewSubscription([]string{"old"}, false)) {
			t.Fatal("HasShard: want the live shard held and the shed one gone")
		}
		r.Release(a)
		r.Release(c)
	})
}
