package upstream

import (
	"context"
	"io"
	"maps"
	"slices"
	"sync/atomic"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// sendGate holds the relay's next delta request that unsubscribes names,
// once armed: it reports the attempt on entered and, given an error on
// release, fails it with that error (as a send to an upstream that went
// away does), or sends it given nil.
type sendGate struct {
	armed   atomic.Bool
	entered chan struct{} // buffered 1
	release chan error
}

func newSendGate() *sendGate {
	return &sendGate{entered: make(chan struct{}, 1), release: make(chan error, 1)}
}

func (g *sendGate) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return gatedStream{ClientStream: cs, gate: g}, nil
}

type gatedStream struct {
	grpc.ClientStream
	gate *sendGate
}

func (s gatedStream) SendMsg(m any) error {
	if r, ok := m.(*discoverygrpc.DeltaDiscoveryRequest); ok && len(r.GetResourceNamesUnsubscribe()) > 0 && s.gate.armed.CompareAndSwap(true, false) {
		s.gate.entered <- struct{}{}
		if err := <-s.gate.release; err != nil {
			return err
		}
	}
	return s.ClientStream.SendMsg(m)
}

// A name the class holds when its unsubscription is sent, and that a shard
// subscribes to again meanwhile, stays in the class (the shard is served from
// it). The next request for it must claim it in initial_resource_versions:
// go-control-plane reports a deletion only of what a stream claims, and
// forgets what a stream unsubscribed, so a "+[b]" would never be told b was
// deleted (conformance linear/delta seed 9: a deleted Cluster kept by a
// client). Two ways there: the unsubscription's send fails (the upstream
// went away; the class was never told) and the next stream asks for b; or
// it reaches the upstream, and the relay asks for b on a new stream.
func TestDeltaResubscribedDuringUnsubscriptionIsClaimed(t *testing.T) {
	for _, tc := range []struct {
		name string
		send error // what the unsubscription's send returns
		// the new stream: a reconnect (a failure), or a chosen restart
		reconnects int
		restarts   RestartCounts
	}{{"send-fails", io.EOF, 1, RestartCounts{}}, {"sent", nil, 0, RestartCounts{Claim: 1}}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, addr := startScriptedDelta(t)
			gate := newSendGate()
			c, class := newGatedDeltaClass(t, addr, gate)
			w := nopWatcher{}
			ab, ds := holdClustersAB(t, srv, class, w)

			gate.armed.Store(true)
			class.Unsubscribe(ab, w)
			<-gate.entered // the relay is sending -[a b]
			b := subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"b"}, false), w)
			if got := names(b); !slices.Equal(got, []string{"b"}) {
				t.Fatalf("[b] = %v, want [b] from the class's table", got)
			}
			gate.release <- tc.send
			if tc.send == nil {
				wantReq(t, ds.request(t), xdstype.Cluster.URL, nil, []string{"a", "b"})
			}

			// Not "+[b]" on this stream: a new stream claiming b.
			again := srv.next(t)
			r := again.request(t)
			wantReq(t, r, xdstype.Cluster.URL, []string{"b"}, nil)
			if got, want := r.GetInitialResourceVersions(), map[string]string{"b": "b1"}; !maps.Equal(got, want) {
				t.Fatalf("initial_resource_versions = %v, want %v: the class holds b", got, want)
			}
			if st := c.Status()[0]; st.Reconnects != tc.reconnects || st.Restarts != tc.restarts {
				t.Fatalf("status: %d reconnects, restarts %+v; want %d and %+v", st.Reconnects, st.Restarts, tc.reconnects, tc.restarts)
			}
			// b was deleted meanwhile: the upstream reports it for the claim.
			again.send(t, &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: xdstype.Cluster.URL, Nonce: "m1", RemovedResources: []string{"b"}})
			if ack := again.request(t); ack.GetResponseNonce() != "m1" {
				t.Fatalf("want the ACK of m1, got %v", ack)
			}
			if got := names(b); len(got) != 0 {
				t.Fatalf("[b] = %v after b's removal, want nothing", got)
			}
		})
	}
}

// newGatedDeltaClass starts a delta upstream client whose requests pass
// gate, and returns it and the class of one node.
func newGatedDeltaClass(t *testing.T, addr string, gate *sendGate) (*Client, *shard.Class) {
	t.Helper()
	c, err := New(Config{Address: addr, RelayID: "relay-under-test", Backoff: fastBackoff, Delta: true,
		DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(gate.intercept)}}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, attachClass(t, c, &corev3.Node{Id: "downstream-1", Cluster: "class-a"})
}
