package upstream

import (
	"context"
	"encoding/binary"
	"math"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"
)

// streamLimit is what one upstream connection learned of the streams its
// peer allows at once: the SETTINGS_MAX_CONCURRENT_STREAMS of the server's
// first SETTINGS frame (HTTP/2 requires the server's preface to be one).
// grpc-go does not expose it, so sniffCreds reads it from the bytes the
// connection receives, above the transport credentials (TLS included).
type streamLimit struct {
	onLearn func() // called once, when the limit is learned; may be nil
	mu      sync.Mutex
	known   bool
	max     uint32 // valid when known; MaxUint32: the peer set none
}

func (l *streamLimit) get() (uint32, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.max, l.known
}

func (l *streamLimit) learn(max uint32) {
	l.mu.Lock()
	if l.known {
		l.mu.Unlock()
		return
	}
	l.known, l.max = true, max
	l.mu.Unlock()
	if l.onLearn != nil {
		l.onLearn()
	}
}

// sniffCreds wraps the connection's transport credentials: each connection
// it hands gRPC reports the peer's first SETTINGS frame to limit.
type sniffCreds struct {
	credentials.TransportCredentials
	limit *streamLimit
}

func (c sniffCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return conn, info, err
	}
	return &sniffConn{Conn: conn, limit: c.limit}, info, nil
}

func (c sniffCreds) Clone() credentials.TransportCredentials {
	return sniffCreds{TransportCredentials: c.TransportCredentials.Clone(), limit: c.limit}
}

// maxSettingsFrame bounds what the sniffer buffers of the first frame: a
// SETTINGS frame larger than this (HTTP/2 defines 7 settings, 42 bytes) is
// not parsed, and the connection keeps the configured fallback.
const maxSettingsFrame = 1 << 10

// sniffConn passes every byte through and parses the first HTTP/2 frame
// the peer sends, once. Read is called by gRPC's one reader goroutine.
type sniffConn struct {
	net.Conn
	limit *streamLimit
	buf   []byte
	done  bool
}

const (
	frameHeaderLen         = 9
	frameSettings          = 0x4
	settingMaxConcurrent   = 0x3
	settingLen             = 6
	settingsFlagAck        = 0x1
	unlimitedStreamsMarker = math.MaxUint32
)

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.done && n > 0 {
		c.feed(p[:n])
	}
	return n, err
}

// feed buffers the first frame's bytes and parses it once complete.
func (c *sniffConn) feed(b []byte) {
	c.buf = append(c.buf, b[:min(len(b), frameHeaderLen+maxSettingsFrame-len(c.buf))]...)
	if len(c.buf) < frameHeaderLen {
		return
	}
	length := int(c.buf[0])<<16 | int(c.buf[1])<<8 | int(c.buf[2])
	if c.buf[3] != frameSettings || c.buf[4]&settingsFlagAck != 0 || length > maxSettingsFrame || length%settingLen != 0 {
		c.done, c.buf = true, nil // not a server preface: keep the fallback
		return
	}
	if len(c.buf) < frameHeaderLen+length {
		return
	}
	limit := uint32(unlimitedStreamsMarker)
	for p := c.buf[frameHeaderLen : frameHeaderLen+length]; len(p) >= settingLen; p = p[settingLen:] {
		if binary.BigEndian.Uint16(p) == settingMaxConcurrent {
			limit = binary.BigEndian.Uint32(p[2:])
		}
	}
	c.done, c.buf = true, nil
	c.limit.learn(limit)
}
