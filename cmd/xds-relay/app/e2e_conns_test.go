package app_test

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// S4: with the fd limit such that server.max_connections defaults to 3,
// three connections that finished the HTTP/2 handshake and sit idle keep a
// fourth out (closed at once, counted by the key); the admin port still
// answers; once an idle one goes, an honest client connects and is served.
func TestConnectionCapKeepsAdminAndHonestClients(t *testing.T) {
	// All from 127.0.0.1: the per-peer share (a tenth of 3) is off.
	f := startFixture(t, "class-a", clusters("c1"), withApp(app.WithFDLimit(256+3)),
		withConfig(func(c *app.Config) { c.Limits.MaxConnectionsPerPeer = -1 }))
	addr := f.relay.Addr()
	var idle []net.Conn
	for range 3 {
		idle = append(idle, handshaken(t, addr))
	}
	connections := func() float64 { v, _ := scrape(t, f.ctx, f.relay, "xds_relay_downstream_connections"); return v }
	eventually(t, f.ctx, "3 connections open", func() bool { return connections() == 3 })

	past := dialTCP(t, addr)
	_ = past.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := past.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("a connection past the cap: read %d bytes, %v; want it closed at once", n, err)
	}
	series := `xds_relay_peer_refusals_total{limit="server.max_connections"}`
	if v, ok := scrape(t, f.ctx, f.relay, series); !ok || v != 1 {
		t.Errorf("/metrics: %s = %v (%v), want 1", series, v, ok)
	}
	if _, code := get(t, f.ctx, "http://"+f.relay.AdminAddr()+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz answered %d with the xDS listener full, want 200", code)
	}

	_ = idle[0].Close()
	eventually(t, f.ctx, "an idle connection gone", func() bool { return connections() == 2 })
	c := f.sotw(t, "honest", "class-a")
	if got := clusterNames(t, c.Next(10*time.Second)); len(got) != 1 || got[0] != "c1" {
		t.Fatalf("honest client got %v, want [c1]", got)
	}
}

func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// handshaken is a connection that sent the HTTP/2 preface and SETTINGS and
// read the relay's SETTINGS: a client that connected and went quiet.
func handshaken(t *testing.T, addr string) net.Conn {
	t.Helper()
	c := dialTCP(t, addr)
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	hdr := make([]byte, 9)
	if _, err := io.ReadFull(c, hdr); err != nil || hdr[3] != 0x4 {
		t.Fatalf("no SETTINGS from the relay: %v %x", err, hdr)
	}
	_ = c.SetReadDeadline(time.Time{})
	return c
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
