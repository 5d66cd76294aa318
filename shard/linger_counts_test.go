package shard

import (
	"testing"
	"testing/synctest"
	"time"
)

// wantLingers checks r's lingering shards and ended lingers by outcome
// (reused, expired, evicted, dropped).
func wantLingers(t *testing.T, r *Registry, lingering int, ended ...int64) {
	t.Helper()
	got := r.Lingers()
	want := LingerStats{Lingering: lingering, Ended: [numLingerOutcomes]int64(ended)}
	if got != want {
		t.Fatalf("lingers %+v, want %+v (ended: reused, expired, evicted, dropped)", got, want)
	}
}

// Every linger is counted once, by how it ended: a stream subscribing the
// shard again, the linger passing (also in an idle class, which keeps the
// shard), the bound evicting it, its class dropped with it. A shard left
// while another stream watches it does not linger, nor does a shard of a
// registry without a linger.
func TestLingersCountedByOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const linger = time.Minute
		r, c, dropped, _ := lingerClass(t, linger, Limits{})
		sub := func(n string) Subscription { return NewSubscription([]string{n}, false) }
		w, keeper := &recorder{}, &recorder{}

		a := c.Subscribe(edsType, sub("a"), w)
		c.Subscribe(edsType, sub("a"), keeper)
		c.Leave(a, w) // keeper still watches it
		wantLingers(t, r, 0, 0, 0, 0, 0)
		c.Leave(a, keeper)
		wantLingers(t, r, 1, 0, 0, 0, 0)

		if again := c.Subscribe(edsType, sub("a"), w); again != a {
			t.Fatal("a stream coming back got a new shard")
		}
		wantLingers(t, r, 0, 1, 0, 0, 0)
		c.Leave(a, w)
		time.Sleep(linger)
		synctest.Wait()
		wantLingers(t, r, 0, 1, 1, 0, 0)

		c.mu.Lock()
		c.lingering.max = 1
		c.mu.Unlock()
		b := c.Subscribe(edsType, sub("b"), w)
		c.Leave(b, w)
		d := c.Subscribe(edsType, sub("d"), w)
		c.Leave(d, w) // evicts b
		wantLingers(t, r, 1, 1, 1, 1, 0)

		// The class goes idle (at linger/4): d's linger passes (at
		// linger; the class keeps it), then e, left after the class went
		// idle (a REST poll releases its lease first), is dropped with
		// the class (at 5/4 linger).
		c.mu.Lock()
		c.lingering.max = MaxLingeringShards
		c.mu.Unlock()
		time.Sleep(linger / 4)
		r.Release(c)
		time.Sleep(linger / 4)
		e := c.Subscribe(edsType, sub("e"), w)
		c.Leave(e, w)
		time.Sleep(linger/2 + linger/8)
		synctest.Wait()
		wantLingers(t, r, 1, 1, 2, 1, 0)
		if got := len(shardsOf(c, edsType)); got != 2 {
			t.Fatalf("the idle class holds %d shards, want d (its linger passed) and e", got)
		}
		time.Sleep(linger / 8)
		synctest.Wait()
		if len(dropped) != 1 {
			t.Fatal("the idle class was not dropped after its linger")
		}
		wantLingers(t, r, 0, 1, 2, 1, 1)
	})

	r, _, _ := lifecycleRegistry(t, Lifecycle{})
	c, err := r.Acquire(node("x"))
	if err != nil {
		t.Fatal(err)
	}
	w := &recorder{}
	c.Leave(c.Subscribe(edsType, NewSubscription([]string{"a"}, false), w), w)
	wantLingers(t, r, 0, 0, 0, 0, 0)
}
