package relay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/xds-relay/xds-relay/shard"
)

// serveLimits serves a relay whose gRPC server applies limits, on loopback,
// and returns its address.
func serveLimits(t *testing.T, limits ConnLimits) string {
	t.Helper()
	classifier, err := shard.NewClassifier(nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(shard.NewRegistryWith(classifier, nil, shard.Lifecycle{}), zaptest.NewLogger(t), Options{})
	return serveRelay(t, srv, nil, limits.ServerOptions()...)
}

// rawConn is a raw HTTP/2 client connection: it sends what it is told to,
// valid or not. Reads time out after a bound, so no test hangs.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	fr *http2.Framer
}

// dialRaw connects; with preface, it sends the client preface and empty
// SETTINGS.
func dialRaw(t *testing.T, addr string, preface bool) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.SetReadDeadline(time.Now().Add(15 * time.Second)); err != nil {
		t.Fatal(err)
	}
	rc := &rawConn{t: t, c: c, fr: http2.NewFramer(c, c)}
	if preface {
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		if err := rc.fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
	}
	return rc
}

// serverEnd reads frames until the server ends the connection and returns
// how: its GOAWAY, or the read error (EOF, reset). It fails the test when
// stop says a frame shows the server kept going, or when the read deadline
// passes.
func (rc *rawConn) serverEnd(stop func(http2.Frame) string) (*http2.GoAwayFrame, error) {
	rc.t.Helper()
	for {
		f, err := rc.fr.ReadFrame()
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			rc.t.Fatalf("the server kept the connection open: %v", err)
		case err != nil:
			return nil, err
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			return ga, nil
		}
		if stop != nil {
			if why := stop(f); why != "" {
				rc.t.Fatal(why)
			}
		}
	}
}

// A connection that never sends the HTTP/2 preface is closed after
// server.connection_timeout, instead of holding a goroutine and a file
// descriptor for gRPC's 120 s.
func TestConnectionWithoutPrefaceIsClosed(t *testing.T) {
	addr := serveLimits(t, ConnLimits{ConnectionTimeout: 100 * time.Millisecond})
	rc := dialRaw(t, addr, false)
	// The server's SETTINGS, then the end of the connection.
	_, err := io.Copy(io.Discard, rc.c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept a connection without preface open: %v", err)
	}
}

// A client flooding CONTINUATION frames (one header block that never ends)
// loses its connection once it is past twice server.max_header_list_bytes
// (default 64 KiB, advertised in SETTINGS) instead of having 16 MiB
// accepted: a PING sent after 1 MiB of headers is never answered.
func TestContinuationFloodClosesConnection(t *testing.T) {
	addr := serveLimits(t, ConnLimits{})
	rc := dialRaw(t, addr, true)

	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "relay"},
		{":path", "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			t.Fatal(err)
		}
	}
	value := strings.Repeat("v", 4000)
	for i := 0; block.Len() < 1<<20; i++ {
		if err := enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-flood-%d", i), Value: value, Sensitive: true}); err != nil {
			t.Fatal(err)
		}
	}
	frags := block.Bytes()
	const frag = 8 << 10
	sent := 0
	err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: frags[:frag]})
	for off := frag; err == nil && off < len(frags); off += frag {
		end := min(off+frag, len(frags))
		err = rc.fr.WriteContinuation(1, end == len(frags), frags[off:end])
		sent = end
	}
	if err == nil {
		err = rc.fr.WritePing(false, [8]byte{1})
	}
	t.Logf("wrote %d bytes of one header block before the connection ended (write error: %v)", sent, err)
	var advertised uint32
	ga, rerr := rc.serverEnd(func(f http2.Frame) string {
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if v, ok := f.Value(http2.SettingMaxHeaderListSize); ok {
				advertised = v
			}
		case *http2.PingFrame:
			if f.IsAck() {
				return fmt.Sprintf("the server took %d bytes of header block and answered a PING after it", sent)
			}
		}
		return ""
	})
	t.Logf("server ended the connection: GOAWAY %v, read error %v", ga, rerr)
	if advertised != 64<<10 {
		t.Fatalf("SETTINGS_MAX_HEADER_LIST_SIZE = %d, want %d", advertised, 64<<10)
	}
	if ga != nil && ga.ErrCode != http2.ErrCodeProtocol {
		t.Fatalf("GOAWAY %v, want PROTOCOL_ERROR", ga.ErrCode)
	}
}

// A connection without streams is closed (GOAWAY) after
// server.max_connection_idle: completing the handshake and then doing
// nothing holds nothing for long.
func TestIdleConnectionIsClosed(t *testing.T) {
	addr := serveLimits(t, ConnLimits{MaxConnectionIdle: 100 * time.Millisecond})
	rc := dialRaw(t, addr, true)
	ga, err := rc.serverEnd(nil)
	if ga == nil {
		t.Fatalf("connection ended by %v, want a GOAWAY", err)
	}
}

// The server pings a connection that has been quiet for
// server.keepalive_time, so a dead peer is found and its streams freed.
func TestServerPingsQuietConnections(t *testing.T) {
	addr := serveLimits(t, ConnLimits{KeepaliveTime: time.Second}) // gRPC's floor
	rc := dialRaw(t, addr, true)
	for {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			t.Fatalf("no keepalive PING from the server: %v", err)
		}
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			return
		}
	}
}

// A client pinging faster than server.keepalive_min_time is sent GOAWAY
// (ENHANCE_YOUR_CALM, "too_many_pings").
func TestPingFloodIsRefused(t *testing.T) {
	addr := serveLimits(t, ConnLimits{})
	rc := dialRaw(t, addr, true)
	for i := range 10 {
		if err := rc.fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			break // the server already hung up
		}
	}
	ga, err := rc.serverEnd(nil)
	if ga == nil || ga.ErrCode != http2.ErrCodeEnhanceYourCalm || !strings.Contains(string(ga.DebugData()), "too_many_pings") {
		t.Fatalf("connection ended by GOAWAY %v (error %v), want ENHANCE_YOUR_CALM too_many_pings", ga, err)
	}
}
