package app_test

import (
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestE2EReconnectHonoursBackoffMax keeps the control plane's address
// unusable (connections accepted and closed at once, as a load balancer in
// front of a dead control plane does) for a few of the relay's connection
// attempts, then brings go-control-plane back there. The relay is configured
// with upstream.backoff 50ms..500ms, so it must be back (and its clients
// updated) within about backoff.max of the control plane's return.
func TestE2EReconnectHonoursBackoffMax(t *testing.T) {
	ctx := testContext(t)
	const class = "class-backoff"
	const backoffMax = 500 * time.Millisecond // startRelay's upstream.backoff.max
	m1 := startMgmt(t, "127.0.0.1:0")
	m1.Set(t, class, "v1", clusters("one"))
	r := startRelay(t, m1.Addr)
	c := dialADS(t, ctx, r.Addr(), "client-1", class)
	c.Subscribe(resource.ClusterType)
	if got := clusterNames(t, c.Next(10*time.Second)); !slices.Equal(got, []string{"one"}) {
		t.Fatalf("v1 clusters %v, want [one]", got)
	}

	m1.Stop()
	// Take the address over with a listener that drops every connection, and
	// count the relay's connection attempts.
	dead, err := net.Listen("tcp", m1.Addr)
	if err != nil {
		t.Fatalf("listen %s: %v", m1.Addr, err)
	}
	attempts := make(chan time.Time, 64)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := dead.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
			select {
			case attempts <- time.Now():
			default:
			}
		}
	}()
	closeDead := sync.OnceFunc(func() {
		_ = dead.Close()
		wg.Wait()
	})
	t.Cleanup(closeDead)

	const failedAttempts = 4
	var times []time.Time
	for len(times) < failedAttempts {
		select {
		case at := <-attempts:
			times = append(times, at)
		case <-ctx.Done():
			t.Fatalf("only %d connection attempts to the dead control plane: %v", len(times), times)
		}
	}
	var gaps []time.Duration
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i].Sub(times[i-1]).Round(time.Millisecond))
	}
	if err := c.Err(); err != nil {
		t.Fatalf("client stream ended during the outage: %v", err)
	}

	// The control plane is back.
	closeDead()
	m2 := startMgmt(t, m1.Addr)
	m2.Set(t, class, "v2", clusters("one", "two"))
	back := time.Now()
	resp, err := c.next(20 * time.Second)
	if err != nil {
		t.Fatalf("no update after the control plane came back (gaps between failed attempts %v): %v", gaps, err)
	}
	took := time.Since(back)
	if got := clusterNames(t, resp); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("after the return got clusters %v, want [one two]", got)
	}
	// backoff.max, plus slack for connecting and the race detector.
	if limit := backoffMax + 1500*time.Millisecond; took > limit {
		t.Errorf("clients were updated %v after the control plane came back, want within %v: with upstream.backoff.max %v "+
			"the relay's connection attempts were %v apart", took.Round(time.Millisecond), limit, backoffMax, gaps)
	}
	if err := c.Err(); err != nil && !errors.Is(err, ctx.Err()) {
		t.Errorf("client stream ended: %v", err)
	}
}
