package shard

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

func newLimitedClass(t *testing.T, l Limits) (*Class, *[]string) {
	t.Helper()
	var interest []string
	reg := NewRegistry(mustClassifier(t, nil), func(*Class) func(string) {
		return func(typeURL string) { interest = append(interest, typeURL) }
	})
	reg.SetClassLimits(l)
	return reg.ClassFor(&corev3.Node{Id: "n", Cluster: "c"}), &interest
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return out
}

func wantLimit(t *testing.T, err error, limit string) {
	t.Helper()
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != limit {
		t.Fatalf("err = %v, want a LimitError for %s", err, limit)
	}
	if !contains(err.Error(), limit) {
		t.Fatalf("error %q does not name %s", err, limit)
	}
}

// A subscription whose names would push the class's union of a type past
// MaxNamesPerType is refused; the union (what the upstream is asked for)
// and the other subscriber are untouched. Joining an existing shard, or
// asking for names already in the union, is admitted.
func TestClassNamesPerTypeLimit(t *testing.T) {
	c, interest := newLimitedClass(t, Limits{MaxNamesPerType: 10})
	first := NewSubscription(names("a", 6), false)
	w1, w2, w3 := &recorder{}, &recorder{}, &recorder{}
	s1, err := c.TrySubscribe(edsType, first, w1)
	if err != nil {
		t.Fatal(err)
	}
	*interest = nil
	_, err = c.TrySubscribe(edsType, NewSubscription(append(names("a", 3), names("b", 5)...), false), w2)
	wantLimit(t, err, LimitNamesPerType)
	if got := c.Interest(edsType); !got.Equal(first) {
		t.Fatalf("interest after the refusal = %v, want %v", got, first)
	}
	if len(*interest) != 0 {
		t.Fatalf("the upstream was woken for %v", *interest)
	}
	if c.shardCount() != 1 {
		t.Fatalf("%d shards, want 1", c.shardCount())
	}
	// Within the limit: names already in the union count once.
	if _, err := c.TrySubscribe(edsType, NewSubscription(append(names("a", 6), names("b", 4)...), false), w2); err != nil {
		t.Fatal(err)
	}
	if s, err := c.TrySubscribe(edsType, first, w3); err != nil || s != s1 {
		t.Fatalf("joining the first shard: %v, %v", s, err)
	}
}

// The type URLs with shards are bounded; a refused type leaves no table.
func TestClassTypesLimit(t *testing.T) {
	c, _ := newLimitedClass(t, Limits{MaxTypes: 2})
	w := &recorder{}
	sub := NewSubscription(nil, true)
	for _, typeURL := range []string{ClusterType, ListenerType} {
		if _, err := c.TrySubscribe(typeURL, sub, w); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.TrySubscribe("type.googleapis.com/bogus.Type", sub, w)
	wantLimit(t, err, LimitTypes)
	if got, want := c.TypeURLs(), []string{ClusterType, ListenerType}; !slices.Equal(got, want) {
		t.Fatalf("types after the refusal = %v, want %v", got, want)
	}
	// Another shard of a type already subscribed is no new type.
	if _, err := c.TrySubscribe(ClusterType, NewSubscription([]string{"x"}, false), w); err != nil {
		t.Fatal(err)
	}
}

// The estimated upstream request for a type's union is bounded: the names
// as the request carries them, the type URL, the node and an allowance.
func TestClassRequestBytesLimit(t *testing.T) {
	long := func(prefix string, n int) []string {
		out := names(prefix, n)
		for i := range out {
			out[i] += string(make([]byte, 90)) // 100-byte names
		}
		return out
	}
	c, _ := newLimitedClass(t, Limits{MaxRequestBytes: requestOverhead + 8000})
	w := &recorder{}
	if _, err := c.TrySubscribe(edsType, NewSubscription(long("a", 50), false), w); err != nil {
		t.Fatal(err) // about 5,100 bytes of names
	}
	_, err := c.TrySubscribe(edsType, NewSubscription(long("b", 50), false), w)
	wantLimit(t, err, LimitRequestBytes)
	if got := len(c.Interest(edsType).Names); got != 50 {
		t.Fatalf("union has %d names after the refusal, want 50", got)
	}
	// A delta upstream's first request after a reconnect names each
	// resource twice, with its version: the same names no longer fit.
	d, _ := newLimitedClass(t, Limits{MaxRequestBytes: requestOverhead + 8000, IncrementalUpstream: true})
	_, err = d.TrySubscribe(edsType, NewSubscription(long("a", 50), false), w)
	wantLimit(t, err, LimitRequestBytes)
	if got := d.TypeURLs(); len(got) != 0 {
		t.Fatalf("refused first subscription left tables %v", got)
	}
}

// Two subscriptions racing for the last room in the union: exactly one is
// admitted (the check and the subscription are one step under the lock).
func TestClassLimitRace(t *testing.T) {
	for i := 0; i < 50; i++ {
		c, _ := newLimitedClass(t, Limits{MaxNamesPerType: 10})
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[j] = c.TrySubscribe(edsType, NewSubscription(names(fmt.Sprint("s", j), 6), false), &recorder{})
			}()
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("errors %v and %v: want exactly one refused", errs[0], errs[1])
		}
		if n := len(c.Interest(edsType).Names); n != 6 {
			t.Fatalf("union of %d names, want 6", n)
		}
	}
}

