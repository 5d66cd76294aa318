package relay

import (
	"errors"
	"net"
	"sync"
	"syscall"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/shard/clientlog"
)

// ConnGate caps the connections of the listeners it wraps, together
// (server.max_connections), and each peer's share of them (Peers): an
// accept past either is closed at once, counted and logged (rate-limited),
// so idle connections cannot take the file descriptors the admin port, the
// upstream connections and the file source need. The xDS and REST
// listeners share one gate; the admin listener is not gated.
type ConnGate struct {
	// Read-only after creation.
	max   int // 0: no cap
	peers *Peers
	log   *zap.Logger
	clog  *clientlog.Gate

	mu   sync.Mutex
	open int // guarded by mu
}

// NewConnGate returns a gate of max connections (0: no cap) accounting
// peers in peers; refusals are logged through clog.
func NewConnGate(max int, peers *Peers, log *zap.Logger, clog *clientlog.Gate) *ConnGate {
	return &ConnGate{max: max, peers: peers, log: log, clog: clog}
}

// Listener wraps l: its Accept returns only connections within the gate.
func (g *ConnGate) Listener(l net.Listener) net.Listener { return &gatedListener{Listener: l, gate: g} }

type gatedListener struct {
	// Read-only after creation.
	net.Listener
	gate *ConnGate
}

// Accept returns the next connection within the gate, closing those past
// it.
func (l *gatedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		done, err := l.gate.admit(c.RemoteAddr())
		if err == nil {
			return &gatedConn{Conn: c, done: done}, nil
		}
		_ = c.Close()
		if ok, dropped := l.gate.clog.Allow(); ok {
			l.gate.log.Info("connection refused", zap.String("peer", c.RemoteAddr().String()), zap.Error(err), dropped)
		}
	}
}

// admit takes a connection from addr within the cap and the peer's share;
// done returns it.
func (g *ConnGate) admit(addr net.Addr) (done func(), err error) {
	g.mu.Lock()
	if g.max > 0 && g.open >= g.max {
		g.mu.Unlock()
		peer, _ := peerOf(addr)
		return nil, g.peers.refuse(KeyMaxConnections, peer, "is refused while the relay holds its limit of %d connections", g.max)
	}
	g.open++
	g.mu.Unlock()
	release := func() {
		g.mu.Lock()
		g.open--
		g.mu.Unlock()
		g.peers.conns.Add(-1)
	}
	g.peers.conns.Add(1)
	peerDone, err := g.peers.openConn(addr)
	if err != nil {
		release()
		return nil, err
	}
	return func() { peerDone(); release() }, nil
}

// gatedConn gives its slot back on the first Close.
type gatedConn struct {
	net.Conn
	done func()
	once sync.Once
}

func (c *gatedConn) Close() error {
	c.once.Do(c.done)
	return c.Conn.Close()
}

// SyscallConn exposes the socket, as the accepted connection did (see
// pooledReadConn).
func (c *gatedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errNoSyscallConn
}

var errNoSyscallConn = errors.New("connection has no file descriptor")
