package app_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
	"github.com/xds-relay/xds-relay/upstream/rendezvous"
)

// tierDNS answers for the core tier's name with the loopback addresses
// the test lists, as a headless Service answers with its ready pods.
type tierDNS struct {
	mu  sync.Mutex
	ips []string
}

const tierHost = "core.tier.test"

func (d *tierDNS) set(ips ...string) {
	d.mu.Lock()
	d.ips = slices.Clone(ips)
	d.mu.Unlock()
}

func (d *tierDNS) lookup(_ context.Context, host string) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if host != tierHost {
		return nil, fmt.Errorf("no such host %q", host)
	}
	return slices.Clone(d.ips), nil
}

// affinityView is what /debug/upstream shows of an affinity tier.
type affinityView struct {
	Affinity string `json:"affinity"`
	Members  []struct {
		Address string `json:"address"`
		Live    bool   `json:"live"`
		Classes int    `json:"classes"`
	} `json:"members"`
	Streams []struct {
		Class    string `json:"class"`
		State    string `json:"state"`
		Member   string `json:"member"`
		Moves    int    `json:"moves"`
		Restarts struct {
			Move int `json:"move"`
		} `json:"restarts"`
	} `json:"streams"`
}

func debugAffinity(t *testing.T, ctx context.Context, r *app.Relay) affinityView {
	t.Helper()
	var v affinityView
	getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/upstream", &v)
	return v
}

// onPicks reports whether every class stream of the edge is connected on
// the member pick names for it.
func onPicks(v affinityView, classes int, pick func(class string) string) bool {
	if len(v.Streams) != classes {
		return false
	}
	for _, s := range v.Streams {
		if s.State != "connected" || s.Member != pick(s.Class) {
			return false
		}
	}
	return true
}

