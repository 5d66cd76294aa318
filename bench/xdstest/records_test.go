package xdstest

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// TestControlPlaneRecordsStreams checks what the fixture records of the
// streams it serves: open streams, the node of each stream's first request,
// each delta stream's first request per type and the delta responses sent.
func TestControlPlaneRecordsStreams(t *testing.T) {
	cp, err := StartControlPlane(CPOptions{Cache: Snapshot})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	if err := cp.Set(ClusterType, Resource(ClusterType, "a", 1)); err != nil {
		t.Fatal(err)
	}
	sotw, err := Dial(cp.Addr, Options{Node: &corev3.Node{Id: "s"}, ADS: true})
	if err != nil {
		t.Fatal(err)
	}
	delta, err := Dial(cp.Addr, Options{Node: &corev3.Node{Id: "d"}, ADS: true, Delta: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := sotw.Subscribe(ClusterType, Sub{Wildcard: true, Legacy: true}); err != nil {
		t.Fatal(err)
	}
	if err := delta.Subscribe(ClusterType, Sub{Names: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, sotw, ClusterType, map[string]int{"a": 1})
	waitHeld(t, delta, ClusterType, map[string]int{"a": 1})

	if st := cp.Stats(); st.Open != 2 || st.Streams != 1 || st.DeltaStreams != 1 {
		t.Errorf("stats %+v, want 2 open, 1 SotW and 1 delta stream", st)
	}
	var ids []string
	for _, n := range cp.Nodes() {
		ids = append(ids, n.GetId())
	}
	if slices.Sort(ids); !slices.Equal(ids, []string{"d", "s"}) {
		t.Errorf("nodes %v, want [d s]", ids)
	}
	if first := cp.FirstDelta(ClusterType); len(first) != 1 || !slices.Equal(first[0].GetResourceNamesSubscribe(), []string{"a"}) {
		t.Errorf("first delta requests %v, want one subscribing [a]", first)
	}
	if sent := cp.DeltaSent(); len(sent) != 1 || len(sent[0].GetResources()) != 1 {
		t.Errorf("delta responses sent %v, want one with a", sent)
	}

	sotw.Close()
	delta.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for cp.Stats().Open != 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("%d streams still open after the clients closed", cp.Stats().Open)
		case <-time.After(10 * time.Millisecond): // polling the fixture's counter
		}
	}
}

// TestCA checks a server certificate of the CA is trusted under its name
// and a client certificate of another CA is refused.
func TestCA(t *testing.T) {
	ca, other := NewCA(t, "ca"), NewCA(t, "other")
	certPEM, keyPEM := ca.Issue(t, 7, "server.test", "127.0.0.1")
	server := KeyPair(t, certPEM, keyPEM)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{server}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(), MinVersion: tls.VersionTLS12,
	})))
	addr := ServeGRPC(t, srv)
	dir := t.TempDir()
	_, _, good := ca.IssueFiles(t, dir, "good", "spiffe://test/good")
	_, _, bad := other.IssueFiles(t, dir, "bad", "spiffe://test/bad")
	handshake := func(cert tls.Certificate) error {
		cfg := ca.ClientTLS("server.test", cert)
		cfg.NextProtos = []string{"h2"} // gRPC requires ALPN
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1)) // the server's settings, or its alert
		return err
	}
	if err := handshake(good); err != nil {
		t.Errorf("client of the CA: %v", err)
	}
	if err := handshake(bad); err == nil {
		t.Error("client of another CA: accepted")
	}
}

// A control plane listens below the ephemeral port range, so Up can take
// its port again after Down: an outgoing connection could otherwise take it
// as its local port meanwhile (the conformance engine's "listen again:
// address already in use", once in 90,000 schedules).
func TestControlPlanePortOutsideEphemeralRange(t *testing.T) {
	low := ephemeralPortStart()
	if low <= 10000 {
		t.Skipf("the ephemeral range starts at %d: no room below it", low)
	}
	cp, err := StartControlPlane(CPOptions{Cache: Snapshot})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	_, p, _ := net.SplitHostPort(cp.Addr)
	if port, _ := strconv.Atoi(p); port >= low {
		t.Fatalf("control plane on port %d, inside the ephemeral range from %d", port, low)
	}
	if err := cp.Restart(); err != nil {
		t.Fatalf("restart on its port: %v", err)
	}
}
