package xdstest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// startSiteWildcard starts a SiteWildcard until the test ends.
func startSiteWildcard(t *testing.T) *SiteWildcard {
	t.Helper()
	s, err := StartSiteWildcard(SWOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// swClient dials s with an ADS client of the protocol, subscribed to
// clusters by sub, closed when the test ends.
func swClient(t *testing.T, s *SiteWildcard, delta bool, sub Sub) *Client {
	t.Helper()
	c, err := Dial(s.Addr, Options{Node: &corev3.Node{Id: "n"}, Delta: delta, ADS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if sub.Wildcard || len(sub.Names) > 0 {
		if err := c.Subscribe(ClusterType, sub); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// expectNext fails unless the client's next response says want: its
// resources and, if any, its removals ("[a b]" or "[a] removed [b]").
func expectNext(t *testing.T, name string, c *Client, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := c.Next(ctx)
	if err != nil {
		t.Fatalf("%s: waiting for %s: %v", name, want, err)
	}
	got := fmt.Sprint(ev.Names)
	if len(ev.Removed) > 0 {
		got += fmt.Sprint(" removed ", ev.Removed)
	}
	if ev.NACKed {
		got += " NACKed"
	}
	if got != want {
		t.Fatalf("%s: got %s (version %s), want %s", name, got, ev.Version, want)
	}
}

// mustSet sets clusters of s in one change, each "name" (generation 1)
// or "name@gen".
func mustSet(t *testing.T, s *SiteWildcard, onDemand bool, names ...string) {
	t.Helper()
	var rs []types.Resource
	for _, n := range names {
		name, gen, _ := strings.Cut(n, "@")
		g := 1
		if gen != "" {
			_, _ = fmt.Sscan(gen, &g)
		}
		rs = append(rs, Resource(ClusterType, name, g))
	}
	if err := s.Set(ClusterType, onDemand, rs...); err != nil {
		t.Fatal(err)
	}
}

// TestSiteWildcardSubscriptions: a wildcard client (legacy or "*") gets
// the wildcard set only, [* od] the wildcard set and od, [od] od alone;
// every change reaches exactly the clients it concerns: a resource out of
// the wildcard set is gone from a wildcard client's state (SotW: absent
// from the next Cluster response; delta: removed), as is a deleted one.
func TestSiteWildcardSubscriptions(t *testing.T) {
	type step struct {
		what string
		do   func(*SiteWildcard)
		// The next response of each client (legacy, star, both, named) for
		// SotW and delta; "" for none.
		sotw, delta [4]string
	}
	steps := []step{
		{"start", func(*SiteWildcard) {},
			[4]string{"[w1 w2]", "[w1 w2]", "[od w1 w2]", "[od]"},
			[4]string{"[w1 w2]", "[w1 w2]", "[od w1 w2]", "[od]"}},
		{"an on-demand od2 and a wildcard w3 added", func(s *SiteWildcard) {
			mustSet(t, s, true, "od2")
			mustSet(t, s, false, "w3")
		},
			[4]string{"[w1 w2 w3]", "[w1 w2 w3]", "[od w1 w2 w3]", ""},
			[4]string{"[w3]", "[w3]", "[w3]", ""}},
		{"w2 on demand", func(s *SiteWildcard) { s.SetOnDemand(ClusterType, "w2", true) },
			[4]string{"[w1 w3]", "[w1 w3]", "[od w1 w3]", ""},
			[4]string{"[] removed [w2]", "[] removed [w2]", "[] removed [w2]", ""}},
		{"od deleted", func(s *SiteWildcard) { s.Delete(ClusterType, "od") },
			[4]string{"", "", "[w1 w3]", "[]"},
			[4]string{"", "", "[] removed [od]", "[] removed [od]"}},
		{"w1 deleted", func(s *SiteWildcard) { s.Delete(ClusterType, "w1") },
			[4]string{"[w3]", "[w3]", "[w3]", ""},
			[4]string{"[] removed [w1]", "[] removed [w1]", "[] removed [w1]", ""}},
		{"od back in the wildcard set", func(s *SiteWildcard) { mustSet(t, s, false, "od@2") },
			[4]string{"[od w3]", "[od w3]", "[od w3]", "[od]"},
			[4]string{"[od]", "[od]", "[od]", "[od]"}},
	}
	for _, delta := range []bool{false, true} {
		t.Run(fmt.Sprintf("delta=%v", delta), func(t *testing.T) {
			s := startSiteWildcard(t)
			mustSet(t, s, false, "w1", "w2")
			mustSet(t, s, true, "od")
			subs := [4]Sub{{Wildcard: true, Legacy: true}, {Wildcard: true}, {Wildcard: true, Names: []string{"od"}}, {Names: []string{"od"}}}
			var clients [4]*Client
			for i, sub := range subs {
				clients[i] = swClient(t, s, delta, sub)
			}
			for _, st := range steps {
				st.do(s)
				want := st.sotw
				if delta {
					want = st.delta
				}
				for i, c := range clients {
					if want[i] != "" {
						expectNext(t, st.what+": "+subs[i].String(), c, want[i])
					}
				}
			}
			if st := s.Records().Stats; st.Open != 4 || st.NACKs != 0 {
				t.Errorf("stats %+v, want 4 streams open and no NACK", st)
			}
		})
	}
}

// TestSiteWildcardNACK: a NACK is recorded and nothing is resent until the
// next change.
func TestSiteWildcardNACK(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(fmt.Sprintf("delta=%v", delta), func(t *testing.T) {
			s := startSiteWildcard(t)
			mustSet(t, s, false, "w1")
			c, err := Dial(s.Addr, Options{Node: &corev3.Node{Id: "n"}, Delta: delta, ADS: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.NACK(ClusterType, 1)
			if err := c.Subscribe(ClusterType, Sub{Wildcard: true}); err != nil {
				t.Fatal(err)
			}
			expectNext(t, "first", c, "[w1] NACKed")
			// A barrier: the stream answers the Listener request after the
			// NACK, so a Cluster resent for the NACK would come first.
			if err := s.Set(ListenerType, false, Resource(ListenerType, "l1", 1)); err != nil {
				t.Fatal(err)
			}
			if err := c.Subscribe(ListenerType, Sub{Wildcard: true}); err != nil {
				t.Fatal(err)
			}
			expectNext(t, "listeners", c, "[l1]")
			mustSet(t, s, false, "w2")
			want := "[w1 w2]"
			if delta {
				want = "[w2]"
			}
			expectNext(t, "after a change", c, want)
			if st := s.Records().Stats; st.NACKs != 1 {
				t.Errorf("stats %+v, want 1 NACK", st)
			}
		})
	}
}

// TestSiteWildcardDeltaResume: initial_resource_versions are honoured: a
// resource claimed at its version is not sent again, one at another
// version is, and claimed names that do not exist or that the
// subscription does not cover (an on-demand name beside a wildcard) are
// reported removed.
func TestSiteWildcardDeltaResume(t *testing.T) {
	s := startSiteWildcard(t)
	mustSet(t, s, false, "w1", "w2") // version 1
	mustSet(t, s, true, "od")        // version 2

	c := swClient(t, s, true, Sub{Wildcard: true})
	expectNext(t, "first", c, "[w1 w2]")
	if err := c.Reconnect(); err != nil {
		t.Fatal(err)
	}
	mustSet(t, s, false, "w3") // version 3
	expectNext(t, "after the reconnect", c, "[w3]")

	fresh := func(sub []string, claims map[string]string) *Client {
		c := swClient(t, s, true, Sub{})
		if err := c.SendDeltaResume(ClusterType, sub, claims); err != nil {
			t.Fatal(err)
		}
		return c
	}
	c2 := fresh([]string{"*"}, map[string]string{"w1": "1", "w2": "0", "w3": "3", "gone": "5", "od": "2"})
	expectNext(t, "[*] resumed", c2, "[w2] removed [gone od]")
	c3 := fresh([]string{"*", "od"}, map[string]string{"w1": "1", "w2": "1", "od": "2", "gone": "5"})
	expectNext(t, "[* od] resumed", c3, "[w3] removed [gone]")

	var firsts []string
	for _, r := range s.Records().DeltaRequests {
		if len(r.GetInitialResourceVersions()) > 0 {
			firsts = append(firsts, fmt.Sprint(len(r.GetInitialResourceVersions())))
		}
	}
	if !slices.Equal(firsts, []string{"2", "5", "4"}) {
		t.Errorf("requests with initial_resource_versions claimed %v names, want [2 5 4]", firsts)
	}
}

// TestSiteWildcardDeltaUnsubscribeBesideWildcard: a name unsubscribed
// beside a wildcard is answered with the resource if the wildcard covers
// it, with its removal if not (spec, "Unsubscribing from Resources"); a
// name unsubscribed without a wildcard is forgotten silently.
func TestSiteWildcardDeltaUnsubscribeBesideWildcard(t *testing.T) {
	s := startSiteWildcard(t)
	mustSet(t, s, false, "w1")
	mustSet(t, s, true, "od", "od2")
	c := swClient(t, s, true, Sub{Wildcard: true, Names: []string{"w1", "od"}})
	expectNext(t, "first", c, "[od w1]")
	for _, n := range []string{"w1", "od"} {
		if err := c.SendDelta(ClusterType, nil, []string{n}); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"w1": "[w1]", "od": "[] removed [od]"}[n]
		expectNext(t, n+" unsubscribed", c, want)
	}

	named := swClient(t, s, true, Sub{Names: []string{"od2"}})
	expectNext(t, "named", named, "[od2]")
	if err := named.SendDelta(ClusterType, []string{"od"}, []string{"od2"}); err != nil {
		t.Fatal(err)
	}
	expectNext(t, "od2 for od", named, "[od]")
}

// TestSiteWildcardClose: Close ends every stream (the clients see it) and
// leaves no stream open; TestMain's goleak checks its goroutines.
func TestSiteWildcardClose(t *testing.T) {
	s, err := StartSiteWildcard(SWOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustSet(t, s, false, "w1")
	var clients []*Client
	for _, delta := range []bool{false, true} {
		c := swClient(t, s, delta, Sub{Wildcard: true})
		expectNext(t, "first", c, "[w1]")
		clients = append(clients, c)
	}
	if st := s.Records().Stats; st.Open != 2 || st.Streams != 1 || st.DeltaStreams != 1 {
		t.Errorf("stats %+v, want 2 open, one of each protocol", st)
	}
	s.Close()
	for _, c := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := c.Next(ctx); err == nil || ctx.Err() != nil {
			t.Errorf("after Close: Next returned %v, want the stream's end", err)
		}
		cancel()
	}
	if st := s.Records().Stats; st.Open != 0 {
		t.Errorf("stats %+v after Close, want none open", st)
	}
}

// TestSiteWildcardSotwStaleNonce: a SotW request whose nonce is not the
// type's latest is not answered, but its subscription is kept: after its
// names, an empty list is no legacy wildcard any more but nothing. Raw
// requests: the Client always sends its latest nonce.
func TestSiteWildcardSotwStaleNonce(t *testing.T) {
	s := startSiteWildcard(t)
	mustSet(t, s, false, "w1")
	mustSet(t, s, true, "od")
	if err := s.Set(ListenerType, false, Resource(ListenerType, "l1", 1)); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := openWire(ctx, conn, false, "")
	if err != nil {
		t.Fatal(err)
	}
	exchange := func(what string, req *discoveryv3.DiscoveryRequest, want string) *discoveryv3.DiscoveryResponse {
		t.Helper()
		if req != nil {
			if err := w.send(req); err != nil {
				t.Fatal(err)
			}
		}
		got, err := w.recv()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		r := got.(*discoveryv3.DiscoveryResponse)
		var names []string
		for _, a := range r.GetResources() {
			n, err := resourceName(a)
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		if g := Short(r.GetTypeUrl()) + fmt.Sprint(names); g != want {
			t.Fatalf("%s: got %s, want %s", what, g, want)
		}
		return r
	}
	first := exchange("first", &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "n"}, TypeUrl: ClusterType}, "C[w1]")
	if err := w.send(&discoveryv3.DiscoveryRequest{TypeUrl: ClusterType, ResourceNames: []string{"*", "od"}, ResponseNonce: "stale"}); err != nil {
		t.Fatal(err)
	}
	// The Listener answer comes after the stale request was read: a
	// Cluster answer to it would come first.
	exchange("listeners after the stale request", &discoveryv3.DiscoveryRequest{TypeUrl: ListenerType}, "L[l1]")
	exchange("the ACK, empty", &discoveryv3.DiscoveryRequest{TypeUrl: ClusterType, VersionInfo: first.GetVersionInfo(),
		ResponseNonce: first.GetNonce()}, "C[]")
}
