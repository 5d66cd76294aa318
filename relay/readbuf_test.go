package relay

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"
)

// pooledPair returns a loopback TCP connection's two ends, the accepted one
// reading through BufferReads.
func pooledPair(t *testing.T) (client net.Conn, server *pooledReadConn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	client, err = net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := BufferReads(lis).Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); c.Close() })
	server = c.(*pooledReadConn)
	if server.raw == nil {
		t.Fatal("a TCP connection was not given its raw socket")
	}
	return client, server
}

// Whatever the chunking on either side, the reader gets the bytes written,
// in order, and holds no buffer once it has consumed what was read.
func TestPooledReadsKeepTheByteStream(t *testing.T) {
	client, server := pooledPair(t)
	rng := rand.New(rand.NewPCG(1, 2))
	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	go func() {
		for rest := want; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(3*readBufSize))
			if _, err := client.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
		client.Close()
	}()
	var got []byte
	sizes := rand.New(rand.NewPCG(3, 4))
	for {
		p := make([]byte, 1+sizes.IntN(2*readBufSize)) // below and above the buffer's size
		n, err := server.Read(p)
		got = append(got, p[:n]...)
		if server.buf != nil && server.r == server.w {
			t.Fatal("a consumed buffer is still held")
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not the %d written (first difference at %d)", len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A read waiting for its client holds no buffer, and honours the
// connection's read deadline.
func TestPooledReadWaitsWithoutBuffer(t *testing.T) {
	_, server := pooledPair(t)
	if err := server.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	n, err := server.Read(make([]byte, 9))
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read = %d, %v; want 0 and the deadline", n, err)
	}
	if server.buf != nil {
		t.Fatal("a read that got nothing holds a buffer")
	}
}

// Bytes already read are delivered before the peer's close shows as EOF.
func TestPooledReadDeliversBeforeEOF(t *testing.T) {
	client, server := pooledPair(t)
	if _, err := client.Write([]byte("frame-header+payload")); err != nil {
		t.Fatal(err)
	}
	client.Close()
	got, err := io.ReadAll(io.LimitReader(readerFunc(func(p []byte) (int, error) { return server.Read(p[:min(len(p), 5)]) }), 1<<10))
	if err != nil || string(got) != "frame-header+payload" {
		t.Fatalf("read %q, %v", got, err)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
