package shard

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/proto"
)

// lingerClass is a leased class of a registry lingering linger, within
// limits l; the returned func reads the type URLs its upstream hook was told
// of since the last read.
func lingerClass(t *testing.T, linger time.Duration, l Limits) (*Registry, *Class, chan *Class, func() []string) {
	t.Helper()
	r, dropped, interest := lifecycleRegistry(t, Lifecycle{Linger: linger})
	r.SetClassLimits(l)
	c, err := r.Acquire(node("a"))
	if err != nil {
		t.Fatal(err)
	}
	changes := func() []string {
		v, _ := interest.Load("a")
		p := v.(*[]string)
		c.mu.Lock()
		defer c.mu.Unlock()
		got := *p
		*p = nil
		return got
	}
	changes()
	return r, c, dropped, changes
}

func shardsOf(c *Class, typeURL string) []*Shard {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Shard
	if t := c.tables[typeURL]; t != nil {
		for _, list := range t.shards {
			out = append(out, list...)
		}
	}
	return out
}

// A stream that ends leaves its shard lingering while the class is in use:
// its names stay in the upstream interest, nothing is told to the stream
// that left, a stream subscribing the same names gets the same shard, kept
// current, and once the linger passes unwatched the shard goes and the
// interest narrows.
func TestEndedStreamShardLingers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const linger = time.Minute
		_, c, _, changes := lingerClass(t, linger, Limits{})
		keeper, gone := &recorder{}, &recorder{}
		c.Subscribe(edsType, NewSubscription([]string{"k"}, false), keeper)
		left := c.Subscribe(edsType, NewSubscription([]string{"k", "x"}, false), gone)
		c.Apply(edsType, []*Resource{res("k", "1"), res("x", "1")}, false)
		changes()
		gone.take()

		c.Leave(left, gone)
		if got := changes(); len(got) != 0 {
			t.Fatalf("interest changed %v when the stream ended, want it kept while the shard lingers", got)
		}
		if got := c.Interest(edsType); !slices.Equal(got.Names, []string{"k", "x"}) {
			t.Fatalf("interest %v, want [k x]", got.Names)
		}
		c.ApplyUpdate(edsType, Update{Kind: UpdateIncremental, Removed: []string{"x"}})
		if got := gone.take(); len(got) != 0 {
			t.Fatalf("the ended stream was told of %d shard changes", len(got))
		}

		back := &recorder{}
		again := c.Subscribe(edsType, NewSubscription([]string{"x", "k"}, false), back)
		if again != left {
			t.Fatal("a stream coming back got a new shard, want the lingering one")
		}
		if cur := again.Current(); !slices.Equal(cur.Names, []string{"k"}) {
			t.Fatalf("the lingering shard holds %v, want [k]: the deletion made meanwhile", cur.Names)
		}
		// In use again: not removed when the first linger would have passed.
		time.Sleep(linger)
		synctest.Wait()
		if got := shardsOf(c, edsType); len(got) != 2 {
			t.Fatalf("%d shards, want the re-used one kept", len(got))
		}

		c.Leave(again, back)
		time.Sleep(linger - time.Nanosecond)
		synctest.Wait()
		if got := shardsOf(c, edsType); len(got) != 2 || changes() != nil {
			t.Fatalf("%d shards before the linger passed, want 2 and no interest change", len(got))
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := shardsOf(c, edsType); len(got) != 1 {
			t.Fatalf("%d shards after the linger, want the lingering one removed", len(got))
		}
		if got := changes(); !slices.Equal(got, []string{edsType}) {
			t.Fatalf("interest changes %v after the linger, want one of %s", got, edsType)
		}
		if got := c.Interest(edsType); !slices.Equal(got.Names, []string{"k"}) {
			t.Fatalf("interest %v after the linger, want [k]", got.Names)
		}
	})
}

