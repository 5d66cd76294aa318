package relay

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
)

// S11: one peer at its share of streams is refused, naming the key, while
// another peer is still served; the global limit is far away.
func TestPeerStreamShareLeavesOthersServed(t *testing.T) {
	h := newPeerHarness(t, 0, PeerLimits{MaxStreams: 3})
	greedy := h.dialFrom(t, "127.0.0.1")
	for range 3 { // streams that never send a request
		h.open(t, greedy, "")
	}
	eventually(t, "3 streams open", func() bool { return h.srv.StreamCount() == 3 })
	err := h.open(t, greedy, "").recvError()
	wantStatus(t, err, codes.ResourceExhausted, KeyMaxStreamsPerPeer)
	h.served(t, h.dialFrom(t, "127.0.0.2"), "class-b")
}

// S11: a peer that created its share of classes within the window is
// refused a new one, naming the key; it may still join a class that exists,
// and another peer may still create one.
func TestPeerNewClassShare(t *testing.T) {
	h := newPeerHarness(t, 0, PeerLimits{NewClasses: 2, NewClassesWindow: time.Hour})
	greedy := h.dialFrom(t, "127.0.0.1")
	h.served(t, greedy, "throwaway-1")
	h.served(t, greedy, "throwaway-2")
	h.refused(t, greedy, "throwaway-3", KeyNewClassesPerPeer)
	h.served(t, greedy, "throwaway-1") // joining costs nothing
	h.served(t, h.dialFrom(t, "127.0.0.2"), "real-class")
}

// S12: a peer reopening streams faster than its rate has the excess
// refused before its request is read, naming the key; another peer is
// served. The streams here carry a delta request with initial versions, as
// the reconnect loop's did.
func TestPeerStreamRateRefusesReconnectLoop(t *testing.T) {
	h := newPeerHarness(t, 0, PeerLimits{StreamsPerSecond: 0.001, StreamBurst: 3})
	loop := h.dialFrom(t, "127.0.0.1")
	initial := map[string]string{}
	for i := range 1000 {
		initial["cluster-"+string(rune('a'+i%26))+string(rune('a'+i/26))] = "v1"
	}
	for i := range 4 {
		c := h.openDeltaClient(t, loop, "")
		// The last send may see the refusal already.
		_ = c.s.Send(&deltaRequest{Node: h.node, TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: initial})
		if i < 3 {
			eventually(t, "stream served", func() bool { return h.srv.StreamCount() == 1 })
			c.close()
			eventually(t, "stream ended", func() bool { return h.srv.StreamCount() == 0 })
			continue
		}
		wantStatus(t, c.recvError(), codes.ResourceExhausted, KeyStreamsPerPeerRate)
	}
	h.served(t, h.dialFrom(t, "127.0.0.2"), "class-b")
}

// A peer at its share of connections has the next one closed at once;
// another peer still connects and is served.
func TestPeerConnectionShare(t *testing.T) {
	h := newPeerHarness(t, 0, PeerLimits{MaxConnections: 2})
	for range 2 {
		dialFrom(t, "127.0.0.1", h.addr)
	}
	eventually(t, "2 connections", func() bool { return h.peers.Stats().Connections == 2 })
	wantClosed(t, dialFrom(t, "127.0.0.1", h.addr))
	if got := h.peers.Stats().Refused[1]; got != 1 {
		t.Errorf("refused for %s: %d, want 1", KeyMaxConnectionsPerPeer, got)
	}
	h.served(t, h.dialFrom(t, "127.0.0.2"), "class-b")
}

// S4: past the relay's cap, connections that finished the HTTP/2
// handshake and sit idle keep the next one out (closed at once, counted);
// once one goes, an honest client connects.
func TestConnectionCapClosesPastIt(t *testing.T) {
	h := newPeerHarness(t, 3, PeerLimits{})
	var idle []net.Conn
	for i := range 3 {
		idle = append(idle, dialHTTP2(t, "127.0.0.1", h.addr))
		eventually(t, "connection counted", func() bool { return h.peers.Stats().Connections == int64(i+1) })
	}
	wantClosed(t, dialFrom(t, "127.0.0.2", h.addr))
	if got := h.peers.Stats().Refused[0]; got != 1 {
		t.Errorf("refused for %s: %d, want 1", KeyMaxConnections, got)
	}
	_ = idle[0].Close()
	eventually(t, "an idle connection gone", func() bool { return h.peers.Stats().Connections == 2 })
	h.served(t, h.dialFrom(t, "127.0.0.2"), "class-b")
}

// dialRaw opens a TCP connection from the loopback address from.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: recvTimeout}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// dialHTTP2 opens a connection that completes the HTTP/2 handshake (the
// client preface and an empty SETTINGS frame), reads the server's SETTINGS,
// then sits idle.
func dialHTTP2(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	c := dialFrom(t, from, addr)
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(recvTimeout))
	hdr := make([]byte, 9)
	if _, err := io.ReadFull(c, hdr); err != nil || hdr[3] != 0x4 {
		t.Fatalf("no SETTINGS from the relay: %v %x", err, hdr)
	}
	_ = c.SetReadDeadline(time.Time{})
	return c
}

// wantClosed requires the relay to close c without a byte.
func wantClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(recvTimeout))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("connection not closed by the relay: read %d bytes, %v", n, err)
	}
}

