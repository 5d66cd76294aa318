package app_test

import (
	"maps"
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// gens is what a client holds of a type: name -> generation.
func gens(t *testing.T, c *xdstest.Client, typeURL string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for n, a := range c.Held(typeURL) {
		_, g, err := xdstest.Generation(a)
		if err != nil {
			t.Fatalf("%s %s: %v", typeURL, n, err)
		}
		out[n] = g
	}
	return out
}

// Behind a control plane whose wildcard leaves names out (the spec's
// site-specific wildcard; Envoy's on-demand CDS asks such a Cluster by name
// beside "*"), with upstream.wildcard: site_specific, in one class: a
// wildcard client is sent the wildcard's Clusters only, a client asking
// "*" and the on-demand name gets both, and one asking the name alone
// gets it; the name is asked upstream beside the wildcard; unsubscribed,
// it is reported removed; a Cluster the control plane takes out of its
// wildcard set is removed from the wildcard client, with either upstream
// protocol. With the default (every_resource) the on-demand name is never
// asked upstream and the "*"+name client lacks it.
func TestE2ESiteSpecificWildcard(t *testing.T) {
	for _, protocol := range []string{"sotw", "delta"} {
		t.Run(protocol, func(t *testing.T) {
			ctx := testContext(t)
			cp, err := xdstest.StartSiteWildcard(xdstest.SWOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cp.Close)
			const cds = xdstest.ClusterType
			for _, n := range []string{"c1", "c2"} {
				if err := cp.Set(cds, false, xdstest.Resource(cds, n, 1)); err != nil {
					t.Fatal(err)
				}
			}
			if err := cp.Set(cds, true, xdstest.Resource(cds, "od", 1)); err != nil {
				t.Fatal(err)
			}
			relay := startRelay(t, cp.Addr, withConfig(func(c *app.Config) {
				c.Upstream.Protocol = protocol
				c.Upstream.Wildcard = "site_specific"
			}))
			node := func(id string) *corev3.Node { return &corev3.Node{Id: id, Cluster: "odcds"} }
			dial := func(id string, delta bool) *xdstest.Client {
				c, err := xdstest.Dial(relay.Addr(), xdstest.Options{Node: node(id), ADS: true, Delta: delta})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(c.Close)
				return c
			}
			holds := func(c *xdstest.Client, what string, want map[string]int) {
				t.Helper()
				if !c.WaitFor(ctx, func(c *xdstest.Client) bool { return maps.Equal(gens(t, c, cds), want) }) {
					t.Fatalf("%s holds %v, want %v", what, gens(t, c, cds), want)
				}
			}

			wild := dial("wild", false)
			if err := wild.Subscribe(cds, xdstest.Sub{Wildcard: true, Legacy: true}); err != nil {
				t.Fatal(err)
			}
			holds(wild, "the wildcard client", map[string]int{"c1": 1, "c2": 1})

			onDemand := dial("ondemand", true)
			if err := onDemand.Subscribe(cds, xdstest.Sub{Wildcard: true, Names: []string{"od"}}); err != nil {
				t.Fatal(err)
			}
			holds(onDemand, `the "*"+od client`, map[string]int{"c1": 1, "c2": 1, "od": 1})
			named := dial("named", false)
			if err := named.Subscribe(cds, xdstest.Sub{Names: []string{"od"}}); err != nil {
				t.Fatal(err)
			}
			holds(named, "the od client", map[string]int{"od": 1})

			// A change the wildcard client must see, after which it must
			// still not hold od.
			if err := cp.Set(cds, false, xdstest.Resource(cds, "c1", 2)); err != nil {
				t.Fatal(err)
			}
			holds(wild, "the wildcard client after c1 changed", map[string]int{"c1": 2, "c2": 1})
			holds(onDemand, `the "*"+od client after c1 changed`, map[string]int{"c1": 2, "c2": 1, "od": 1})

			rec := cp.Records()
			sotwReqs, deltaReqs := rec.SotwRequests, rec.DeltaRequests
			askedOD := slices.ContainsFunc(sotwReqs, func(r *discoveryv3.DiscoveryRequest) bool {
				return r.GetTypeUrl() == cds && slices.Contains(r.GetResourceNames(), "*") && slices.Contains(r.GetResourceNames(), "od")
			}) || slices.ContainsFunc(deltaReqs, func(r *discoveryv3.DeltaDiscoveryRequest) bool {
				return r.GetTypeUrl() == cds && slices.Contains(r.GetResourceNamesSubscribe(), "od")
			})
			if !askedOD {
				t.Fatalf("od was never asked upstream beside the wildcard (SotW requests %d, delta %d)", len(sotwReqs), len(deltaReqs))
			}

			// Unsubscribed beside the wildcard, od is reported removed (the
			// spec's exception: it is not the wildcard's).
			if err := onDemand.Subscribe(cds, xdstest.Sub{Wildcard: true}); err != nil {
				t.Fatal(err)
			}
			holds(onDemand, `the "*" client once od is unsubscribed`, map[string]int{"c1": 2, "c2": 1})
			holds(named, "the od client", map[string]int{"od": 1})

			// The control plane takes c2 out of its wildcard set.
			if !cp.SetOnDemand(cds, "c2", true) {
				t.Fatal("SetOnDemand(c2): no such Cluster")
			}
			holds(wild, "the wildcard client once c2 left the wildcard's set", map[string]int{"c1": 2})
			holds(onDemand, `the "*" client once c2 left the wildcard's set`, map[string]int{"c1": 2})
		})
	}
}
