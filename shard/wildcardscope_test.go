package shard

import (
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// newSiteWildcardClass is a class whose upstream's wildcard is a set of its
// choosing (WildcardSiteSpecific).
func newSiteWildcardClass(t *testing.T) *Class {
	t.Helper()
	reg := NewRegistry(mustClassifier(t, nil), nil)
	reg.SetWildcardScope(WildcardSiteSpecific)
	return reg.ClassFor(&corev3.Node{Id: "n", Cluster: "c"})
}

func namesOf(r *Response) []string {
	if r == nil {
		return nil
	}
	return r.Names
}

// With a site-specific wildcard, a name asked beside the wildcard (Envoy's
// on-demand CDS) is the asking shard's only: a wildcard-only shard of the
// class is served the wildcard's set, not another client's on-demand
// names; and a name the wildcard's answer lacks is not absent, it waits
// for its own answer.
func TestSiteWildcardKeepsOnDemandNamesToTheirShards(t *testing.T) {
	c := newSiteWildcardClass(t)
	w := &recorder{}
	wild := c.Subscribe(ClusterType, NewSubscription(nil, true), w)
	c.Requested(ClusterType, c.Interest(ClusterType), false)
	c.Apply(ClusterType, []*Resource{res("a", "1"), res("b", "1")}, true) // the wildcard's set
	if got := namesOf(wild.Current()); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("[*] = %v, want [a b]", got)
	}
	onDemand := c.Subscribe(ClusterType, NewSubscription([]string{"*", "od"}, false), w)
	asked := c.Interest(ClusterType)
	if !asked.Wildcard || !slices.Equal(asked.Names, []string{"od"}) {
		t.Fatalf("interest %+v, want the wildcard and od", asked)
	}
	c.Requested(ClusterType, asked, false)
	if r := onDemand.Current(); r != nil {
		t.Fatalf("[* od] served %v (od known absent: %v) before od was answered: the wildcard's answer does not tell of it", r.Names, r.KnownAbsent("od"))
	}
	c.Apply(ClusterType, []*Resource{res("a", "1"), res("b", "1"), res("od", "1")}, true)
	if got := namesOf(onDemand.Current()); !slices.Equal(got, []string{"a", "b", "od"}) {
		t.Fatalf("[* od] = %v, want [a b od]", got)
	}
	if got := namesOf(wild.Current()); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("[*] = %v after another client asked od on demand, want [a b]", got)
	}
	named := c.Subscribe(ClusterType, NewSubscription([]string{"od"}, false), w)
	if got := namesOf(named.Current()); !slices.Equal(got, []string{"od"}) {
		t.Fatalf("[od] = %v, want [od]", got)
	}

	// A change of the wildcard's set reaches the wildcard shards; od stays
	// out of [*].
	c.Apply(ClusterType, []*Resource{res("a", "2"), res("c", "1"), res("od", "1")}, true)
	if got := namesOf(wild.Current()); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("[*] = %v, want [a c]", got)
	}

	// Once nobody asks for od by name, the wildcard does not keep it.
	c.Unsubscribe(onDemand, w)
	c.Unsubscribe(named, w)
	c.Requested(ClusterType, c.Interest(ClusterType), false)
	if _, held := c.tables[ClusterType].resource("od"); held {
		t.Fatal("od still held once no shard names it: the site-specific wildcard does not keep it current")
	}
	// The control plane puts od in its wildcard's set: it is the
	// wildcard's now.
	c.Apply(ClusterType, []*Resource{res("a", "2"), res("c", "1"), res("od", "2")}, true)
	if got := namesOf(wild.Current()); !slices.Equal(got, []string{"a", "c", "od"}) {
		t.Fatalf("[*] = %v once od is the wildcard's, want [a c od]", got)
	}
}

// A name asked beside the wildcard in the class's first request cannot be
// told from the wildcard's own: it is taken as the wildcard's (a wildcard
// client sent one resource too many rather than one too few). And with the
// default scope a wildcard covers every name, as before.
func TestWildcardScopeWhenNothingIsKnown(t *testing.T) {
	for _, tc := range []struct {
		name  string
		class func(t *testing.T) *Class
	}{
		{"site-specific, asked together", newSiteWildcardClass},
		{"every resource", func(t *testing.T) *Class { c, _ := newTestClass(t); return c }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.class(t)
			w := &recorder{}
			both := c.Subscribe(ClusterType, NewSubscription([]string{"*", "od"}, false), w)
			wild := c.Subscribe(ClusterType, NewSubscription(nil, true), w)
			c.Requested(ClusterType, c.Interest(ClusterType), false)
			c.Apply(ClusterType, []*Resource{res("a", "1"), res("od", "1")}, true)
			for _, s := range []*Shard{both, wild} {
				if got := namesOf(s.Current()); !slices.Equal(got, []string{"a", "od"}) {
					t.Fatalf("%v = %v, want [a od]", s.Sub, got)
				}
			}
		})
	}
}

// With the default scope the wildcard covers every name: a name beside it
// is not pending, and a wildcard answer without it says it does not exist.
func TestEveryResourceWildcardAnswersNames(t *testing.T) {
	c, _ := newTestClass(t)
	w := &recorder{}
	c.Subscribe(ClusterType, NewSubscription(nil, true), w)
	c.Requested(ClusterType, c.Interest(ClusterType), false)
	c.Apply(ClusterType, []*Resource{res("a", "1")}, true)
	both := c.Subscribe(ClusterType, NewSubscription([]string{"*", "od"}, false), w)
	c.Requested(ClusterType, c.Interest(ClusterType), false)
	r := both.Current()
	if r == nil || !slices.Equal(r.Names, []string{"a"}) || !r.KnownAbsent("od") {
		t.Fatalf("[* od] = %+v, want [a] with od known absent", r)
	}
}

// A name asked beside the wildcard that does not exist, created later, is
// pushed once for both: the wildcard would have brought it too, so it is
// taken as the wildcard's (never one too few for a wildcard client).
func TestSiteWildcardNameCreatedLaterIsTheWildcards(t *testing.T) {
	c := newSiteWildcardClass(t)
	w := &recorder{}
	wild := c.Subscribe(ClusterType, NewSubscription(nil, true), w)
	c.Subscribe(ClusterType, NewSubscription([]string{"*", "later"}, false), w)
	c.Requested(ClusterType, c.Interest(ClusterType), false)
	c.Apply(ClusterType, []*Resource{res("a", "1")}, true) // later does not exist
	c.Apply(ClusterType, []*Resource{res("a", "1"), res("later", "1")}, true)
	if got := namesOf(wild.Current()); !slices.Equal(got, []string{"a", "later"}) {
		t.Fatalf("[*] = %v, want [a later]: a Cluster created after its name was answered absent is the wildcard's", got)
	}
}