// The table frees a peer's entry when it holds nothing and its buckets are
// full again; at its cap a new peer evicts an idle one, or is refused
// naming limits.max_peers when every entry holds a connection.
func TestPeerTableBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewPeers(PeerLimits{MaxPeers: 2, StreamsPerSecond: 1, StreamBurst: 1})
	p.now = func() time.Time { return now }
	addr := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	done, err := p.openStream(addr("10.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	done()
	if got := p.Stats().Peers; got != 1 {
		t.Fatalf("%d peers after a stream whose bucket is not full, want 1 (it remembers the start)", got)
	}
	now = now.Add(2 * time.Second)
	c1, err := p.openConn(addr("10.0.0.2:1"))
	if err != nil {
		t.Fatal(err)
	}
	c1()
	if got := p.Stats().Peers; got != 0 {
		t.Fatalf("%d peers once nothing is held and the buckets refilled, want 0", got)
	}
	held := []func(){}
	for _, a := range []string{"10.0.0.3:1", "10.0.0.4:1"} {
		d, err := p.openConn(addr(a))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, d)
	}
	_, err = p.openConn(addr("10.0.0.5:1"))
	wantStatus(t, err, codes.ResourceExhausted, KeyMaxPeers)
	held[0]()
	if _, err := p.openConn(addr("10.0.0.5:1")); err != nil {
		t.Fatalf("a peer at the cap with an idle entry: %v", err)
	}
}

// An IPv6 peer is its /64; an IPv4-mapped address is its IPv4 address.
func TestPeerOf(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"10.1.2.3:80", "10.1.2.3"},
		{"[::ffff:10.1.2.3]:80", "10.1.2.3"},
		{"[2001:db8:1:2:3:4:5:6]:80", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:80", "fe80::/64"},
	} {
		got, ok := peerOf(net.TCPAddrFromAddrPort(netip.MustParseAddrPort(tc.addr)))
		if !ok || peerString(got) != tc.want {
			t.Errorf("peerOf(%s) = %v %v, want %s", tc.addr, peerString(got), ok, tc.want)
		}
	}
	if _, ok := peerOf(&net.UnixAddr{Name: "/tmp/x", Net: "unix"}); ok {
		t.Error("a Unix address is a peer")
	}
}

// S11 over REST: a poll that would create a class past the peer's share is
// answered 429 naming the key; a poll of a class the peer made is served.
func TestPeerNewClassShareREST(t *testing.T) {
	h := newPeerHarness(t, 0, PeerLimits{NewClasses: 1, NewClassesWindow: time.Hour})
	ts := restServer(t, h.harness, 0)
	req := func(class string) *request {
		return &request{Node: &corev3.Node{Id: "rest", Cluster: class}, TypeUrl: RuntimeType, ResourceNames: []string{"R"}}
	}
	if res := poll(t, ts, RuntimeType, req("rest-1")); res.status == http.StatusTooManyRequests {
		t.Fatalf("first class refused: %s", res.body)
	}
	res := poll(t, ts, RuntimeType, req("rest-2"))
	if res.status != http.StatusTooManyRequests || !strings.Contains(string(res.body), KeyNewClassesPerPeer) {
		t.Fatalf("second class: %d %s, want 429 naming %s", res.status, res.body, KeyNewClassesPerPeer)
	}
	if res := poll(t, ts, RuntimeType, req("rest-1")); res.status == http.StatusTooManyRequests {
		t.Fatalf("a class the peer made refused: %s", res.body)
	}
}

// A trusted peer (limits.trusted_peers: the relays of a tier below) takes
// no share: past every per-peer limit it is still admitted and leaves no
// entry, while an untrusted address, even in the trusted address's IPv6
// /64, is held to its share.
func TestTrustedPeersTakeNoShare(t *testing.T) {
	p := NewPeers(PeerLimits{MaxStreams: 1, MaxConnections: 1, NewClasses: 1, NewClassesWindow: time.Hour,
		StreamsPerSecond: 1, StreamBurst: 1,
		Trusted: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("fd00::1/128")}})
	addr := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	for _, a := range []string{"10.1.2.3:1", "[::ffff:10.1.2.3]:1", "[fd00::1]:1"} {
		for i := range 3 {
			if _, err := p.openStream(addr(a)); err != nil {
				t.Fatalf("%s: stream %d of a trusted peer: %v", a, i, err)
			}
			if _, err := p.openConn(addr(a)); err != nil {
				t.Fatalf("%s: connection %d of a trusted peer: %v", a, i, err)
			}
			if err := p.newClass(addr(a)); err != nil {
				t.Fatalf("%s: class %d of a trusted peer: %v", a, i, err)
			}
		}
	}
	if got := p.Stats().Peers; got != 0 {
		t.Fatalf("%d entries for trusted peers, want 0", got)
	}
	for _, a := range []string{"10.2.0.1:1", "[fd00::2]:1"} {
		if _, err := p.openStream(addr(a)); err != nil {
			t.Fatalf("%s: first stream: %v", a, err)
		}
		_, err := p.openStream(addr(a))
		wantStatus(t, err, codes.ResourceExhausted, KeyMaxStreamsPerPeer)
	}
}
