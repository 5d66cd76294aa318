package upstream

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

func TestResyncAfterSpreadsTheInterval(t *testing.T) {
	for _, every := range []time.Duration{0, -time.Second} {
		if got := resyncAfter(every); got != 0 {
			t.Errorf("resyncAfter(%v) = %v, want 0: never", every, got)
		}
	}
	if got := resyncAfter(time.Nanosecond); got <= 0 {
		t.Errorf("resyncAfter(1ns) = %v: a positive interval must resync", got)
	}
	every := time.Second
	seen := map[time.Duration]bool{}
	for range 1000 {
		got := resyncAfter(every)
		if got < every*3/4 || got > every*5/4 {
			t.Fatalf("resyncAfter(%v) = %v, outside [%v, %v]", every, got, every*3/4, every*5/4)
		}
		seen[got] = true
	}
	if len(seen) < 100 {
		t.Fatalf("1000 draws gave %d distinct lives: streams started together would resync together", len(seen))
	}
}

// removalStripper is a server stream interceptor that loses the removal of
// one name once, as go-control-plane's delta server does when its cache
// sends a response while the server handles a request (resync.go): the
// server believes the client was told, the client never is.
type removalStripper struct {
	mu       sync.Mutex
	name     string // armed: strip this name from the next removal
	stripped int
}

func (s *removalStripper) arm(name string) {
	s.mu.Lock()
	s.name = name
	s.mu.Unlock()
}

func (s *removalStripper) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stripped
}

func (s *removalStripper) intercept(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, strippingStream{ServerStream: ss, s: s})
}

type strippingStream struct {
	grpc.ServerStream
	s *removalStripper
}

func (st strippingStream) SendMsg(m any) error {
	resp, ok := m.(*discoverygrpc.DeltaDiscoveryResponse)
	if !ok {
		return st.ServerStream.SendMsg(m)
	}
	st.s.mu.Lock()
	if name := st.s.name; name != "" && slices.Contains(resp.GetRemovedResources(), name) {
		resp = proto.Clone(resp).(*discoverygrpc.DeltaDiscoveryResponse)
		resp.RemovedResources = slices.DeleteFunc(resp.RemovedResources, func(n string) bool { return n == name })
		st.s.name = ""
		st.s.stripped++
	}
	st.s.mu.Unlock()
	return st.ServerStream.SendMsg(resp)
}

// resyncClass attaches a class to a client of cp that resyncs every
// resync (0: never), and subscribes a wildcard Cluster shard to log.
func resyncClass(t *testing.T, cp *xdstest.ControlPlane, delta bool, resync time.Duration, log *servedLog) *Client {
	t.Helper()
	c, err := New(Config{Address: cp.Addr, RelayID: "relay-under-test", Delta: delta, Resync: resync,
		Backoff: Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	class := attachClass(t, c, &corev3.Node{Id: "downstream-1", Cluster: "class-a"})
	subscribe(t, class, xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, log)
	log.await(t, "a, b and c", holds("a", "b", "c"))
	return c
}

// A removal the control plane loses is served until the class stream
// resyncs: the new stream claims b, which go-control-plane then reports
// removed. Without resync the class serves b for good.
func TestResyncRestoresARemovalTheUpstreamLost(t *testing.T) {
	for _, c := range []struct {
		name   string
		resync time.Duration
	}{{"resync", 300 * time.Millisecond}, {"never", 0}} {
		t.Run(c.name, func(t *testing.T) {
			strip := &removalStripper{}
			cp, err := xdstest.StartControlPlane(xdstest.CPOptions{Cache: xdstest.Snapshot,
				ServerOptions: []grpc.ServerOption{grpc.StreamInterceptor(strip.intercept)}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cp.Stop)
			setClusters(t, cp, "a", "b", "c")
			log := newServedLog()
			client := resyncClass(t, cp, true, c.resync, log)

			strip.arm("b")
			deleteCluster(t, cp, "b")
			awaitStripped(t, strip)
			if c.resync > 0 {
				log.await(t, "b removed after a resync", holds("a", "c"))
				if n := resyncs(client); n == 0 {
					t.Fatal("b was removed without a resync")
				}
				return
			}
			// A fence instead of a wait: a change made after the lost
			// removal comes on the same stream after anything the server
			// sent before it, so once d is served the removal of b would
			// have been too.
			setClusters(t, cp, "d")
			hasD := func(names []string) bool { return slices.Contains(names, "d") }
			served := log.await(t, "d, the fence", hasD)
			if slices.ContainsFunc(served, holds("a", "c")) || !slices.Contains(served[slices.IndexFunc(served, hasD)], "b") {
				t.Fatalf("b removed without a resync: the lost removal was not lost (served %v)", served)
			}
		})
	}
}

// A resync sends clients nothing when nothing changed: the class passes on
// only what differs from what it holds, over either protocol.
func TestResyncSendsNothingWhenNothingChanged(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(map[bool]string{false: "sotw", true: "delta"}[delta], func(t *testing.T) {
			cp, err := xdstest.StartControlPlane(xdstest.CPOptions{Cache: xdstest.Snapshot})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cp.Stop)
			setClusters(t, cp, "a", "b", "c")
			log := newServedLog()
			client := resyncClass(t, cp, delta, 100*time.Millisecond, log)
			log.mu.Lock()
			before := len(log.served)
			log.mu.Unlock()

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for resyncs(client) < 3 {
				if ctx.Err() != nil {
					t.Fatalf("%d resyncs in 10 s at a 100 ms interval", resyncs(client))
				}
				time.Sleep(10 * time.Millisecond) // polling the client's status, bounded above
			}
			deleteCluster(t, cp, "b") // a change after the resyncs still arrives
			log.await(t, "b removed", holds("a", "c"))
			log.mu.Lock()
			defer log.mu.Unlock()
			if got := log.served[before:]; len(got) != 1 {
				t.Fatalf("served %v across 3 resyncs and one change, want only the change", got)
			}
		})
	}
}

func setClusters(t *testing.T, cp *xdstest.ControlPlane, names ...string) {
	t.Helper()
	var rs []types.Resource
	for _, n := range names {
		rs = append(rs, xdstest.Resource(xdstype.Cluster.URL, n, 1))
	}
	if err := cp.Set(xdstype.Cluster.URL, rs...); err != nil {
		t.Fatal(err)
	}
}

func deleteCluster(t *testing.T, cp *xdstest.ControlPlane, name string) {
	t.Helper()
	if err := cp.Delete(xdstype.Cluster.URL, name); err != nil {
		t.Fatal(err)
	}
}

func awaitStripped(t *testing.T, s *removalStripper) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.count() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the control plane never sent the removal to lose")
		}
		time.Sleep(5 * time.Millisecond) // polling the interceptor, bounded above
	}
}

// resyncs is the client's resync restarts, over its classes.
func resyncs(c *Client) int {
	n := 0
	for _, st := range c.Status() {
		n += st.Restarts.Resync
	}
	return n
}
