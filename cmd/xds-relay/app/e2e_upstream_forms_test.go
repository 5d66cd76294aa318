package app_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/bench/xdstest"
)

// Issue 11, items 1 and 2: the request forms the relay sends upstream, in
// front of go-control-plane v0.14's snapshot cache, which filters a SotW
// response by the request's literal names (only the legacy empty list
// means wildcard to it; in ADS mode it does not answer a request naming
// anything it lacks, "*" included).

// formsMgmt is a control plane serving class-a, asked for the request
// forms it received.
type formsMgmt struct{ *controlPlane }

// startFormsMgmt starts a control plane over a snapshot cache, in ADS mode
// if ads.
func startFormsMgmt(t *testing.T, ads bool) formsMgmt {
	t.Helper()
	kind := xdstest.Snapshot
	if ads {
		kind = xdstest.SnapshotADS
	}
	return formsMgmt{startMgmt(t, "127.0.0.1:0", func(o *xdstest.CPOptions) { o.Cache = kind })}
}

// Forms returns the distinct resource_names lists requested for typeURL.
func (m formsMgmt) Forms(typeURL string) []string {
	reqs, _ := m.Requests()
	var out []string
	for _, r := range reqs {
		if r.GetTypeUrl() == typeURL {
			f := fmt.Sprint(r.GetResourceNames())
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// setForms installs clusters and listeners for class-a.
func (m formsMgmt) setForms(t *testing.T, version string, clusterNames, listenerNames []string) {
	t.Helper()
	res := clusters(clusterNames...)
	for _, n := range listenerNames {
		res[resource.ListenerType] = append(res[resource.ListenerType], &listenerv3.Listener{Name: n})
	}
	m.Set(t, "class-a", version, res)
}

// resourceNames decodes a response's resource names, sorted.
func resourceNames(t *testing.T, resp *discoveryv3.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range resp.GetResources() {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("%s response: %v", resp.GetTypeUrl(), err)
		}
		out = append(out, m.(interface{ GetName() string }).GetName())
	}
	slices.Sort(out)
	return out
}

// awaitHolds reads c's responses until the latest of each type in want has
// exactly want's names. Every response c gets meanwhile must hold at least
// the names of floor for its type: a smaller full-state response would make
// an Envoy delete what it lacks.
func awaitHolds(t *testing.T, c *adsClient, who string, want, floor map[string][]string) {
	t.Helper()
	got := map[string][]string{}
	deadline := time.Now().Add(10 * time.Second)
	for {
		done := true
		for typeURL, names := range want {
			done = done && slices.Equal(got[typeURL], names)
		}
		if done {
			return
		}
		resp, err := c.next(time.Until(deadline))
		if err != nil {
			t.Fatalf("%s holds %v, want %v: %v", who, got, want, err)
		}
		names := resourceNames(t, resp)
		for _, n := range floor[resp.GetTypeUrl()] {
			if !slices.Contains(names, n) {
				t.Fatalf("%s was pushed a %s state of %v (version %s), without %s", who, typeLabelOf(resp.GetTypeUrl()), names, resp.GetVersionInfo(), n)
			}
		}
		got[resp.GetTypeUrl()] = names
	}
}

func typeLabelOf(typeURL string) string { return typeURL[strings.LastIndex(typeURL, ".")+1:] }

// (a) One class, an Envoy-like client (legacy wildcard CDS) and a
// proxyless-gRPC-like one (CDS by name, [A]). The relay asked for
// ["*", "A"], which the snapshot cache answers with A alone or, in ADS
// mode, not at all: after an upstream change the wildcard client was pushed
// A alone, or never told of the change. Both join orders.
func TestE2EMixedClassWildcardKeepsAllClusters(t *testing.T) {
	for _, wildFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("wildcard first %v", wildFirst), func(t *testing.T) {
			ctx := testContext(t)
			m := startFormsMgmt(t, true)
			m.setForms(t, "v1", []string{"A", "B", "C"}, nil)
			r := startRelay(t, m.Addr)
			all := map[string][]string{cdsType: {"A", "B", "C"}}

			wild := dialADS(t, ctx, r.Addr(), "envoy-1", "class-a")
			named := dialADS(t, ctx, r.Addr(), "grpc-1", "class-a")
			if wildFirst {
				wild.Subscribe(cdsType)
				awaitHolds(t, wild, "the wildcard client", all, all)
				named.Subscribe(cdsType, "A")
			} else {
				// In ADS mode the snapshot cache answers a request by name only
				// when it names every resource of the type: [A] alone is never
				// answered. The wildcard client joins once [A] went upstream.
				named.Subscribe(cdsType, "A")
				eventually(t, ctx, "[A] to be asked upstream", func() bool { return slices.Contains(m.Forms(cdsType), "[A]") })
				wild.Subscribe(cdsType)
				awaitHolds(t, wild, "the wildcard client", all, all)
			}
			awaitHolds(t, named, "the [A] client", map[string][]string{cdsType: {"A"}}, nil)

			m.setForms(t, "v2", []string{"A", "B", "C", "D"}, nil)
			awaitHolds(t, wild, "the wildcard client", map[string][]string{cdsType: {"A", "B", "C", "D"}}, all)
			t.Logf("CDS request forms upstream: %v", m.Forms(cdsType))
		})
	}
}

