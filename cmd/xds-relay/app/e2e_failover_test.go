package app_test

import (
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// With several upstream addresses the relay uses the first, and when it goes
// away fails over to the next: clients stay connected and converge on the
// state of the control plane that serves now.
func TestE2EUpstreamFailover(t *testing.T) {
	ctx := testContext(t)
	primary := startMgmt(t, "127.0.0.1:0")
	primary.Set(t, "class-a", "p1", clusters("a"))
	backup := startMgmt(t, "127.0.0.1:0")
	backup.Set(t, "class-a", "b1", clusters("a", "b"))

	cfg := app.DefaultConfig()
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstream.Address, cfg.Upstream.Fallbacks = primary.Addr, []string{backup.Addr}
	cfg.Upstream.Backoff.Initial, cfg.Upstream.Backoff.Max = 50*time.Millisecond, 500*time.Millisecond
	r, err := app.Start(cfg, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)

	c := dialADS(t, ctx, r.Addr(), "failover-1", "class-a")
	c.Subscribe(cdsType)
	if got := clusterNames(t, c.Next(10*time.Second)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("from the primary: %v, want [a]", got)
	}
	if n, _ := backup.Streams(); n != 0 {
		t.Fatalf("the backup saw %d streams while the primary served", n)
	}
	primary.Stop()
	if got := clusterNames(t, c.Next(20*time.Second)); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("after failover: %v, want the backup's [a b]", got)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("the client's stream ended: %v", err)
	}
}
