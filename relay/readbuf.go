package relay

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// BufferReads wraps the listener the gRPC server serves on so that each
// connection reads through a shared, pooled buffer (see pooledReadConn).
// With TransportOptions' ReadBufferSize(0), gRPC reads every HTTP/2 frame
// with two syscalls, its 9-byte header and then its payload; a client's
// window updates, pings and requests come in bursts of small frames, and
// those syscalls were a fifth of the relay's CPU while it pushed to 10,000
// streams (docs/benchmarks.md, "Memory per stream"). A buffer of its own
// would cost every idle connection its size; a pooled one is held only while
// a read has left bytes unconsumed. TrackConnections applies it.
func BufferReads(l net.Listener) net.Listener { return bufferingListener{l} }

type bufferingListener struct{ net.Listener }

func (l bufferingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newPooledReadConn(c), nil
}

// readBufSize is the most one read syscall takes: larger than a burst of
// control frames and ACKs, small enough that a read wanting a large payload
// bypasses the buffer (it reads straight into the caller's slice).
const readBufSize = 4096

var readBufPool = sync.Pool{New: func() any { return new([readBufSize]byte) }}

// pooledReadConn is a net.Conn whose reads go through a pooled buffer,
// taken only once the socket has bytes to read (syscall.RawConn), so a
// connection waiting for its client holds none. Like bufio.Reader, it serves
// one reader at a time (gRPC's per-connection reader goroutine); writes and
// Close pass through and may run concurrently.
type pooledReadConn struct {
	// Read-only after creation.
	net.Conn
	raw syscall.RawConn // nil if the connection is not a socket: reads pass through

	// Owned by the reading goroutine (gRPC's one reader per connection).
	buf  *[readBufSize]byte // held while buf[r:w] is unread, nil otherwise
	r, w int
}

func newPooledReadConn(c net.Conn) *pooledReadConn {
	pc := &pooledReadConn{Conn: c}
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			pc.raw = raw
		}
	}
	return pc
}

func (c *pooledReadConn) Read(p []byte) (int, error) {
	if c.buf == nil {
		if c.raw == nil || len(p) >= readBufSize {
			return c.Conn.Read(p)
		}
		if err := c.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.buf[c.r:c.w])
	c.r += n
	if c.r == c.w {
		readBufPool.Put(c.buf)
		c.buf = nil
	}
	return n, nil
}

// fill reads what the socket holds into a pooled buffer, waiting (with the
// connection's read deadline) until there is something. It returns io.EOF
// when the peer has closed.
func (c *pooledReadConn) fill() error {
	var (
		buf *[readBufSize]byte
		n   int
		err error
	)
	rerr := c.raw.Read(func(fd uintptr) bool {
		buf = readBufPool.Get().(*[readBufSize]byte)
		for {
			n, err = syscall.Read(int(fd), buf[:])
			if err != syscall.EINTR {
				break
			}
		}
		if err == syscall.EAGAIN {
			readBufPool.Put(buf) // nothing yet: wait for the poller without it
			buf = nil
			return false
		}
		return true
	})
	switch {
	case rerr != nil:
		err = rerr
	case err != nil:
		err = &net.OpError{Op: "read", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", err)}
	case n == 0:
		err = io.EOF
	}
	if err != nil {
		if buf != nil {
			readBufPool.Put(buf)
		}
		return err
	}
	c.buf, c.r, c.w = buf, 0, n
	return nil
}
