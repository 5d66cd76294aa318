package upstream

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// The pool learns the peer's SETTINGS_MAX_CONCURRENT_STREAMS under TLS,
// and puts a class over it on a second connection.
func TestStreamLimitLearnedUnderTLS(t *testing.T) {
	ca := xdstest.NewCA(t, "test-ca")
	certPEM, keyPEM := ca.Issue(t, 2, "localhost")
	pair := xdstest.KeyPair(t, certPEM, keyPEM)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}})), grpc.MaxConcurrentStreams(1))
	srv := scriptedADS{newScriptedServer[discoverygrpc.DiscoveryRequest, discoverygrpc.DiscoveryResponse]()}
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, srv)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); <-done })

	c, err := New(Config{Address: lis.Addr().String(), RelayID: "relay-under-test", Backoff: Backoff{Initial: time.Hour, Max: time.Hour},
		Creds: credentials.NewTLS(ca.ClientTLS("localhost"))}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	for _, cluster := range []string{"class-a", "class-b"} {
		class := attachClass(t, c, &corev3.Node{Id: "downstream-" + cluster, Cluster: cluster})
		subscribe(t, class, xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, nopWatcher{})
		srv.next(t).request(t) // each class's stream is served
	}
	if max, known := c.pool.conns[0].limit.get(); !known || max != 1 {
		t.Fatalf("learned limit = %d (%v), want 1", max, known)
	}
	if n := c.pool.connections(); n != 2 {
		t.Fatalf("%d connections for 2 classes at 1 stream each, want 2", n)
	}
}

// The sniffer parses a SETTINGS frame however the reads split it.
func TestSniffSettingsSplitReads(t *testing.T) {
	frame := []byte{0, 0, 12, frameSettings, 0, 0, 0, 0, 0, 0, 0x4, 0, 0, 0xff, 0xff, 0, settingMaxConcurrent, 0, 0, 0, 100}
	for split := 1; split < len(frame); split++ {
		l := &streamLimit{}
		c := &sniffConn{limit: l}
		c.feed(frame[:split])
		c.feed(frame[split:])
		if max, known := l.get(); !known || max != 100 {
			t.Fatalf("split at %d: learned %d (%v), want 100", split, max, known)
		}
	}
}