// (b) A single client sends ["*", "A"] itself (spec: a wildcard plus a
// name): it gets the full state, before and after a change.
func TestE2EWildcardPlusNameClientGetsFullState(t *testing.T) {
	ctx := testContext(t)
	m := startFormsMgmt(t, true)
	m.setForms(t, "v1", []string{"A", "B", "C"}, nil)
	r := startRelay(t, m.Addr)
	c := dialADS(t, ctx, r.Addr(), "client-1", "class-a")
	c.Subscribe(cdsType, "*", "A")
	all := map[string][]string{cdsType: {"A", "B", "C"}}
	awaitHolds(t, c, "the [* A] client", all, all)
	m.setForms(t, "v2", []string{"A", "B", "C", "D"}, nil)
	awaitHolds(t, c, "the [* A] client", map[string][]string{cdsType: {"A", "B", "C", "D"}}, all)
	if forms := m.Forms(cdsType); !slices.Equal(forms, []string{"[]"}) {
		t.Fatalf("CDS request forms upstream %v, want only the legacy wildcard []", forms)
	}
}

// (c) The class's upstream stream already asked for explicit names (CDS
// and LDS), then a wildcard client joins, with the named client still there
// or gone. The relay asked for ["*", names] or ["*"]: go-control-plane
// answers nothing (ADS mode) or an empty state, and outside ADS mode
// answers every ACK again (a request storm). The wildcard client must get
// the full state, and the upstream must see few requests.
func TestE2EWildcardAfterNamesGetsFullStateWithoutStorm(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ads       bool
		namedStay bool
	}{
		{"ads, named client stays", true, true},
		{"ads, named client gone", true, false},
		{"non-ads, named client stays", false, true},
		{"non-ads, named client gone", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			m := startFormsMgmt(t, tc.ads)
			m.setForms(t, "v1", []string{"A", "B", "C"}, []string{"L1", "L2"})
			r := startRelay(t, m.Addr, shortLinger()) // a named client gone: its shards go soon after

			// In ADS mode the snapshot cache answers a request by name only
			// when it names every resource of the type.
			namedCDS, namedLDS := []string{"A"}, []string{"L1"}
			if tc.ads {
				namedCDS, namedLDS = []string{"A", "B", "C"}, []string{"L1", "L2"}
			}
			named := dialADS(t, ctx, r.Addr(), "grpc-1", "class-a")
			named.Subscribe(cdsType, namedCDS...)
			named.Subscribe(resource.ListenerType, namedLDS...)
			awaitHolds(t, named, "the named client", map[string][]string{cdsType: namedCDS, resource.ListenerType: namedLDS}, nil)
			if !tc.namedStay {
				// Another client keeps the class in use, so it does not
				// linger with the named client's shards.
				keeper := dialADS(t, ctx, r.Addr(), "keeper", "class-a")
				keeper.Subscribe(resource.RouteType, "r")
				awaitWatched(t, ctx, r, "class-a", resource.RouteType)
				named.Close()
				eventually(t, ctx, "the names to be dropped upstream", func() bool {
					return slices.Contains(m.Forms(cdsType), "[]") && slices.Contains(m.Forms(resource.ListenerType), "[]")
				})
			}

			before := m.Stats().Requests
			wild := dialADS(t, ctx, r.Addr(), "envoy-1", "class-a")
			wild.Subscribe(cdsType)
			wild.Subscribe(resource.ListenerType)
			full := map[string][]string{cdsType: {"A", "B", "C"}, resource.ListenerType: {"L1", "L2"}}
			awaitHolds(t, wild, "the wildcard client", full, full)

			// A bounded interval after the wildcard was served: a relay in
			// a loop with the upstream sends thousands of requests in it.
			time.Sleep(time.Second)
			if n := m.Stats().Requests - before; n > 20 {
				t.Fatalf("the upstream received %d requests within a second of a wildcard client joining", n)
			}
			m.setForms(t, "v2", []string{"A", "B", "C", "D"}, []string{"L1", "L2"})
			awaitHolds(t, wild, "the wildcard client", map[string][]string{cdsType: {"A", "B", "C", "D"}}, full)
			// The restart that asked for the wildcard is counted as chosen,
			// not as a failure, in /debug/upstream and /metrics alike.
			st := upstreamStatus(t, ctx, r, "class-a")
			series := `xds_relay_upstream_restarts_total{class="class-a",reason="wildcard"}`
			if v, ok := scrape(t, ctx, r, series); st.Restarts.Wildcard < 1 || st.Reconnects != 0 || !ok || v != float64(st.Restarts.Wildcard) {
				t.Errorf("upstream status: %d reconnects, restarts %+v; %s = %v (%v): want wildcard restarts, counted alike, and no reconnect",
					st.Reconnects, st.Restarts, series, v, ok)
			}
			t.Logf("%d requests upstream; CDS forms %v, LDS forms %v", m.Stats().Requests, m.Forms(cdsType), m.Forms(resource.ListenerType))
		})
	}
}
