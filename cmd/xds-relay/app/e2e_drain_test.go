package app_test

// Issue 27, F1: a drain covers every stream. grpc-go's xDS client reopens a
// stream that had responses within a millisecond of its end: when the end
// of its stream reaches it before the GOAWAY of its connection (or without
// one), the new stream is opened on the same connection, after the drain
// listed the streams it ends.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// grpcXDSConn is a grpc-go xDS channel to xds:///target with bootstrap (its
// xds_servers and node); it is closed when the test ends unless closed
// before.
func grpcXDSConn(t *testing.T, bootstrap, target string) *grpc.ClientConn {
	t.Helper()
	builder, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatalf("xDS resolver: %v", err)
	}
	cc, err := grpc.NewClient("xds:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(builder))
	if err != nil {
		t.Fatalf("dial xds:///%s: %v", target, err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// grpcXDSClient starts grpc-go's xDS client with bootstrap on xds:///echo,
// and returns a health check through it.
func grpcXDSClient(t *testing.T, ctx context.Context, bootstrap string) func(wait bool, timeout time.Duration) error {
	t.Helper()
	cc := grpcXDSConn(t, bootstrap, "echo")
	hc := healthpb.NewHealthClient(cc)
	return func(wait bool, timeout time.Duration) error {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(wait))
		if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			err = fmt.Errorf("health status %v", resp.GetStatus())
		}
		return err
	}
}

// xdsServer is a bootstrap's xds_servers entry for a plaintext server.
func xdsServer(addr string) string {
	return fmt.Sprintf(`{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}`, addr)
}

// bootstrapFor is a bootstrap of servers (xdsServer entries, in order) for
// node id in class.
func bootstrapFor(id, class string, servers ...string) string {
	list := ""
	for i, s := range servers {
		if i > 0 {
			list += ", "
		}
		list += s
	}
	return fmt.Sprintf(`{"xds_servers": [%s], "node": {"id": %q, "cluster": %q, "locality": {"region": "r1", "zone": "z1"}}}`, list, id, class)
}

// grpcClientOf starts a grpc-go xDS client of the relay at addr, as
// grpc-client-1 in class, and makes its first RPC: it holds all four types.
func grpcClientOf(t *testing.T, ctx context.Context, addr, class string) {
	t.Helper()
	check := grpcXDSClient(t, ctx, bootstrapFor("grpc-client-1", class, xdsServer(addr)))
	if err := check(true, 10*time.Second); err != nil {
		t.Fatalf("first RPC through xds:///echo: %v", err)
	}
}

// TestE2EDrainRefusesReopenedStream: the drain ends the grpc-go client's
// stream; the client, which saw no GOAWAY, reopens it at once on the same
// connection. The relay refuses it (UNAVAILABLE, counted as a drain) and
// every later one, instead of serving a stream the drain does not cover.
func TestE2EDrainRefusesReopenedStream(t *testing.T) {
	ctx := testContext(t)
	const class = "class-drain-grpc"
	b := startBackend(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, class, "1", grpcResources(t, "echo", b.addr))
	r := startRelay(t, m.Addr)
	grpcClientOf(t, ctx, r.Addr(), class)
	before := r.Server().Streams(0)
	if len(before) != 1 {
		t.Fatalf("%d streams before the drain, want the client's 1", len(before))
	}

	// The drain alone, without the GOAWAY GracefulStop adds: the
	// connection stays usable, as it is for a client that has not read
	// the GOAWAY yet.
	rep := r.Server().Drain(ctx, 0)
	if rep.Streams != 1 || rep.Spread != 1 {
		t.Errorf("drain report %+v, want the one stream spread", rep)
	}
	eventually(t, ctx, "the client's reopened stream to be refused", func() bool {
		refused, _ := r.Server().DrainRefusals()
		return refused >= 1
	})
	// Nothing is served after the drain: every reopened stream is refused
	// (the drained one is gone once its handler returned).
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		for _, s := range r.Server().Streams(0) {
			if s.ID != before[0].ID {
				t.Fatalf("stream %d, opened after the drain by %s, is served", s.ID, s.Node)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := r.Server().StreamCount(); n != 0 {
		t.Errorf("%d streams open after the drain, want 0", n)
	}
	if v, ok := scrape(t, ctx, r, `xds_relay_downstream_disconnects_total{reason="drain",variant="sotw-ads"}`); !ok || v < 2 {
		t.Errorf("drain disconnects = %v, want the drained stream and at least one refused", v)
	}
}

// TestE2EShutdownDrainsReopenedStreams: SIGTERM's Shutdown with a grpc-go
// client whose connection delivers the GOAWAY (and the PING that follows
// it) late, as when the drain's end of the stream overtakes it: the client
// reopens its stream on the same connection. The relay refuses it, so
// Shutdown takes the drain period (not 5 s more, waiting for a stream
// nobody ends) and reports a complete drain with the refusal.
func TestE2EShutdownDrainsReopenedStreams(t *testing.T) {
	ctx := testContext(t)
	const class = "class-drain-grpc"
	b := startBackend(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, class, "1", grpcResources(t, "echo", b.addr))
	r := startRelay(t, m.Addr)
	const hold = time.Second
	proxy := holdGoAways(t, r.Addr(), hold)
	grpcClientOf(t, ctx, proxy, class)

	const period = 300 * time.Millisecond
	start := time.Now()
	rep := r.Shutdown(period)
	took := time.Since(start)
	if limit := hold + 2*time.Second; took > limit {
		t.Errorf("Shutdown(%v) took %v, want within %v: a stream outlived the drain", period, took.Round(time.Millisecond), limit)
	}
	if !rep.Complete() || rep.Streams != 1 || rep.Spread != 1 || rep.CutAtEnd != 0 {
		t.Errorf("drain report %+v, want the one stream spread and none cut", rep)
	}
	if rep.Refused < 1 {
		t.Errorf("drain report %+v: the client's reopened stream was not refused", rep)
	}
}

// TestE2ERESTPollsDuringDrain: once the drain began, a REST poll gets 503
// with Retry-After, and a poll held when it began is answered so at once:
// the pollers go to another relay during the drain, not when the server
// stops.
func TestE2ERESTPollsDuringDrain(t *testing.T) {
	f := startFixture(t, "class-a", clusters("a"), withConfig(func(cfg *app.Config) {
		cfg.REST.Listen, cfg.REST.MaxHold = "127.0.0.1:0", 20*time.Second
	}))
	ctx, r := f.ctx, f.relay
	// A stream keeps the drain going for its period.
	f.sotw(t, "drain-client", "class-a").Next(10 * time.Second)

	type answer struct {
		code       int
		retryAfter string
		version    string
		err        error
	}
	poll := func(version string) answer {
		body := `{"node": {"id": "rest-1", "cluster": "class-a"}, "version_info": "` + version + `"}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.RESTAddr()+"/v3/discovery:clusters", bytes.NewBufferString(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return answer{err: err}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		a := answer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
		if resp.StatusCode == http.StatusOK {
			var out discoveryv3.DiscoveryResponse
			if err := protojson.Unmarshal(b, &out); err != nil {
				a.err = err
			}
			a.version = out.GetVersionInfo()
		}
		return a
	}
	first := poll("")
	if first.err != nil || first.code != http.StatusOK {
		t.Fatalf("first poll: %+v", first)
	}
	held := make(chan answer, 1)
	go func() { held <- poll(first.version) }()
	eventually(t, ctx, "the poll to be held", func() bool { return r.Server().HeldPolls() == 1 })

	const period = 2 * time.Second
	report := make(chan int, 1)
	go func() {
		rep := r.Shutdown(period)
		report <- rep.PollsRefused
	}()
	select {
	case a := <-held:
		if a.err != nil || a.code != http.StatusServiceUnavailable || a.retryAfter == "" {
			t.Errorf("the poll held when the drain began got %+v, want 503 with Retry-After", a)
		}
	case <-time.After(period / 2):
		t.Fatal("the poll held when the drain began is still held")
	}
	if a := poll(""); a.err != nil || a.code != http.StatusServiceUnavailable || a.retryAfter == "" {
		t.Errorf("a poll during the drain got %+v, want 503 with Retry-After", a)
	}
	select {
	case n := <-report:
		if n != 2 {
			t.Errorf("the drain reports %d polls refused, want 2", n)
		}
	case <-ctx.Done():
		t.Fatal("Shutdown did not return")
	}
}

// holdGoAways is a TCP proxy to target that passes every byte at once but
// the target's GOAWAY and PING frames (HTTP/2 from the server: frames
// only, no preface), which it passes hold later: the client sees its
// stream end before the GOAWAY that preceded it, and keeps using the
// connection meanwhile. It returns the proxy's address; it stops when the
// test ends.
func holdGoAways(t *testing.T, target string, hold time.Duration) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			client, err := lis.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			track(client)
			track(server)
			wg.Add(2)
			go func() { // client to server: as is
				defer wg.Done()
				_, _ = io.Copy(server, client)
				_ = server.Close()
			}()
			go func() { // server to client: frame by frame
				defer wg.Done()
				defer client.Close()
				var wmu sync.Mutex
				write := func(b []byte) {
					wmu.Lock()
					defer wmu.Unlock()
					_, _ = client.Write(b)
				}
				var held sync.WaitGroup
				defer held.Wait()
				for {
					hdr := make([]byte, 9)
					if _, err := io.ReadFull(server, hdr); err != nil {
						return
					}
					n := int(binary.BigEndian.Uint32(append([]byte{0}, hdr[:3]...)))
					frame := append(hdr, make([]byte, n)...)
					if _, err := io.ReadFull(server, frame[9:]); err != nil {
						return
					}
					const goAway, ping, ack = 0x7, 0x6, 0x1
					if typ, flags := frame[3], frame[4]; typ == goAway || typ == ping && flags&ack == 0 {
						held.Add(1)
						time.AfterFunc(hold, func() {
							defer held.Done()
							write(frame)
						})
						continue
					}
					write(frame)
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return lis.Addr().String()
}