// A table nobody subscribes to any more and that holds nothing is freed:
// at once when the upstream was never asked for the type, or once the
// upstream was told it needs nothing of it.
func TestEmptyTableFreed(t *testing.T) {
	c, _ := newTestClass(t)
	w := &recorder{}
	bogus := "type.googleapis.com/bogus.Type"
	s := c.Subscribe(bogus, NewSubscription(nil, true), w)
	c.Unsubscribe(s, w)
	if got := c.TypeURLs(); len(got) != 0 {
		t.Fatalf("tables %v after the only subscriber of an unrequested type left", got)
	}

	// Asked of the upstream: kept until the upstream is told.
	sub := NewSubscription([]string{"x", "y"}, false)
	s = c.Subscribe(edsType, sub, w)
	c.Requested(edsType, sub, false)
	c.Unsubscribe(s, w)
	if got := c.TypeURLs(); !slices.Equal(got, []string{edsType}) {
		t.Fatalf("tables %v before the upstream was told", got)
	}
	c.Requested(edsType, Subscription{}, false)
	if got := c.TypeURLs(); len(got) != 0 {
		t.Fatalf("tables %v after the upstream was told it needs nothing", got)
	}
	// An upstream's late empty answer creates nothing; a table holding
	// resources stays.
	c.Apply(edsType, nil, false)
	if got := c.TypeURLs(); len(got) != 0 {
		t.Fatalf("tables %v after an empty update", got)
	}
	c.Apply(ClusterType, []*Resource{res("a", "1")}, true)
	if got := c.TypeURLs(); !slices.Equal(got, []string{ClusterType}) {
		t.Fatalf("tables %v, want the one holding a resource", got)
	}
}

// Names that leave the union stop being pending: nothing waits for them,
// and an upstream that never answers for a missing name (go-control-plane)
// would otherwise leave them in the table for good.
func TestPendingForgottenWithTheirNames(t *testing.T) {
	c, _ := newTestClass(t)
	w1, w2 := &recorder{}, &recorder{}
	keep := c.Subscribe(edsType, NewSubscription([]string{"keep"}, false), w1)
	c.Requested(edsType, NewSubscription([]string{"keep"}, false), true) // a delta upstream
	gone := c.Subscribe(edsType, NewSubscription(names("gone", 100), false), w2)
	c.Requested(edsType, c.Interest(edsType), true)
	if got := c.Status()[0].Pending; got != 101 {
		t.Fatalf("%d names pending, want 101", got)
	}
	c.Unsubscribe(gone, w2)
	c.Requested(edsType, c.Interest(edsType), true)
	if got := c.Status()[0].Pending; got != 1 {
		t.Fatalf("%d names pending after 100 left the union, want 1", got)
	}
	// Subscribed and left before the upstream was asked: forgotten at once.
	gone = c.Subscribe(edsType, NewSubscription(names("brief", 10), false), w2)
	c.Unsubscribe(gone, w2)
	if got := c.Status()[0].Pending; got != 1 {
		t.Fatalf("%d names pending, want 1", got)
	}
	c.Unsubscribe(keep, w1)
	c.Requested(edsType, Subscription{}, true)
	if got := c.TypeURLs(); len(got) != 0 {
		t.Fatalf("tables %v after everyone left", got)
	}
}

// A table's maps are re-made once they shrink far below their peak (a Go
// map never gives back its buckets).
func TestTableMapsCompacted(t *testing.T) {
	c, _ := newTestClass(t)
	w1, w2 := &recorder{}, &recorder{}
	keep := c.Subscribe(edsType, NewSubscription([]string{"keep"}, false), w1)
	big := c.Subscribe(edsType, NewSubscription(names("big", 5000), false), w2)
	c.Requested(edsType, c.Interest(edsType), false)
	c.Unsubscribe(big, w2)
	c.Requested(edsType, c.Interest(edsType), false)
	c.mu.Lock()
	peak := c.tables[edsType].byNamePeak
	c.mu.Unlock()
	if peak != 1 {
		t.Fatalf("byName's peak is %d after the union shrank to 1 name: not re-made", peak)
	}
	c.Unsubscribe(keep, w1)
}
