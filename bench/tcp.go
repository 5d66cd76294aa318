package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/xds-relay/xds-relay/shard/wire"
)

// The tcp target carries the same bytes as the limit target on plain TCP
// connections, without gRPC or HTTP/2: the kernel and loopback floor. A
// client opens with one byte, tcpHelloSotw or tcpHelloDelta, and its class
// number (4 bytes, big-endian); the server then
// writes frames of a 4-byte big-endian length and the response (body, then
// the connection's nonce field). Clients send nothing else.
const (
	tcpHelloSotw  = 's'
	tcpHelloDelta = 'd'
)

// tcpServer is the tcp target's server.
type tcpServer struct {
	lis    net.Listener
	bc     *broadcaster
	cancel context.CancelFunc // ends every connection's writer
	wg     sync.WaitGroup     // the accept loop and the connections
}

func startTCPServer() (*tcpServer, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &tcpServer{lis: lis, bc: newBroadcaster(), cancel: cancel}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				_ = s.serve(ctx, conn)
			}()
		}
	}()
	return s, nil
}

func (s *tcpServer) stop() {
	s.cancel()
	s.lis.Close()
	s.wg.Wait()
}

func (s *tcpServer) Addr() string { return s.lis.Addr().String() }

func (s *tcpServer) publish(class int, p *payloads) { s.bc.publish(class, p) }

// publishEDS keeps the body (the tcp target takes no churn; see
// FanoutConfig.Churn).
func (s *tcpServer) publishEDS(class int, body wire.Body) { s.bc.publishEDS(class, body) }

func (s *tcpServer) counts() (streams, requests int) { return s.bc.subscribed(), 0 }

// serve writes frames to one connection until it or the server ends. A
// reader waits for the peer to close, so a closed connection ends the writer.
func (s *tcpServer) serve(ctx context.Context, conn net.Conn) error {
	defer conn.Close()
	// Stopping the server closes the connection, which ends any blocked
	// read or write below.
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	var hello [5]byte
	if _, err := io.ReadFull(conn, hello[:]); err != nil {
		return err
	}
	sub := s.bc.subscribe(hello[0] == tcpHelloDelta, int(binary.BigEndian.Uint32(hello[1:])))
	defer s.bc.unsubscribe(sub)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, _ = io.Copy(io.Discard, conn)
	}()
	defer func() { conn.Close(); <-closed }()
	var nonce uint64
	var header [4]byte
	for {
		select {
		case body := <-sub.next:
			nonce++
			suffix := wire.NonceSuffix(strconv.FormatUint(nonce, 36))
			binary.BigEndian.PutUint32(header[:], uint32(body.Len()+len(suffix)))
			bufs := net.Buffers{header[:], body.Bytes(), suffix}
			if _, err := bufs.WriteTo(conn); err != nil {
				return err
			}
		case <-closed:
			return nil
		}
	}
}

// tcpClient is one tcp-target client connection.
type tcpClient struct {
	conn net.Conn
	done chan error
}

// startTCPClient connects client id to addr from src and reports a receipt
// for every whole frame received, parsed like a gRPC client's response.
func startTCPClient(ctx context.Context, addr string, src net.IP, id, class int, delta bool, out chan<- Receipt) (*tcpClient, error) {
	conn, err := loopbackDialer(src).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcp client %d: %w", id, err)
	}
	hello := binary.BigEndian.AppendUint32([]byte{tcpHelloSotw}, uint32(class))
	if delta {
		hello[0] = tcpHelloDelta
	}
	if _, err := conn.Write(hello); err != nil {
		conn.Close()
		return nil, err
	}
	c := &tcpClient{conn: conn, done: make(chan error, 1)}
	go func() {
		r := bufio.NewReaderSize(conn, 64<<10)
		var header [4]byte
		for {
			if _, err := io.ReadFull(r, header[:]); err != nil {
				c.done <- err
				return
			}
			frame := make([]byte, binary.BigEndian.Uint32(header[:]))
			if _, err := io.ReadFull(r, frame); err != nil {
				c.done <- err
				return
			}
			at := time.Now()
			rc, _, err := parseReceipt(frame, delta)
			if err != nil {
				c.done <- err
				return
			}
			rc.Client, rc.At = id, at
			report(ctx, out, rc)
		}
	}()
	return c, nil
}

// Close closes the connection and waits for the reader.
func (c *tcpClient) Close() {
	c.conn.Close()
	<-c.done
}
