package relay

import (
	"context"
	"net"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/clientlog"
)

// peerHarness is a relay whose server and listener apply per-peer limits
// and a connection cap, served on 127.0.0.1; clients dial from any
// loopback address (127.0.0.2 is another peer).
type peerHarness struct {
	*harness
	peers *Peers
}

func newPeerHarness(t *testing.T, maxConns int, limits PeerLimits) *peerHarness {
	t.Helper()
	classifier, err := shard.NewClassifier([]shard.Rule{{Field: "cluster"}})
	if err != nil {
		t.Fatal(err)
	}
	registry := shard.NewRegistryWith(classifier, nil, shard.Lifecycle{})
	peers := NewPeers(limits)
	log := zaptest.NewLogger(t)
	srv := NewServer(registry, log, Options{Peers: peers})
	gate := NewConnGate(maxConns, peers, log, clientlog.NewGate(20, 1024))
	t.Cleanup(func() { eventually(t, "streams released", func() bool { return srv.StreamCount() == 0 }) })
	g := grpc.NewServer(append(ServerOptions(), grpc.WaitForHandlers(true))...)
	srv.Register(g)
	addr := xdstest.ServeGRPC(t, g, gate.Listener, srv.TrackConnections)
	h := &harness{t: t, registry: registry, srv: srv, addr: addr, node: &corev3.Node{Id: "node-1", Cluster: "class-a"}}
	return &peerHarness{harness: h, peers: peers}
}

// dialFrom is a client connection from the loopback address from.
func (h *peerHarness) dialFrom(t *testing.T, from string) *grpc.ClientConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// served requires a SotW stream on conn for a node of class to be answered.
func (h *peerHarness) served(t *testing.T, conn *grpc.ClientConn, class string) {
	t.Helper()
	c := h.open(t, conn, "")
	c.node = &corev3.Node{Id: "n-" + class, Cluster: class}
	c.subscribe(RuntimeType, "R")
	eventually(t, "class "+class+" made", func() bool { return h.registry.Has(class) })
	for _, cl := range h.registry.Classes() {
		if cl.Name == class {
			cl.Apply(RuntimeType, []*shard.Resource{resource(t, RuntimeType, "R", 1)}, false)
		}
	}
	if got := c.next(); got.TypeUrl != RuntimeType {
		t.Fatalf("got a %s response, want the runtime", got.TypeUrl)
	}
}

// refused requires a SotW stream on conn for a node of class to end with
// RESOURCE_EXHAUSTED naming key.
func (h *peerHarness) refused(t *testing.T, conn *grpc.ClientConn, class, key string) {
	t.Helper()
	c := h.open(t, conn, "")
	c.node = &corev3.Node{Id: "n-" + class, Cluster: class}
	c.wantRefused([]*request{{Node: c.node, TypeUrl: RuntimeType, ResourceNames: []string{"R"}}}, codes.ResourceExhausted, key)
}
