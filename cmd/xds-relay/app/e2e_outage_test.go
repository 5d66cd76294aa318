package app_test

// Issue 27, F2 and F3: an unreachable control plane is an error operators
// see within seconds, and a client the relay has nothing for is told so.

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
	"github.com/xds-relay/xds-relay/upstream"
)

// deadAddr is an address nothing listens on: connections are refused.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// silentAddr is an address that accepts connections and never says a
// word: a control plane behind a load balancer with no backend, or a
// blackhole past the TCP handshake.
func silentAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	})
	return l.Addr().String()
}

// TestE2EUnreachableUpstreamShows (issue 27, F2): with the control plane
// unreachable when the classes start (connections refused, or accepted and
// never answered), each class shows it within seconds: backoff,
// reconnects, connection failures and the last error at /debug/upstream,
// the connection-failure metric, and a warning in the log. Two classes
// share the one upstream connection: the second, which never got to open
// a stream on it, fails as well.
func TestE2EUnreachableUpstreamShows(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr func(*testing.T) string
	}{
		{"refused", deadAddr},
		{"silent", silentAddr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			var logs *observer.ObservedLogs
			r := startRelay(t, tc.addr(t), observeLogs(&logs), withConfig(func(cfg *app.Config) {
				cfg.Upstream.ConnectTimeout = time.Second
				cfg.Upstream.UnavailableAfter = -1 // F3 apart
			}))
			classes := []string{"class-one", "class-two"}
			for i, class := range classes {
				c := dialADS(t, ctx, r.Addr(), fmt.Sprintf("client-%d", i), class)
				c.Subscribe(resource.ClusterType)
			}
			start := time.Now()
			const within = 4 * time.Second
			for _, class := range classes {
				var st upstreamState
				ok := poll(ctx, func() bool {
					st = upstreamStatus(t, ctx, r, class)
					return st.State == upstream.StateBackoff && st.Reconnects > 0 && st.ConnectionFailures > 0 && st.LastError != "" ||
						time.Since(start) > within
				})
				if !ok || st.Reconnects == 0 || st.ConnectionFailures == 0 || st.LastError == "" {
					t.Fatalf("%s after %v: /debug/upstream %+v, want backoff with reconnects, connection failures and the last error",
						class, time.Since(start).Round(time.Millisecond), st)
				}
				// The backoff grows: connection failures are no success.
				eventually(t, ctx, class+"'s consecutive failures to grow", func() bool {
					st = upstreamStatus(t, ctx, r, class)
					return st.Failures >= 3 && st.Reconnects >= 3
				})
				if v, ok := scrape(t, ctx, r, `xds_relay_upstream_connection_failures_total{class="`+class+`"}`); !ok || v < 1 {
					t.Errorf("%s: xds_relay_upstream_connection_failures_total = %v (present %v), want at least 1", class, v, ok)
				}
			}
			if page, _ := get(t, ctx, "http://"+r.AdminAddr()+"/"); !strings.Contains(string(page), "no upstream connection") {
				t.Errorf("the status page does not show the connection error")
			}
			warned := logs.FilterMessage("cannot reach the upstream; retrying").FilterLevelExact(zapcore.WarnLevel)
			if warned.Len() == 0 {
				t.Errorf("no warning that the upstream cannot be reached; log: %v", logs.All())
			}
			for _, e := range warned.All() {
				if e.ContextMap()["error"] == "" {
					t.Errorf("warning %q without the error", e.Message)
				}
			}
		})
	}
}

