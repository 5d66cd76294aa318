package app_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

const cdsType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// Shutdown drains: the relay stops being ready, and every client stream
// ends with UNAVAILABLE "draining" so the client reconnects to another
// relay; Shutdown returns once all have ended.
func TestE2EDrainMovesClientsAway(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "class-a", "v1", clusters("a"))
	cfg := app.DefaultConfig()
	cfg.Listen, cfg.Admin, cfg.Upstream.Address = "127.0.0.1:0", "127.0.0.1:0", m.Addr
	r, err := app.Start(cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)

	var clients []*adsClient
	for i := 0; i < 20; i++ {
		c := dialADS(t, ctx, r.Addr(), "drain-client", "class-a")
		c.Subscribe(cdsType)
		c.Next(10 * time.Second)
		clients = append(clients, c)
	}
	done := make(chan struct{})
	go func() {
		r.Shutdown(500 * time.Millisecond)
		close(done)
	}()
	eventually(t, ctx, "/readyz to fail while draining", func() bool {
		resp, err := http.Get("http://" + r.AdminAddr() + "/readyz")
		if err != nil {
			return true // already shut down
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Shutdown did not return")
	}
	for i, c := range clients {
		eventually(t, ctx, "the client stream to end", func() bool { return c.Err() != nil })
		err := c.Err()
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "draining") {
			t.Errorf("client %d ended with %v, want UNAVAILABLE draining", i, err)
		}
	}
}

// A connection older than drain.max_connection_age is closed with GOAWAY:
// its stream ends (and the client reconnects through the Service).
func TestE2EMaxConnectionAge(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "class-a", "v1", clusters("a"))
	cfg := app.DefaultConfig()
	cfg.Listen, cfg.Admin, cfg.Upstream.Address = "127.0.0.1:0", "127.0.0.1:0", m.Addr
	cfg.Drain.MaxConnectionAge, cfg.Drain.MaxConnectionAgeGrace = 300*time.Millisecond, 200*time.Millisecond
	r, err := app.Start(cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	c := dialADS(t, ctx, r.Addr(), "aged-client", "class-a")
	c.Subscribe(cdsType)
	c.Next(10 * time.Second)
	wait, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if !poll(wait, func() bool { return c.Err() != nil }) {
		t.Fatal("the stream of an aged connection never ended")
	}
}

// Close during a long drain (the operator's second signal) ends it: the
// streams not yet told end at once and Shutdown returns, instead of waiting
// out the drain period.
func TestE2ECloseCutsDrainShort(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "class-a", "v1", clusters("a"))
	r := startRelay(t, m.Addr)
	for i := 0; i < 5; i++ {
		c := dialADS(t, ctx, r.Addr(), "drain-client", "class-a")
		c.Subscribe(cdsType)
		c.Next(10 * time.Second)
	}
	done := make(chan struct{})
	go func() {
		r.Shutdown(time.Hour)
		close(done)
	}()
	eventually(t, ctx, "the drain to begin", func() bool {
		resp, err := http.Get("http://" + r.AdminAddr() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	r.Close()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Shutdown still draining after Close")
	}
}