// Shards left at different times each linger for the whole linger, by one
// timer per class; a shard with a stream still watching it does not
// linger.
func TestShardLingerExpiresInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const linger = time.Minute
		_, c, _, _ := lingerClass(t, linger, Limits{})
		w1, w2, w3 := &recorder{}, &recorder{}, &recorder{}
		first := c.Subscribe(edsType, NewSubscription([]string{"a"}, false), w1)
		second := c.Subscribe(edsType, NewSubscription([]string{"b"}, false), w2)
		shared := c.Subscribe(edsType, NewSubscription([]string{"c"}, false), w3)
		c.Subscribe(edsType, NewSubscription([]string{"c"}, false), w1)

		c.Leave(first, w1)
		c.Leave(shared, w3) // w1 still watches it
		time.Sleep(linger / 2)
		c.Leave(second, w2)
		c.mu.Lock()
		queued := c.lingering.queue.Len()
		c.mu.Unlock()
		if queued != 2 {
			t.Fatalf("%d shards lingering, want 2", queued)
		}
		time.Sleep(linger / 2)
		synctest.Wait()
		if got := c.Interest(edsType).Names; !slices.Equal(got, []string{"b", "c"}) {
			t.Fatalf("interest %v when the first linger passed, want [b c]", got)
		}
		time.Sleep(linger / 2)
		synctest.Wait()
		if got := c.Interest(edsType).Names; !slices.Equal(got, []string{"c"}) {
			t.Fatalf("interest %v when the second linger passed, want [c]", got)
		}
	})
}

// A live subscription that the class's limits refuse only because of
// lingering shards evicts them, oldest first and no more than it needs;
// one refused even without them is refused and evicts nothing.
func TestLingeringShardsGiveWayUnderLimits(t *testing.T) {
	// Room for six names of 6 bytes in the upstream request, no more.
	sixNames, _ := requestBytes(edsType, proto.Size(node("a")), 6, 6*nameBytes("a-0000"), false)
	for _, tc := range []struct {
		name   string
		limits Limits
		// lingering subscriptions, oldest first, of typeOf(i)
		lingering [][]string
		typeOf    func(i int) string
		want      Subscription // the live subscription, of edsType
		evicted   []int        // which lingering shards it evicts
	}{{
		name:      "names per type",
		limits:    Limits{MaxNamesPerType: 4},
		lingering: [][]string{{"a", "b"}, {"c"}, {"d"}},
		typeOf:    func(int) string { return edsType },
		want:      NewSubscription([]string{"e", "f"}, false),
		evicted:   []int{0},
	}, {
		name:      "request bytes",
		limits:    Limits{MaxRequestBytes: sixNames},
		lingering: [][]string{names("a", 2), names("b", 2), names("c", 2)},
		typeOf:    func(int) string { return edsType },
		want:      NewSubscription(names("d", 4), false),
		evicted:   []int{0, 1},
	}, {
		name:      "types",
		limits:    Limits{MaxTypes: 2},
		lingering: [][]string{{"l"}, {"c"}, {"c2"}},
		typeOf:    func(i int) string { return []string{ListenerType, ClusterType, ClusterType}[i] },
		want:      NewSubscription([]string{"e"}, false),
		evicted:   []int{0},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, c, _, changes := lingerClass(t, time.Hour, tc.limits)
				var lingering []*Shard
				for i, ns := range tc.lingering {
					w := &recorder{}
					s, err := c.TrySubscribe(tc.typeOf(i), NewSubscription(ns, false), w)
					if err != nil {
						t.Fatalf("lingering shard %d: %v", i, err)
					}
					c.Leave(s, w)
					lingering = append(lingering, s)
				}
				// What the class holds fills it: the live subscription
				// alone fits, with the lingering shards it does not.
				if err := c.admit(c.tables[edsType], edsType, tc.want, false); err == nil {
					t.Fatal("test set-up: the live subscription fits with every lingering shard")
				}
				changes()
				live := &recorder{}
				if _, err := c.TrySubscribe(edsType, tc.want, live); err != nil {
					t.Fatalf("live subscription refused: %v", err)
				}
				var evicted []int
				for i, s := range lingering {
					if !slices.Contains(shardsOf(c, s.TypeURL), s) {
						evicted = append(evicted, i)
					}
				}
				if !slices.Equal(evicted, tc.evicted) {
					t.Fatalf("evicted lingering shards %v, want %v (oldest first, as few as needed)", evicted, tc.evicted)
				}
				wantLingers(t, r, len(tc.lingering)-len(tc.evicted), 0, 0, int64(len(tc.evicted)), 0)
				if len(changes()) == 0 {
					t.Fatal("the upstream hook was not told of the narrower interest")
				}
			})
		})
	}
}

