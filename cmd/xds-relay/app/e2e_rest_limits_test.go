package app_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// restRequest is an HTTP/1.1 keep-alive CDS poll of class, as raw bytes.
func restRequest(t *testing.T, class, version string) (head, body string) {
	t.Helper()
	b, err := protojson.Marshal(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "raw", Cluster: class}, VersionInfo: version})
	if err != nil {
		t.Fatal(err)
	}
	head = fmt.Sprintf("POST /v3/discovery:clusters HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(b))
	return head, string(b)
}

// dialREST opens a raw TCP connection to the REST listener; reads fail
// after 20 s, so a connection the relay keeps open fails the test instead
// of hanging it.
func dialREST(t *testing.T, r *app.Relay) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", r.RESTAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// wantClosed reads c until the relay closes it; a read deadline first
// fails the test.
func wantClosed(t *testing.T, br *bufio.Reader, what string) {
	t.Helper()
	_, err := io.Copy(io.Discard, br)
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the relay kept the connection open", what)
	}
}

// restFixture is a relay with a REST listener, changed by edit, in front
// of a control plane serving cluster a to class.
func restFixture(t *testing.T, class string, edit func(*app.Config)) *fixture {
	t.Helper()
	return startFixture(t, class, clusters("a"), withConfig(func(c *app.Config) {
		c.REST.Listen = "127.0.0.1:0"
		edit(c)
	}))
}

// A keep-alive connection that sends no further request is closed after
// rest.idle_timeout; before, it stayed open for good.
func TestE2ERESTIdleConnectionClosed(t *testing.T) {
	const class = "class-rest"
	f := restFixture(t, class, func(c *app.Config) { c.REST.IdleTimeout = 100 * time.Millisecond })
	c, br := dialREST(t, f.relay)
	head, body := restRequest(t, class, "")
	if _, err := io.WriteString(c, head+body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("poll: %d (close %v), want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	wantClosed(t, br, "an idle keep-alive connection")
}

// A body that trickles in is cut at rest.read_timeout with 408 naming the
// key, and the connection closed; before, a byte every few seconds held
// the connection and its goroutine for good.
func TestE2ERESTSlowBodyCut(t *testing.T) {
	const class = "class-rest"
	f := restFixture(t, class, func(c *app.Config) { c.REST.ReadTimeout = 200 * time.Millisecond })
	c, br := dialREST(t, f.relay)
	head, body := restRequest(t, class, "")
	if _, err := io.WriteString(c, head+body[:1]); err != nil { // the rest never comes
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a trickling body: %v", err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(msg), "rest.read_timeout") {
		t.Errorf("trickling body: %d %q, want 408 naming rest.read_timeout", resp.StatusCode, msg)
	}
	wantClosed(t, br, "a connection whose body timed out")
}

// pollAt POSTs a CDS poll of class at version; it returns the status,
// the body and the Retry-After header.
func pollAt(ctx context.Context, t *testing.T, addr, class, version string) (int, string, string, error) {
	_, body := restRequest(t, class, version)
	resp, b, err := post(ctx, httpClient, "http://"+addr+"/v3/discovery:clusters", body)
	if err != nil {
		return 0, "", "", err
	}
	return resp.StatusCode, b, resp.Header.Get("Retry-After"), nil
}

// Past rest.max_held_polls, a poll that would be held gets 429 naming the
// key, while the held ones stay held (and are answered at the change) and
// a poll that can be answered at once still is. Before, every poll was
// held: a goroutine and a connection each.
func TestE2ERESTHeldPollsCapped(t *testing.T) {
	const class = "class-rest"
	f := restFixture(t, class, func(c *app.Config) {
		c.REST.MaxHold = 5 * time.Minute
		c.REST.MaxHeldPolls = 2
	})
	ctx, r := f.ctx, f.relay
	v1 := restCDS(t, ctx, r.RESTAddr(), class, "").GetVersionInfo()

	type result struct {
		code int
		body string
		err  error
	}
	held := make(chan result, 2)
	for range 2 {
		go func() {
			code, body, _, err := pollAt(ctx, t, r.RESTAddr(), class, v1)
			held <- result{code, body, err}
		}()
	}
	eventually(t, ctx, "two polls held", func() bool { return r.Server().HeldPolls() == 2 })

	// Bounded: on a relay without the cap this poll would be held.
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	code, body, retry, err := pollAt(octx, t, r.RESTAddr(), class, v1)
	if err != nil || code != http.StatusTooManyRequests || !strings.Contains(body, "rest.max_held_polls") || retry == "" {
		t.Fatalf("third held poll: %d %q (Retry-After %q) %v, want 429 naming rest.max_held_polls", code, body, retry, err)
	}
	if code, body, _, err := pollAt(ctx, t, r.RESTAddr(), class, ""); err != nil || code != http.StatusOK {
		t.Errorf("a poll answered at once: %d %q %v, want 200", code, body, err)
	}
	select {
	case res := <-held:
		t.Fatalf("a held poll ended: %+v", res)
	default:
	}
	if n := r.Server().HeldPolls(); n != 2 {
		t.Errorf("%d polls held, want 2", n)
	}

	f.cp.Set(t, class, "v2", clusters("a", "b"))
	for range 2 {
		res := <-held
		if res.err != nil || res.code != http.StatusOK || !strings.Contains(res.body, `"b"`) {
			t.Errorf("held poll at the change: %d %q %v, want 200 with cluster b", res.code, res.body, res.err)
		}
	}
	eventually(t, ctx, "no poll held", func() bool { return r.Server().HeldPolls() == 0 })
}
