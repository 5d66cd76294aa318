package shard

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"testing"
)

const tellType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"

// counted is resource name at count n: its Any is "name=n" (see res).
func counted(name string, n int) *Resource { return res(name, strconv.Itoa(n)) }

// countOf parses the count back from a counted resource.
func countOf(t *testing.T, r *Resource) int {
	_, v, ok := bytes.Cut(r.Any, []byte("="))
	n, err := strconv.Atoi(string(v))
	if !ok || err != nil {
		t.Errorf("resource %s: %q is not a counted resource", r.Name, r.Any)
	}
	return n
}

// orderChecker is a Watcher that fails the test if it is told a shard's
// responses out of the order they were built: every update counts one
// resource up, so a response told after another must hold no resource at a
// lower count. It also plays a stream: it installs a shard it subscribed
// to by reading Current, and keeps a told response only while it is
// Current (the Watcher contract); what it keeps must be in order too.
type orderChecker struct {
	t *testing.T

	mu   sync.Mutex
	told map[*Shard]map[string]int // the counts of the last response told, by shard
	kept map[*Shard]map[string]int // the counts of the last response kept
	n    int                       // responses told
}

func newOrderChecker(t *testing.T) *orderChecker {
	return &orderChecker{t: t, told: map[*Shard]map[string]int{}, kept: map[*Shard]map[string]int{}}
}

// advance checks that r is not older than last[s] and records it (mu held).
func (o *orderChecker) advance(last map[*Shard]map[string]int, s *Shard, r *Response, what string) {
	prev := last[s]
	counts := make(map[string]int, len(r.Resources))
	for _, res := range r.Resources {
		n := countOf(o.t, res)
		if p, ok := prev[res.Name]; ok && n < p {
			o.t.Errorf("%s %s at %d after %d: responses out of order", what, res.Name, n, p)
		}
		counts[res.Name] = n
	}
	last[s] = counts
}

// install is what a stream does once its subscription returned.
func (o *orderChecker) install(s *Shard) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if cur := s.Current(); cur != nil {
		o.advance(o.kept, s, cur, "installed")
	}
}

func (o *orderChecker) ShardChanged(s *Shard, resp *Response) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n++
	o.advance(o.told, s, resp, "told")
	if resp == s.Current() {
		o.advance(o.kept, s, resp, "kept")
	}
}

func (o *orderChecker) ShardHeartbeat(s *Shard, hb *Heartbeat) {}

func (o *orderChecker) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}

// Updates applied concurrently, while clients subscribe and unsubscribe,
// reach every watcher in the order the class built them, though the class
// tells its watchers outside its lock; and a watcher that installs the
// shard's Current and keeps only a current told response (as a stream
// does) never goes back to an older one. Run with -race.
func TestTellsKeepOrderUnderSubscribeStorm(t *testing.T) {
	c, _ := newTestClass(t)
	const appliers, updates, clients = 4, 150, 4
	for g := range appliers {
		c.Apply(tellType, []*Resource{counted(fmt.Sprint("r", g), 0)}, false)
	}
	steady := newOrderChecker(t)
	wildcard := Subscription{Wildcard: true}
	all := c.Subscribe(tellType, wildcard, steady)
	steady.install(all)

	done := make(chan struct{})
	var clientsDone sync.WaitGroup
	for range clients {
		clientsDone.Go(func() {
			w := newOrderChecker(t)
			named := NewSubscription([]string{"r0", "r1"}, false)
			for {
				select {
				case <-done:
					return
				default:
				}
				for _, sub := range []Subscription{wildcard, named} {
					s, err := c.TrySubscribe(tellType, sub, w)
					if err != nil {
						t.Error(err)
						return
					}
					w.install(s)
					c.Unsubscribe(s, w)
				}
			}
		})
	}
	concurrently(appliers, func(g int) {
		name := fmt.Sprint("r", g)
		for n := 1; n <= updates; n++ {
			c.Apply(tellType, []*Resource{counted(name, n)}, false)
		}
	})
	close(done)
	clientsDone.Wait()

	if got, want := steady.count(), appliers*updates; got != want {
		t.Fatalf("the steady watcher was told %d responses, want %d (one per update)", got, want)
	}
	last := steady.kept[all]
	for g := range appliers {
		if n := last[fmt.Sprint("r", g)]; n != updates {
			t.Errorf("the steady watcher kept r%d at %d last, want %d", g, n, updates)
		}
	}
}

// tellBlocker blocks in its first ShardChanged until released.
type tellBlocker struct {
	once             sync.Once
	entered, release chan struct{}
}

func (b *tellBlocker) ShardChanged(*Shard, *Response) {
	b.once.Do(func() {
		close(b.entered)
		<-b.release
	})
}

func (b *tellBlocker) ShardHeartbeat(*Shard, *Heartbeat) {}

// While a class tells a shard's watchers of an update, a client subscribes
// to and unsubscribes from the same shard, and the class applies its next
// update (rebuilding the shard), without waiting for the telling; the next
// update's telling waits for it, and is then told in order. (Told under
// the class lock, this test deadlocks.)
func TestSubscribeDoesNotWaitForTelling(t *testing.T) {
	c, _ := newTestClass(t)
	c.Apply(tellType, []*Resource{counted("r", 0)}, true)
	b := &tellBlocker{entered: make(chan struct{}), release: make(chan struct{})}
	wildcard := Subscription{Wildcard: true}
	s := c.Subscribe(tellType, wildcard, b)
	checker := newOrderChecker(t)
	checker.install(c.Subscribe(tellType, wildcard, checker))

	first := make(chan struct{})
	go func() {
		defer close(first)
		c.Apply(tellType, []*Resource{counted("r", 1)}, true)
	}()
	<-b.entered // telling the first update, b before or after checker

	joiner := &recorder{}
	if got := c.Subscribe(tellType, wildcard, joiner); got != s {
		t.Fatalf("joined shard %v, want %v", got.Key, s.Key)
	}
	c.Unsubscribe(s, joiner)
	second := make(chan struct{})
	go func() {
		defer close(second)
		c.Apply(tellType, []*Resource{counted("r", 2)}, true)
	}()
	close(b.release)
	<-first
	<-second
	if got := countOf(t, s.Current().Resources[0]); got != 2 {
		t.Fatalf("current at %d, want 2", got)
	}
	if got := checker.count(); got != 2 {
		t.Fatalf("checker told %d responses, want 2", got)
	}
	if got := checker.kept[s]["r"]; got != 2 {
		t.Fatalf("checker kept r at %d last, want 2", got)
	}
}