// A subscription the limits refuse even without the lingering shards is
// refused as before, and the lingering shards stay.
func TestLingeringShardsStayWhenRefusalStands(t *testing.T) {
	_, c, _, _ := lingerClass(t, time.Hour, Limits{MaxNamesPerType: 3})
	w := &recorder{}
	s, err := c.TrySubscribe(edsType, NewSubscription([]string{"a"}, false), w)
	if err != nil {
		t.Fatal(err)
	}
	c.Leave(s, w)
	_, err = c.TrySubscribe(edsType, NewSubscription([]string{"b", "c", "d", "e"}, false), &recorder{})
	wantLimit(t, err, LimitNamesPerType)
	if got := shardsOf(c, edsType); len(got) != 1 || got[0] != s {
		t.Fatalf("shards %v after a refusal that stands, want the lingering one kept", got)
	}
}

// The class's own linger still drops it whole when its last stream has
// left, lingering shards and all; a shard whose linger passes while the
// class has no stream at all is kept for the class's linger (a rolling
// restart of every client), and the class's timer is stopped when it goes.
func TestIdleClassDropsWithLingeringShards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const linger = time.Minute
		r, c, dropped, changes := lingerClass(t, linger, Limits{})
		w1, w2 := &recorder{}, &recorder{}
		early := c.Subscribe(edsType, NewSubscription([]string{"a"}, false), w1)
		c.Leave(early, w1) // the class is still in use by the other stream
		time.Sleep(linger / 2)
		last := c.Subscribe(edsType, NewSubscription([]string{"b"}, false), w2)
		r.Release(c) // the last stream ends: the lease first, then its shard
		c.Leave(last, w2)
		changes()
		time.Sleep(linger / 2)
		synctest.Wait()
		if got := shardsOf(c, edsType); len(got) != 2 || changes() != nil {
			t.Fatalf("%d shards of the idle class, want both kept and the interest unchanged", len(got))
		}
		time.Sleep(linger / 2)
		synctest.Wait()
		select {
		case d := <-dropped:
			if d != c {
				t.Fatalf("dropped %s, want %s", d.Name, c.Name)
			}
		default:
			t.Fatal("the idle class was not dropped after its linger")
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.lingering.timer != nil || c.lingering.queue.Len() != 0 || len(c.tables) != 0 {
			t.Fatal("the dropped class kept its linger timer, queue or tables")
		}
	})
}

// Streams ending and subscribing concurrently with the linger timer leave
// the class consistent (for -race).
func TestLeaveRacesLinger(t *testing.T) {
	_, c, _, _ := lingerClass(t, time.Microsecond, Limits{MaxNamesPerType: 8})
	concurrently(4, func(g int) {
		w := &recorder{}
		for i := range 300 {
			sub := NewSubscription([]string{names("n", 8)[(g+i)%8]}, false)
			s, err := c.TrySubscribe(edsType, sub, w)
			if err != nil {
				t.Error(err)
				return
			}
			c.Leave(s, w)
		}
	})
}

// The lingering shards of a class are bounded: one more evicts the oldest,
// narrowing the upstream interest at once.
func TestLingeringShardsBounded(t *testing.T) {
	_, c, _, changes := lingerClass(t, time.Hour, Limits{})
	c.lingering.max = 2
	var left []*Shard
	for _, n := range []string{"a", "b", "c"} {
		w := &recorder{}
		s := c.Subscribe(edsType, NewSubscription([]string{n}, false), w)
		changes()
		c.Leave(s, w)
		left = append(left, s)
	}
	if got := shardsOf(c, edsType); len(got) != 2 || slices.Contains(got, left[0]) {
		t.Fatalf("%d shards lingering, want 2 without the oldest", len(got))
	}
	if got := c.Interest(edsType).Names; !slices.Equal(got, []string{"b", "c"}) || len(changes()) != 1 {
		t.Fatalf("interest %v, want [b c], narrowed once", got)
	}
}