// TestE2EClientWithNothingFallsBack (issue 27, F3): grpc-go's xDS client
// with two servers in its bootstrap, the relay first and go-control-plane
// second. The relay's control plane is down when the client connects, so
// the relay has nothing for it: after upstream.unavailable_after (default
// 5 s, under the client's 15 s does-not-exist timer) it ends the client's
// stream with UNAVAILABLE, and the client falls back (gRFC A71) to the
// second server, through which its RPC succeeds.
func TestE2EClientWithNothingFallsBack(t *testing.T) {
	ctx := testContext(t)
	const class = "class-fallback"
	b := startBackend(t)
	direct := startMgmt(t, "127.0.0.1:0")
	direct.Set(t, class, "1", grpcResources(t, "echo", b.addr))
	r := startRelay(t, deadAddr(t)) // the default upstream.unavailable_after

	check := grpcXDSClient(t, ctx, bootstrapFor("grpc-client-1", class, xdsServer(r.Addr()), xdsServer(direct.Addr)))
	start := time.Now()
	if err := check(true, 12*time.Second); err != nil {
		t.Fatalf("RPC through xds:///echo after %v: %v (the relay has nothing for the client: it should have fallen back to the second server)",
			time.Since(start).Round(time.Millisecond), err)
	}
	if b.calls.Load() == 0 {
		t.Fatal("the backend served no call")
	}
	if v, ok := scrape(t, ctx, r, `xds_relay_downstream_disconnects_total{reason="upstream_unavailable",variant="sotw-ads"}`); !ok || v < 1 {
		t.Errorf("disconnects for upstream_unavailable = %v (present %v), want the client's stream", v, ok)
	}
	if st := upstreamStatus(t, ctx, r, class); st.UnavailableSince == nil {
		t.Errorf("/debug/upstream %+v: want unavailable_since", st)
	}
}

// TestE2EOutageKeepsClientsWithState (issue 27, F3): during a control-plane
// outage past upstream.unavailable_after, a client that holds state keeps
// its stream and its state, and so does a new client of a type the class
// holds (it is served from the relay's cache); a new client of a type the
// class never received is told UNAVAILABLE at once, naming the class. When
// the control plane is back, such a client is served again.
func TestE2EOutageKeepsClientsWithState(t *testing.T) {
	const class = "class-outage"
	f := startFixture(t, class, clusters("a"), withConfig(func(cfg *app.Config) {
		cfg.Upstream.UnavailableAfter = 500 * time.Millisecond
	}))
	ctx, m, r := f.ctx, f.cp, f.relay
	held := f.sotw(t, "holds-clusters", class)
	held.Next(10 * time.Second)

	addr := m.Addr
	m.Stop()
	eventually(t, ctx, "the class to be marked unreachable", func() bool {
		return upstreamStatus(t, ctx, r, class).UnavailableSince != nil
	})
	cached := f.sotw(t, "wants-clusters", class)
	if got := clusterNames(t, cached.Next(10*time.Second)); len(got) != 1 || got[0] != "a" {
		t.Fatalf("a new client of a type the class holds got %v, want the cached [a]", got)
	}
	unserved := dialADS(t, ctx, r.Addr(), "wants-endpoints", class)
	unserved.Subscribe(resource.EndpointType, "a")
	eventually(t, ctx, "the client the relay has nothing for to be told", func() bool { return unserved.Err() != nil })
	if err := unserved.Err(); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), class) {
		t.Errorf("the client of a type the class never received ended with %v, want UNAVAILABLE naming the class", err)
	}
	time.Sleep(300 * time.Millisecond) // and nothing else is ended
	for _, c := range []*adsClient{held, cached} {
		if err := c.Err(); err != nil {
			t.Errorf("%s, which holds state, lost its stream: %v", c.node.GetId(), err)
		}
	}

	back := startMgmt(t, addr)
	back.Set(t, class, "2", clusters("a"))
	eventually(t, ctx, "the class to be reachable again", func() bool {
		return upstreamStatus(t, ctx, r, class).UnavailableSince == nil
	})
	again := dialADS(t, ctx, r.Addr(), "wants-endpoints-again", class)
	again.Subscribe(resource.EndpointType, "a")
	time.Sleep(700 * time.Millisecond) // past unavailable_after: still served
	if err := again.Err(); err != nil {
		t.Errorf("with the control plane back, a new client's stream ended: %v", err)
	}
}
