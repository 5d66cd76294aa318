package bench

import (
	"context"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// loopbackDialer dials from the source address src (nil: any). The socket
// is bound with IP_BIND_ADDRESS_NO_PORT, so its port is chosen at connect
// time for the whole 4-tuple: a source address then serves one
// ephemeral-port range per server port, and the TIME_WAIT connections a
// previous run left towards another server port do not exhaust it.
func loopbackDialer(src net.IP) *net.Dialer {
	d := &net.Dialer{Timeout: 30 * time.Second}
	if src == nil {
		return d
	}
	d.LocalAddr = &net.TCPAddr{IP: src}
	d.Control = func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}
	return d
}

// loopbackSource is the source address of connection i: 127.0.x.1, a new
// x every 20,000 connections, so that N can exceed one address's ephemeral
// ports (see loopbackDialer).
func loopbackSource(i int) net.IP { return net.IPv4(127, 0, byte(1+i/20000), 1) }

// contextDialer is loopbackDialer(src) as a gRPC context dialer.
func contextDialer(src net.IP) func(context.Context, string) (net.Conn, error) {
	d := loopbackDialer(src)
	return func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
}