// TestE2EAffinityTier: 4 edge relays with upstream.affinity: class in front
// of a tier of core relays (each a full relay in front of go-control-plane),
// clients of 12 classes on every edge. The control plane holds one stream
// per class, not one per class per core relay; a core relay added takes
// the classes rendezvous hashing gives it (about a third) and only those
// move; a core relay killed gives its classes to the others; every client
// ends with its class's full state, and none is ever sent a state without
// its class's cluster.
func TestE2EAffinityTier(t *testing.T) {
	const edges, classes = 4, 12
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	for i := range classes {
		class := fmt.Sprintf("class-%d", i)
		m.Set(t, class, "v1", clusters("c-"+class))
	}
	// Core relays drop a class soon after its edge streams moved away, so
	// the control plane's streams follow the moves within the test.
	coreOpts := func(name, listen string) []relayOption {
		return []relayOption{relayAs(name), listenAt(listen), withConfig(func(c *app.Config) { c.NodeClasses.Linger = 100 * time.Millisecond })}
	}
	core0 := startRelay(t, m.Addr, coreOpts("core-0", "127.0.0.1:0")...)
	_, port, err := net.SplitHostPort(core0.Addr())
	if err != nil {
		t.Fatal(err)
	}
	at := func(ip string) string { return net.JoinHostPort(ip, port) }
	cores := map[string]*app.Relay{core0.Addr(): core0}
	core1 := startRelay(t, m.Addr, coreOpts("core-1", at("127.0.0.2"))...)
	cores[core1.Addr()] = core1

	dns := &tierDNS{}
	dns.set("127.0.0.1", "127.0.0.2")
	var edgeRelays []*app.Relay
	for e := range edges {
		edgeRelays = append(edgeRelays, startRelay(t, net.JoinHostPort(tierHost, port), relayAs(fmt.Sprintf("edge-%d", e)),
			withConfig(func(c *app.Config) {
				c.Upstream.Affinity = "class"
				c.Upstream.ResolveInterval = 50 * time.Millisecond
			}),
			withApp(app.WithUpstreamLookup(dns.lookup))))
	}
	type client struct {
		*adsClient
		class string
	}
	var clients []client
	for _, edge := range edgeRelays {
		for i := range classes {
			class := fmt.Sprintf("class-%d", i)
			c := dialADS(t, ctx, edge.Addr(), "node-"+class, class)
			c.Subscribe(resource.ClusterType)
			clients = append(clients, client{c, class})
		}
	}
	// every client holds its class's clusters, named by prefix.
	allHold := func(prefixes ...string) func() bool {
		return func() bool {
			for _, c := range clients {
				held := c.Held(resource.ClusterType)
				if len(held) != len(prefixes) {
					return false
				}
				for _, p := range prefixes {
					if held[p+c.class] == nil {
						return false
					}
				}
			}
			return true
		}
	}
	eventually(t, ctx, "every client to hold its class's v1", allHold("c-"))

	members := []string{core0.Addr(), core1.Addr()}
	pick := func(ms []string) func(string) string {
		return func(class string) string { return rendezvous.Pick(class, ms) }
	}
	onAll := func(ms []string) func() bool {
		return func() bool {
			for _, edge := range edgeRelays {
				if !onPicks(debugAffinity(t, ctx, edge), classes, pick(ms)) {
					return false
				}
			}
			return true
		}
	}
	eventually(t, ctx, "every edge's classes on their members", onAll(members))
	if st := m.Stats(); st.Streams != classes || st.Open != classes {
		t.Fatalf("the control plane saw %d streams (%d open), want one per class: %d", st.Streams, st.Open, classes)
	}
	v := debugAffinity(t, ctx, edgeRelays[0])
	if v.Affinity != "class" || len(v.Members) != 2 || !v.Members[0].Live || !v.Members[1].Live || v.Members[0].Classes+v.Members[1].Classes != classes {
		t.Fatalf("/debug/upstream members = %+v, want the 2 core relays, live, carrying the %d classes", v.Members, classes)
	}

	// Add a core relay: an address whose share of the 12 classes is about
	// a third (the port is the test's, so the hash is; choosing the
	// address keeps the count typical, and the expectation stays exact).
	third, moving := "", 0
	for ip := 3; ip < 20 && third == ""; ip++ {
		a := at(fmt.Sprintf("127.0.0.%d", ip))
		n := 0
		for i := range classes {
			if rendezvous.Pick(fmt.Sprintf("class-%d", i), append(slices.Clone(members), a)) == a {
				n++
			}
		}
		if n >= 3 && n <= 5 {
			third, moving = a, n
		}
	}
	if third == "" {
		t.Fatal("no loopback address takes about a third of the classes")
	}
	sent := map[*adsClient]int{}
	for _, c := range clients {
		sent[c.adsClient] = len(c.Log())
	}
	thirdHost, _, _ := net.SplitHostPort(third)
	core2 := startRelay(t, m.Addr, coreOpts("core-2", third)...)
	cores[core2.Addr()] = core2
	dns.set("127.0.0.1", "127.0.0.2", thirdHost)
	members = append(members, third)
	eventually(t, ctx, "the classes the new core relay takes moved to it", onAll(members))
	for _, edge := range edgeRelays {
		moved := 0
		for _, s := range debugAffinity(t, ctx, edge).Streams {
			toNew := s.Member == third
			if toNew != (s.Moves == 1 && s.Restarts.Move == 1) || (!toNew && s.Moves != 0) {
				t.Fatalf("%s on %s: %d moves, %d chosen; want one chosen move to the new core relay only for its classes", s.Class, s.Member, s.Moves, s.Restarts.Move)
			}
			if toNew {
				moved++
			}
		}
		if moved != moving {
			t.Fatalf("%d classes moved to the new core relay, want %d of %d", moved, moving, classes)
		}
	}
	eventually(t, ctx, "the control plane to hold one stream per class again", func() bool { return m.Stats().Open == classes })
	// The new member's answers are what the old member sent: the clients
	// saw nothing of the move.
	for _, c := range clients {
		if n := len(c.Log()); n != sent[c.adsClient] {
			t.Fatalf("a client of %s was sent %d responses during the move, want none: %v", c.class, n-sent[c.adsClient], c.Log()[sent[c.adsClient]:])
		}
	}
	edge := edgeRelays[0]
	if v, ok := scrape(t, ctx, edge, `xds_relay_upstream_members{state="live"}`); !ok || v != 3 {
		t.Fatalf("xds_relay_upstream_members{state=\"live\"} = %v (%v), want 3", v, ok)
	}
	if v, ok := scrape(t, ctx, edge, `xds_relay_upstream_member_classes{member="`+third+`"}`); !ok || int(v) != moving {
		t.Fatalf("the new member's classes metric = %v (%v), want %d", v, ok, moving)
	}
	movedTotal := 0.0
	for i := range classes {
		if v, ok := scrape(t, ctx, edge, fmt.Sprintf(`xds_relay_upstream_moves_total{class="class-%d"}`, i)); ok {
			movedTotal += v
		}
	}
	if int(movedTotal) != moving {
		t.Fatalf("xds_relay_upstream_moves_total sums to %v, want %d", movedTotal, moving)
	}
	page, _ := get(t, ctx, "http://"+edge.AdminAddr()+"/")
	for _, want := range []string{`id="members"`, `data-member="` + third + `"`, "<th>Member</th>"} {
		if !strings.Contains(string(page), want) {
			t.Fatalf("the status page lacks %s", want)
		}
	}
	t.Logf("adding a third core relay moved %d of %d classes", moving, classes)

	// Kill the core relay carrying the most classes (the DNS still names
	// it: it leaves the live set by its connections' failure).
	victim := slices.MaxFunc(slices.Collect(maps.Keys(cores)), func(a, b string) int { return count(classes, members, a) - count(classes, members, b) })
	cores[victim].Close()
	alive := slices.DeleteFunc(slices.Clone(members), func(a string) bool { return a == victim })
	eventually(t, ctx, "the killed core relay's classes on the others", onAll(alive))
	for i := range classes {
		class := fmt.Sprintf("class-%d", i)
		m.Set(t, class, "v2", clusters("c-"+class, "d-"+class))
	}
	eventually(t, ctx, "every client to hold its class's v2", allHold("c-", "d-"))
	eventually(t, ctx, "the control plane to hold one stream per class", func() bool { return m.Stats().Open == classes })
	for _, c := range clients {
		for _, e := range c.Log() {
			if e.TypeURL == resource.ClusterType && !slices.Contains(e.Names, "c-"+c.class) {
				t.Fatalf("a client of %s was sent %v, without its class's cluster", c.class, e.Names)
			}
		}
	}
	t.Logf("killing %s moved %d classes; the control plane saw %d streams in all", victim, count(classes, members, victim), m.Stats().Streams)
}

// count is how many of the classes rendezvous hashing gives member among
// members.
func count(classes int, members []string, member string) int {
	n := 0
	for i := range classes {
		if rendezvous.Pick(fmt.Sprintf("class-%d", i), members) == member {
			n++
		}
	}
	return n
}
