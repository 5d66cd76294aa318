package shard

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/goleak"

	"github.com/xds-relay/xds-relay/dedup"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const edsType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"

func res(name, content string) *Resource {
	b := []byte(name + "=" + content)
	return &Resource{Name: name, Any: b, Hash: dedup.ResourceHash(b)}
}

// recorder is a Watcher that records notifications in order.
type recorder struct {
	got   []*Shard
	beats []*Heartbeat
}

func (r *recorder) ShardChanged(s *Shard, _ *Response) { r.got = append(r.got, s) }

func (r *recorder) ShardHeartbeat(s *Shard, h *Heartbeat) { r.beats = append(r.beats, h) }

func (r *recorder) take() []*Shard { g := r.got; r.got = nil; return g }

func newTestClass(t *testing.T) (*Class, *[]string) {
	t.Helper()
	var interest []string
	reg := NewRegistry(mustClassifier(t, nil), func(*Class) func(string) {
		return func(typeURL string) { interest = append(interest, typeURL) }
	})
	return reg.ClassFor(&corev3.Node{Id: "n", Cluster: "c"}), &interest
}

func TestKeyIsOrderInsensitive(t *testing.T) {
	a := KeyOf("c", edsType, NewSubscription([]string{"x", "y", "x"}, false))
	b := KeyOf("c", edsType, NewSubscription([]string{"y", "x"}, false))
	if a != b {
		t.Fatal("same name set in another order gave another key")
	}
	// "" matches nothing: it is not part of the subscription.
	if e := NewSubscription([]string{"", "y", "x", ""}, false); KeyOf("c", edsType, e) != a || !NewSubscription([]string{""}, false).Empty() {
		t.Fatalf("the empty name changed the subscription: %q", e.Names)
	}
	for name, k := range map[string]Key{
		"other class":   KeyOf("d", edsType, NewSubscription([]string{"x", "y"}, false)),
		"other type":    KeyOf("c", ClusterType, NewSubscription([]string{"x", "y"}, false)),
		"wildcard":      KeyOf("c", edsType, NewSubscription([]string{"x", "y", "*"}, false)),
		"fewer names":   KeyOf("c", edsType, NewSubscription([]string{"x"}, false)),
		"joined names":  KeyOf("c", edsType, NewSubscription([]string{"xy"}, false)),
		"class as name": KeyOf("", edsType, NewSubscription([]string{"c", "x", "y"}, false)),
	} {
		if k == a {
			t.Errorf("%s: key collides", name)
		}
	}
}

func TestSharedShardEncodesOnce(t *testing.T) {
	c, _ := newTestClass(t)
	c.Apply(edsType, []*Resource{res("a", "1"), res("b", "1")}, false)
	w1, w2 := &recorder{}, &recorder{}
	s1 := c.Subscribe(edsType, NewSubscription([]string{"b", "a"}, false), w1)
	s2 := c.Subscribe(edsType, NewSubscription([]string{"a", "b"}, false), w2)
	if s1 != s2 {
		t.Fatal("identical subscriptions got different shards")
	}
	r1 := s1.Current()
	if r1 == nil || !slices.Equal(r1.Names, []string{"a", "b"}) {
		t.Fatalf("response = %+v", r1)
	}
	c.Apply(edsType, []*Resource{res("a", "2")}, false)
	r2 := s1.Current()
	if r2 == r1 || r2.Version == r1.Version {
		t.Fatal("change did not produce a new version")
	}
	if len(w1.take()) != 1 || len(w2.take()) != 1 {
		t.Fatal("each watcher must be told exactly once")
	}
	// Identical content: no new version, nobody told.
	c.Apply(edsType, []*Resource{res("a", "2"), res("b", "1")}, false)
	if s1.Current() != r2 || len(w1.take()) != 0 {
		t.Fatal("identical content produced a push")
	}
}

func TestOnlyAffectedShardsRebuild(t *testing.T) {
	c, _ := newTestClass(t)
	c.Apply(edsType, []*Resource{res("a", "1"), res("b", "1")}, false)
	wa, wb, wall := &recorder{}, &recorder{}, &recorder{}
	c.Subscribe(edsType, NewSubscription([]string{"a"}, false), wa)
	c.Subscribe(edsType, NewSubscription([]string{"b"}, false), wb)
	c.Subscribe(edsType, NewSubscription(nil, true), wall)
	c.Apply(edsType, []*Resource{res("a", "2")}, false)
	if len(wa.take()) != 1 || len(wb.take()) != 0 || len(wall.take()) != 1 {
		t.Fatal("a change of a must reach the a shard and the wildcard shard only")
	}
}

