package app_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// startFileRelay starts a relay serving the sample configuration, logging
// into an observer.
func startFileRelay(t *testing.T, cfg app.Config) (*app.Relay, *observer.ObservedLogs) {
	t.Helper()
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Source.Dir = sampleDir
	core, logs := observer.New(zap.InfoLevel)
	r, err := app.Start(cfg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, logs
}

// Clients naming many classes, or classes with huge names, cannot grow
// /metrics, the status page or the log: class label values beyond
// limits.max_metric_classes fold into "other", a 1 MB cluster name is
// refused before it becomes a class, and "new node class" lines are rate
// limited (log.client_lines_per_second).
func TestE2EClassNamesCannotGrowMetricsOrLogs(t *testing.T) {
	ctx := testContext(t)
	cfg := app.DefaultConfig()
	cfg.Limits.MaxMetricClasses = 3
	cfg.Log.ClientLinesPerSecond = 1
	r, logs := startFileRelay(t, cfg)

	const classes = 12
	for i := range classes {
		c := dialADS(t, ctx, r.Addr(), fmt.Sprintf("n%d", i), fmt.Sprintf("class-%02d", i))
		c.Subscribe(cdsType)
		c.Next(10 * time.Second) // ACKed by the client: counted by class
	}
	for i := range 3 {
		c := dialADS(t, ctx, r.Addr(), "huge", strings.Repeat(string(rune('a'+i)), 1<<20))
		c.Subscribe(cdsType)
		_, err := c.next(10 * time.Second)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limits.max_node_bytes") {
			t.Fatalf("client with a 1 MB cluster name: %v, want INVALID_ARGUMENT naming limits.max_node_bytes", err)
		}
	}

	url := "http://" + r.AdminAddr() + "/metrics"
	labels := regexp.MustCompile(`xds_relay_client_acks_total\{class="([^"]*)"`)
	var text string
	eventually(t, ctx, "every class's ACK to be counted", func() bool {
		body, _ := get(t, ctx, url)
		text = string(body)
		var sum float64
		for _, m := range regexp.MustCompile(`(?m)^xds_relay_client_acks_total\{[^}]*\} ([0-9.e+]+)$`).FindAllStringSubmatch(text, -1) {
			var v float64
			fmt.Sscan(m[1], &v)
			sum += v
		}
		return sum >= classes
	})
	seen := map[string]bool{}
	for _, m := range labels.FindAllStringSubmatch(text, -1) {
		seen[m[1]] = true
	}
	if len(seen) != 4 || !seen["other"] {
		t.Errorf("class label values %v, want 3 classes and other", seen)
	}
	if len(text) > 64<<10 {
		t.Errorf("/metrics is %d bytes", len(text))
	}
	page, code := get(t, ctx, "http://"+r.AdminAddr()+"/")
	if code != http.StatusOK || len(page) > 256<<10 || strings.Contains(string(page), strings.Repeat("a", 1000)) {
		t.Errorf("status page: %d, %d bytes", code, len(page))
	}
	created := logs.FilterMessage("new node class").Len()
	if created >= classes {
		t.Errorf("%d \"new node class\" lines for %d classes at 1 line a second", created, classes)
	}
	total := 0
	for _, e := range logs.All() {
		total += len(e.Message)
		for _, f := range e.Context {
			total += len(f.Key) + len(f.String)
		}
	}
	if total > 16<<10 {
		t.Errorf("%d bytes logged", total)
	}
	t.Logf("/metrics %d bytes, status page %d bytes, %d new-class lines, %d log bytes", len(text), len(page), created, total)
}

// The server's transport limits come from the config: a connection that
// never sends the HTTP/2 preface is closed after server.connection_timeout,
// and a stream that sends no request is ended after
// limits.first_request_timeout, naming it.
func TestE2ETransportLimitsFromConfig(t *testing.T) {
	ctx := testContext(t)
	cfg := app.DefaultConfig()
	cfg.Server.ConnectionTimeout = 100 * time.Millisecond
	cfg.Limits.FirstRequestTimeout = 100 * time.Millisecond
	r, _ := startFileRelay(t, cfg)

	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, c) // the server's SETTINGS, then EOF
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a connection without preface stayed open: %v", err)
	}

	idle := dialADS(t, ctx, r.Addr(), "idle", "class-idle")
	if err := idle.Open(cdsType); err != nil {
		t.Fatal(err)
	}
	_, err = idle.next(10 * time.Second)
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "limits.first_request_timeout") {
		t.Fatalf("idle stream ended with %v, want DEADLINE_EXCEEDED naming limits.first_request_timeout", err)
	}
}
