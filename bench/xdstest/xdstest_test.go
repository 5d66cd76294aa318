package xdstest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gens decodes a held state into name -> generation.
func gens(t *testing.T, held map[string]*anypb.Any) map[string]int {
	t.Helper()
	out := map[string]int{}
	for n, a := range held {
		name, gen, err := Generation(a)
		if err != nil || name != n {
			t.Fatalf("held %q: %s %v", n, name, err)
		}
		out[n] = gen
	}
	return out
}

func waitHeld(t *testing.T, c *Client, typeURL string, want map[string]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ok := c.WaitFor(ctx, func(c *Client) bool { return maps.Equal(gens(t, c.Held(typeURL)), want) })
	if !ok {
		t.Fatalf("%s holds %v, want %v (err %v, log %+v)", Short(typeURL), gens(t, c.Held(typeURL)), want, c.Err(), c.Log())
	}
}

// startClustersAB starts a control plane with a cache of kind, serving
// clusters a and b (generation 1) until the test ends.
func startClustersAB(t *testing.T, kind string) *ControlPlane {
	t.Helper()
	cp, err := StartControlPlane(CPOptions{Cache: kind})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	if err := cp.Set(ClusterType, Resource(ClusterType, "a", 1), Resource(ClusterType, "b", 1)); err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestClientAgainstControlPlane runs the client in its four variants
// directly against each cache kind: wildcard and named subscriptions, a
// change, a deletion, a NACK and a reconnect.
func TestClientAgainstControlPlane(t *testing.T) {
	for _, kind := range []string{Snapshot, Linear} {
		for _, delta := range []bool{false, true} {
			for _, ads := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/delta=%v/ads=%v", kind, delta, ads), func(t *testing.T) {
					cp := startClustersAB(t, kind)
					if err := cp.Set(EndpointType, Resource(EndpointType, "a", 1), Resource(EndpointType, "b", 1)); err != nil {
						t.Fatal(err)
					}
					c, err := Dial(cp.Addr, Options{Node: &corev3.Node{Id: "n", Cluster: "c"}, Delta: delta, ADS: ads})
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					if err := c.Subscribe(ClusterType, Sub{Wildcard: true, Legacy: true}); err != nil {
						t.Fatal(err)
					}
					if err := c.Subscribe(EndpointType, Sub{Names: []string{"a"}}); err != nil {
						t.Fatal(err)
					}
					waitHeld(t, c, ClusterType, map[string]int{"a": 1, "b": 1})
					waitHeld(t, c, EndpointType, map[string]int{"a": 1})
					nctx, ncancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer ncancel()
					if e, err := c.Next(nctx); err != nil || e.Response == nil || e.NACKed {
						t.Fatalf("Next: %+v, %v", e, err)
					}

					c.NACK(ClusterType, 1)
					if err := cp.Set(ClusterType, Resource(ClusterType, "a", 2)); err != nil {
						t.Fatal(err)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					if !c.WaitFor(ctx, func(c *Client) bool { _, n := c.Counts(ClusterType); return n == 1 }) {
						t.Fatal("no NACK")
					}
					// go-control-plane re-sends a NACKed version at once, so
					// what is held next is not asserted; the NACK is.
					var nacked []string
					for _, e := range c.Log() {
						if e.NACKed {
							nacked = e.Names
						}
					}
					if !slices.Contains(nacked, "a") {
						t.Fatalf("NACKed response held %v, want a", nacked)
					}
					if err := cp.Set(ClusterType, Resource(ClusterType, "a", 3)); err != nil {
						t.Fatal(err)
					}
					waitHeld(t, c, ClusterType, map[string]int{"a": 3, "b": 1})
					// The accepted word on a ends its rejection; State reads
					// all three at once.
					if st := c.State(ClusterType); !maps.Equal(gens(t, st.Held), map[string]int{"a": 3, "b": 1}) ||
						len(st.Rejected) != 0 || !st.Sub.Wildcard || !st.Sub.Legacy || len(st.Sub.Names) != 0 {
						t.Fatalf("State: sub %v, held %v, rejected %v; want legacy[], a:3 b:1, none", st.Sub, gens(t, st.Held), st.Rejected)
					}
					if err := cp.Delete(ClusterType, "b"); err != nil {
						t.Fatal(err)
					}
					waitHeld(t, c, ClusterType, map[string]int{"a": 3})

					if err := c.Subscribe(EndpointType, Sub{Names: []string{"b"}}); err != nil {
						t.Fatal(err)
					}
					waitHeld(t, c, EndpointType, map[string]int{"b": 1})
					if err := c.Reconnect(); err != nil {
						t.Fatal(err)
					}
					if err := cp.Set(EndpointType, Resource(EndpointType, "b", 2)); err != nil {
						t.Fatal(err)
					}
					waitHeld(t, c, EndpointType, map[string]int{"b": 2})
					if err := c.Err(); err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
}

func TestSubString(t *testing.T) {
	for _, tc := range []struct {
		s    Sub
		want string
	}{
		{Sub{Wildcard: true, Legacy: true}, "legacy[]"},
		{Sub{Wildcard: true}, "[*]"},
		{Sub{Wildcard: true, Names: []string{"a"}}, "[* a]"},
		{Sub{Names: []string{"a", "b"}}, "[a b]"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("%#v: %q, want %q", tc.s, got, tc.want)
		}
	}
}

// TestClientWire checks what the client puts on the wire: the legacy
// wildcard as an empty list, "*" once names were sent, and a delta
// reconnect's initial_resource_versions.
func TestClientWire(t *testing.T) {
	cp := startClustersAB(t, Linear)
	node := &corev3.Node{Id: "n", Cluster: "c"}
	sotw, err := Dial(cp.Addr, Options{Node: node, ADS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sotw.Close()
	for _, s := range []Sub{{Wildcard: true, Legacy: true}, {Names: []string{"a"}}, {Wildcard: true, Legacy: true}} {
		if err := sotw.Subscribe(ClusterType, s); err != nil {
			t.Fatal(err)
		}
	}
	waitHeld(t, sotw, ClusterType, map[string]int{"a": 1, "b": 1})
	// Held already after the first answer: the later requests may still be
	// on their way to the control plane. Poll until the last is in.
	var lists []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		reqs, _ := cp.Requests()
		lists = lists[:0]
		for _, r := range reqs {
			if r.GetResponseNonce() == "" || len(lists) == 0 || fmt.Sprint(r.GetResourceNames()) != lists[len(lists)-1] {
				lists = append(lists, fmt.Sprint(r.GetResourceNames()))
			}
		}
		if slices.Contains(lists, "[*]") || time.Now().After(deadline) {
			break
		}
	}
	if want := []string{"[]", "[a]", "[*]"}; !slices.Equal(lists, want) {
		t.Errorf("SotW resource_names sent %v, want %v", lists, want)
	}

	delta, err := Dial(cp.Addr, Options{Node: node, Delta: true})
	if err != nil {
		t.Fatal(err)
	}
	defer delta.Close()
	if err := delta.Subscribe(ClusterType, Sub{Names: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, delta, ClusterType, map[string]int{"a": 1})
	held := delta.Versions(ClusterType)
	if err := delta.Reconnect(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var last map[string]string
	for ctx.Err() == nil {
		_, dreqs := cp.Requests()
		for _, r := range dreqs {
			if r.GetInitialResourceVersions() != nil {
				last = r.GetInitialResourceVersions()
			}
		}
		if last != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond): // polling the fixture's request log
		}
	}
	if !maps.Equal(last, held) || len(held) != 1 {
		t.Errorf("reconnect sent initial_resource_versions %v, want %v", last, held)
	}
}

// fakeADS is a SotW ADS server that hands each request to the test and sends
// only the responses the test writes.
type fakeADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	reqs  chan *discoveryv3.DiscoveryRequest
	resps chan *discoveryv3.DiscoveryResponse
}

func (f *fakeADS) StreamAggregatedResources(st discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			select {
			case f.reqs <- r:
			case <-st.Context().Done():
				return
			}
		}
	}()
	for {
		select {
		case r := <-f.resps:
			if err := st.Send(r); err != nil {
				return err
			}
		case <-st.Context().Done():
			return nil
		}
	}
}

func (f *fakeADS) request(t *testing.T) *discoveryv3.DiscoveryRequest {
	t.Helper()
	select {
	case r := <-f.reqs:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no request")
		return nil
	}
}

// A SotW client that unsubscribed from part of a state claims no version on
// the first request of the type on a new stream, whether Reconnect sends it
// or a later Subscribe does (Reconnect sends nothing for a type subscribed
// to nothing): a server that takes the claim at its word (the relay, for a
// wildcard Cluster state at the version it would send) sends nothing, and
// the client would hold nothing (conformance chain/sotw seed 500083).
func TestSotWClaimsNoVersionAfterDroppingAcrossReconnect(t *testing.T) {
	f := &fakeADS{reqs: make(chan *discoveryv3.DiscoveryRequest, 16), resps: make(chan *discoveryv3.DiscoveryResponse, 1)}
	srv := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(srv, f)
	addr := ServeGRPC(t, srv)
	c, err := Dial(addr, Options{Node: &corev3.Node{Id: "n", Cluster: "c"}, ADS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Subscribe(ClusterType, Sub{Names: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	f.request(t)
	a, err := anypb.New(Resource(ClusterType, "a", 1))
	if err != nil {
		t.Fatal(err)
	}
	f.resps <- &discoveryv3.DiscoveryResponse{TypeUrl: ClusterType, VersionInfo: "v1", Nonce: "1", Resources: []*anypb.Any{a}}
	if ack := f.request(t); ack.GetVersionInfo() != "v1" || ack.GetResponseNonce() != "1" {
		t.Fatalf("want the ACK of v1, got %v", ack)
	}
	if err := c.Subscribe(ClusterType, Sub{}); err != nil { // nothing, after names: unanswered
		t.Fatal(err)
	}
	f.request(t)
	if err := c.Reconnect(); err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(ClusterType, Sub{Wildcard: true, Legacy: true}); err != nil {
		t.Fatal(err)
	}
	if r := f.request(t); r.GetVersionInfo() != "" || len(r.GetResourceNames()) != 0 || r.GetResponseNonce() != "" {
		t.Fatalf("first request of the new stream %v, want the legacy wildcard claiming no version: the client holds nothing", r)
	}
}