func TestFullStateAndMergeSemantics(t *testing.T) {
	c, _ := newTestClass(t)
	wc := &recorder{}
	cds := c.Subscribe(ClusterType, NewSubscription(nil, true), wc)
	if cds.Current() != nil {
		t.Fatal("shard has a response before the upstream answered")
	}
	c.Apply(ClusterType, []*Resource{res("x", "1"), res("y", "1")}, true)
	c.Apply(ClusterType, []*Resource{res("y", "1")}, true)
	if got := cds.Current().Names; !slices.Equal(got, []string{"y"}) {
		t.Fatalf("replace kept a deleted cluster: %v", got)
	}
	c.Apply(ClusterType, nil, true)
	if r := cds.Current(); r == nil || len(r.Names) != 0 {
		t.Fatal("full-state type must have an empty response when nothing exists")
	}
	// Merge semantics (EDS from a SotW upstream): absence is not deletion,
	// and an empty response is never produced.
	eds := c.Subscribe(edsType, NewSubscription([]string{"p", "q"}, false), &recorder{})
	c.Apply(edsType, nil, false)
	if eds.Current() != nil {
		t.Fatal("EDS shard with no resources has a response")
	}
	c.Apply(edsType, []*Resource{res("p", "1")}, false)
	c.Apply(edsType, []*Resource{res("q", "1")}, false)
	if got := eds.Current().Names; !slices.Equal(got, []string{"p", "q"}) {
		t.Fatalf("merge lost a resource: %v", got)
	}
}

func TestInterestUnionAndPrune(t *testing.T) {
	c, interest := newTestClass(t)
	w1, w2 := &recorder{}, &recorder{}
	s1 := c.Subscribe(edsType, NewSubscription([]string{"a", "b"}, false), w1)
	s2 := c.Subscribe(edsType, NewSubscription([]string{"b", "c"}, false), w2)
	if got := c.Interest(edsType); !slices.Equal(got.Names, []string{"a", "b", "c"}) || got.Wildcard {
		t.Fatalf("union = %+v", got)
	}
	c.Apply(edsType, []*Resource{res("a", "1"), res("b", "1"), res("c", "1")}, false)
	*interest = nil
	c.Unsubscribe(s1, w1)
	if got := c.Interest(edsType); !slices.Equal(got.Names, []string{"b", "c"}) {
		t.Fatalf("union after unsubscribe = %+v", got)
	}
	if len(*interest) != 1 {
		t.Fatalf("interest hook called %d times, want 1", len(*interest))
	}
	if st := c.Status(); st[0].Resources != 3 {
		t.Fatalf("resource a dropped before the upstream was told: %d resources", st[0].Resources)
	}
	c.Requested(edsType, c.Interest(edsType), false)
	if st := c.Status(); st[0].Resources != 2 {
		t.Fatalf("resource a nobody needs was kept: %d resources", st[0].Resources)
	}
	*interest = nil
	// Re-subscribing the same names is no interest change.
	s3 := c.Subscribe(edsType, NewSubscription([]string{"c"}, false), w1)
	if len(*interest) != 0 {
		t.Fatal("a name already in the union changed the interest")
	}
	c.Unsubscribe(s2, w2)
	c.Unsubscribe(s3, w1)
	if got := c.Interest(edsType); !got.Empty() {
		t.Fatalf("union after everyone left = %+v", got)
	}
}

