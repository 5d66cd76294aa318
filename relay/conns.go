package relay

import (
	"net"
	"sync"
)

// TrackConnections wraps the listener the gRPC server serves on, so the
// relay can close the connection of a client it must drop while a write to
// it is blocked on flow control (a chronic laggard): gRPC offers no other
// way to end such a stream. Connections are tracked by remote address.
// Their reads go through pooled buffers (BufferReads).
func (s *Server) TrackConnections(l net.Listener) net.Listener {
	return &trackingListener{Listener: BufferReads(l), srv: s}
}

type trackingListener struct {
	// Read-only after creation.
	net.Listener
	srv *Server
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, srv: l.srv, key: c.RemoteAddr().String()}
	l.srv.conns.Store(tc.key, tc)
	return tc, nil
}

type trackedConn struct {
	// Read-only after creation.
	net.Conn
	srv *Server
	key string // the remote address, its key in srv.conns

	once sync.Once // the first Close forgets the connection (any goroutine)
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.srv.conns.CompareAndDelete(c.key, c) })
	return c.Conn.Close()
}

// closeConnection closes the tracked connection from remote address addr.
func (s *Server) closeConnection(addr string) {
	if c, ok := s.conns.Load(addr); ok {
		_ = c.(*trackedConn).Close()
	}
}
