package upstream

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
	"github.com/xds-relay/xds-relay/upstream/rendezvous"
)

// startMember starts a go-control-plane on addr ("" for any loopback port)
// serving the cluster names to every node.
func startMember(t *testing.T, addr string, names ...string) *xdstest.ControlPlane {
	t.Helper()
	cp, err := xdstest.StartControlPlane(xdstest.CPOptions{Cache: xdstest.Snapshot, Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	setClusters(t, cp, names...)
	return cp
}

// affinityClasses starts an affinity client of cfg and attaches n
// classes (class-0 ...) to it, each with a wildcard CDS shard holding c1:
// it returns the client and the classes' served logs.
func affinityClasses(t *testing.T, cfg Config, n int) (*Client, []*servedLog) {
	t.Helper()
	cfg.Affinity, cfg.RelayID, cfg.Backoff = true, "edge", affinityBackoff
	c, err := New(cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	var logs []*servedLog
	for i := range n {
		class := attachClass(t, c, &corev3.Node{Id: "downstream", Cluster: fmt.Sprintf("class-%d", i)})
		l := newServedLog()
		subscribe(t, class, xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, l)
		logs = append(logs, l)
	}
	for _, l := range logs {
		l.await(t, "c1", holds("c1"))
	}
	return c, logs
}

// waitFor polls cond every 10 ms for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// onMembers reports whether every class's stream is connected on the
// member want says.
func onMembers(c *Client, want func(class string) string) bool {
	for _, st := range c.Status() {
		if st.State != StateConnected || st.Member != want(st.Class) {
			return false
		}
	}
	return true
}

var affinityBackoff = Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}

// Each class goes to the member rendezvous hashing picks for it, one
// stream per class over the tier; a member going down moves its classes
// to the other, which then serves them; back up, it takes its classes
// back by a chosen move.
func TestAffinitySendsEachClassToItsMember(t *testing.T) {
	const classes = 8
	a, b := startMember(t, "", "c1"), startMember(t, "", "c1")
	members := []string{a.Addr, b.Addr}
	c, logs := affinityClasses(t, Config{Address: a.Addr, Members: members}, classes)
	picked := func(class string) string { return rendezvous.Pick(class, members) }
	waitFor(t, "every class on its member", func() bool { return onMembers(c, picked) })
	onA := 0
	for i := range classes {
		if picked(fmt.Sprintf("class-%d", i)) == a.Addr {
			onA++
		}
	}
	if onA == 0 || onA == classes {
		t.Fatalf("%d of %d classes hash to one member: the test proves nothing", onA, classes)
	}
	if got, want := a.Stats().Open+b.Stats().Open, classes; got != want {
		t.Fatalf("the tier holds %d streams, want one per class (%d)", got, want)
	}
	if got := a.Stats().Open; got != onA {
		t.Fatalf("member a holds %d streams, want the %d classes hashed to it", got, onA)
	}
	ms := c.Members()
	if len(ms) != 2 || !ms[0].Live || !ms[1].Live || ms[0].Classes+ms[1].Classes != classes {
		t.Fatalf("members = %+v, want 2 live members carrying %d classes", ms, classes)
	}

	a.Down()
	waitFor(t, "every class on b", func() bool { return onMembers(c, func(string) string { return b.Addr }) })
	for _, st := range c.Status() {
		if moved := picked(st.Class) == a.Addr; moved != (st.Moves == 1) {
			t.Fatalf("%s: %d moves, want %d", st.Class, st.Moves, map[bool]int{true: 1}[moved])
		}
	}
	// A stream is connected for the class once opened and subscribed; the
	// server counts it when its handler runs.
	waitFor(t, "b holding every class's stream", func() bool { return b.Stats().Open == classes })
	waitFor(t, "a shown down", func() bool {
		ms := c.Members()
		return !ms[slices.IndexFunc(ms, func(m MemberStatus) bool { return m.Address == a.Addr })].Live
	})
	setClusters(t, b, "c1", "c2")
	setClusters(t, a, "c1", "c2")
	for _, l := range logs {
		l.await(t, "c1 and c2 from b", holds("c1", "c2"))
	}

	if err := a.Up(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a's classes back on a", func() bool { return onMembers(c, picked) })
	for _, st := range c.Status() {
		back := picked(st.Class) == a.Addr
		if back != (st.Restarts.Move == 1) {
			t.Fatalf("%s: %d chosen moves, want %d", st.Class, st.Restarts.Move, map[bool]int{true: 1}[back])
		}
	}
	waitFor(t, "a holding its classes' streams", func() bool { return a.Stats().Open == onA && b.Stats().Open == classes-onA })
}

// fakeDNS answers LookupHost from a list the test changes.
type fakeDNS struct {
	mu  sync.Mutex
	ips []string
}

func (d *fakeDNS) set(ips ...string) {
	d.mu.Lock()
	d.ips = ips
	d.mu.Unlock()
}

func (d *fakeDNS) lookup(_ context.Context, host string) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if host != "core.test" {
		return nil, fmt.Errorf("unknown host %q", host)
	}
	return slices.Clone(d.ips), nil
}

// Without upstream.members, the members are what upstream.address
// resolves to, resolved again every interval: a member added takes its
// classes and only those move; a member gone from the answer gives its
// classes to the others and its pool is closed.
func TestAffinityMembersFollowResolution(t *testing.T) {
	const classes = 8
	a := startMember(t, "127.0.0.1:0", "c1")
	_, port, err := net.SplitHostPort(a.Addr)
	if err != nil {
		t.Fatal(err)
	}
	b := startMember(t, net.JoinHostPort("127.0.0.2", port), "c1")
	dns := &fakeDNS{}
	dns.set("127.0.0.1")
	c, logs := affinityClasses(t, Config{Address: net.JoinHostPort("core.test", port), ResolveInterval: 20 * time.Millisecond, LookupHost: dns.lookup}, classes)
	waitFor(t, "every class on a", func() bool { return onMembers(c, func(string) string { return a.Addr }) })

	dns.set("127.0.0.2", "127.0.0.1")
	both := []string{a.Addr, b.Addr}
	picked := func(class string) string { return rendezvous.Pick(class, both) }
	waitFor(t, "b's classes on b", func() bool { return onMembers(c, picked) })
	onB := 0
	for _, st := range c.Status() {
		toB := picked(st.Class) == b.Addr
		if toB {
			onB++
		}
		if toB != (st.Moves == 1) || st.Moves != st.Restarts.Move {
			t.Fatalf("%s: %d moves (%d chosen), want only b's classes moved, once", st.Class, st.Moves, st.Restarts.Move)
		}
	}
	if onB == 0 || onB == classes {
		t.Fatalf("%d of %d classes hash to b: the test proves nothing", onB, classes)
	}
	waitFor(t, "one stream per class over the two", func() bool { return a.Stats().Open == classes-onB && b.Stats().Open == onB })

	dns.set("127.0.0.2")
	waitFor(t, "every class on b", func() bool { return onMembers(c, func(string) string { return b.Addr }) })
	waitFor(t, "a closed once idle", func() bool {
		ms := c.Members()
		return len(ms) == 1 && ms[0].Address == b.Addr && ms[0].Classes == classes && a.Stats().Open == 0
	})
	setClusters(t, b, "c1", "c2")
	for _, l := range logs {
		l.await(t, "c1 and c2 from b", holds("c1", "c2"))
	}
}