func TestClassifier(t *testing.T) {
	c := mustClassifier(t, []Rule{
		{Field: "metadata.role", Regex: `^gw-(\w+)$`, Class: "gateway-$1"},
		{Field: "locality.region", Regex: `^eu-`},
		{Field: "metadata.mesh.tier"},
	})
	node := func(cluster, region string, md map[string]any) *corev3.Node {
		return &corev3.Node{Cluster: cluster, Locality: &corev3.Locality{Region: region}, Metadata: mustStruct(t, md)}
	}
	tests := []struct {
		name string
		node *corev3.Node
		want string
	}{
		{"regex template", node("c", "", map[string]any{"role": "gw-north"}), "gateway-north"},
		{"regex whole match", node("c", "eu-west1", nil), "eu-"},
		{"nested metadata", node("c", "us", map[string]any{"mesh": map[string]any{"tier": "gold"}}), "gold"},
		{"no match falls back to cluster", node("fallback", "us", map[string]any{"role": "sidecar"}), "fallback"},
		{"nothing at all", &corev3.Node{}, DefaultClass},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.Classify(tc.node); got != tc.want {
				t.Fatalf("Classify = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestClassifierErrors(t *testing.T) {
	for _, tc := range []struct {
		rule Rule
		want string
	}{
		{Rule{Field: "bogus"}, "rules[0].field"},
		{Rule{Field: "id", Regex: "("}, "rules[0].regex"},
		{Rule{Field: "id", Class: "x-$1"}, "rules[0].class"},
	} {
		if _, err := NewClassifier([]Rule{tc.rule}); err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("NewClassifier(%+v) = %v, want error naming %s", tc.rule, err, tc.want)
		}
	}
}

// The last wildcard subscriber leaving must not empty the table while the
// upstream still sends everything: the next subscriber gets the full state.
func TestReturningWildcardSubscriberGetsFullState(t *testing.T) {
	c, _ := newTestClass(t)
	w := &recorder{}
	s := c.Subscribe(ClusterType, NewSubscription(nil, true), w)
	c.Requested(ClusterType, c.Interest(ClusterType), false)
	c.Apply(ClusterType, []*Resource{res("x", "1"), res("y", "1")}, true)
	c.Unsubscribe(s, w)
	// The upstream keeps its (legacy) wildcard: no Requested call.
	s2 := c.Subscribe(ClusterType, NewSubscription(nil, true), w)
	if r := s2.Current(); r == nil || !slices.Equal(r.Names, []string{"x", "y"}) {
		t.Fatalf("returning wildcard subscriber got %+v, want x and y", r)
	}
}

// A wildcard requested again after the upstream was told to drop it is not
// served the leftover (partial) state: it waits for the upstream's answer.
func TestReRequestedWildcardWaitsForUpstream(t *testing.T) {
	c, _ := newTestClass(t)
	w := &recorder{}
	all := c.Subscribe(ClusterType, NewSubscription(nil, true), w)
	one := c.Subscribe(ClusterType, NewSubscription([]string{"x"}, false), w)
	c.Requested(ClusterType, c.Interest(ClusterType), false)
	c.Apply(ClusterType, []*Resource{res("x", "1"), res("y", "1")}, true)
	c.Unsubscribe(all, w)
	c.Requested(ClusterType, c.Interest(ClusterType), false) // explicit [x]: y dropped
	if got := one.Current().Names; !slices.Equal(got, []string{"x"}) {
		t.Fatalf("explicit shard = %v", got)
	}
	again := c.Subscribe(ClusterType, NewSubscription(nil, true), w)
	c.Requested(ClusterType, c.Interest(ClusterType), false)
	if r := again.Current(); r != nil {
		t.Fatalf("re-requested wildcard served %v before the upstream answered", r.Names)
	}
	w.take()
	// The answer is identical to what the table holds for x, plus y.
	c.Apply(ClusterType, []*Resource{res("x", "1"), res("y", "1")}, true)
	if r := again.Current(); r == nil || !slices.Equal(r.Names, []string{"x", "y"}) {
		t.Fatalf("after the answer: %+v", r)
	}
	if got := w.take(); len(got) != 1 || got[0] != again {
		t.Fatalf("notified %v, want only the wildcard shard", got)
	}
}

// A full-state name the class does not hold is not answered from the table
// before the upstream has been asked and answered, or the grace has passed.
func TestPendingFullStateNames(t *testing.T) {
	// The grace timer runs on the bubble's fake clock (testing/synctest).
	synctest.Test(t, func(t *testing.T) {
		c, _ := newTestClass(t)
		w := &recorder{}
		first := c.Subscribe(ClusterType, NewSubscription([]string{"x"}, false), w)
		c.Requested(ClusterType, c.Interest(ClusterType), false)
		c.Apply(ClusterType, []*Resource{res("x", "1")}, true)
		if r := first.Current(); r == nil || !slices.Equal(r.Names, []string{"x"}) {
			t.Fatalf("first = %+v", r)
		}

		// Answered: y arrives with the next response.
		answered := c.Subscribe(ClusterType, NewSubscription([]string{"y"}, false), w)
		if answered.Current() != nil {
			t.Fatal("served y before the upstream was even asked")
		}
		c.Requested(ClusterType, c.Interest(ClusterType), false)
		if answered.Current() != nil {
			t.Fatal("served y before the upstream answered")
		}
		c.Apply(ClusterType, []*Resource{res("x", "1"), res("y", "1")}, true)
		if r := answered.Current(); r == nil || !slices.Equal(r.Names, []string{"y"}) {
			t.Fatalf("after the answer = %+v", r)
		}

		// Never answered (the upstream has nothing named z): served without z
		// once the grace has passed, with one notification.
		w.take()
		silent := c.Subscribe(ClusterType, NewSubscription([]string{"z"}, false), w)
		c.Requested(ClusterType, c.Interest(ClusterType), false)
		// In the bubble the clock moves only when every goroutine waits: the
		// sleep passes the grace and Wait lets the class's timer finish.
		time.Sleep(PendingGrace + time.Second)
		synctest.Wait()
		got := w.take()
		if r := silent.Current(); r == nil || len(r.Names) != 0 {
			t.Fatalf("after the grace = %+v, want an empty full-state response", r)
		}
		if len(got) != 1 || got[0] != silent {
			t.Fatalf("notified %v, want the z shard once", got)
		}
	})
}
