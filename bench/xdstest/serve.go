package xdstest

import (
	"net"
	"testing"

	"google.golang.org/grpc"
)

// ServeGRPC serves srv on a loopback port until the test ends, and returns
// the address. wrap, if given, wraps the listener first (a relay tracks its
// connections so).
func ServeGRPC(t testing.TB, srv *grpc.Server, wrap ...func(net.Listener) net.Listener) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	for _, w := range wrap {
		lis = w(lis)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return addr
}
