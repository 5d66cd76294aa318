package app_test

import (
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// upstreamBeats counts the CDS heartbeats the control plane sent: responses
// whose every resource is a wrapper without its resource.
func upstreamBeats(t *testing.T, m *controlPlane) int {
	t.Helper()
	n := 0
	for _, resp := range m.SotwSent() {
		if resp.GetTypeUrl() == resource.ClusterType && isHeartbeat(t, resp) {
			n++
		}
	}
	return n
}

func isHeartbeat(t *testing.T, resp *discoveryv3.DiscoveryResponse) bool {
	t.Helper()
	e := readSotW(t, resp)
	for _, r := range e {
		if r.hasBody || r.ttl == 0 {
			return false
		}
	}
	return len(e) > 0
}

// TestE2EHeartbeatsAreNotStarved: go-control-plane's snapshot cache with
// heartbeating lists only the resources with a TTL (a) in a heartbeat; it
// then believes the relay lacks the others (b), so it answers the
// heartbeat's ACK with the unchanged state, and sends its next heartbeat
// only once that is ACKed. The relay must ACK at
// once (its backoff is an hour here, so an ACK the storm guard deferred
// never goes out): a TTL-aware client gets nearly every heartbeat the
// control plane sent (some may be on the way), many more than the storm
// guard's StormRepeats, and an update made while heartbeating arrives.
func TestE2EHeartbeatsAreNotStarved(t *testing.T) {
	const (
		class    = "class-heartbeats"
		interval = 100 * time.Millisecond
		ttl      = 3 * time.Second
		want     = 20 // heartbeats the client must see
		inFlight = 2  // sent upstream, not yet at the client
	)
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0", func(o *xdstest.CPOptions) { o.Heartbeat = interval })
	setTTLSnapshot(t, m, class, "v1", map[string]time.Duration{"a": ttl}, timedCluster("a", 1), timedCluster("b", 1))
	r := startRelay(t, m.Addr, withConfig(func(c *app.Config) {
		c.Upstream.Backoff.Initial, c.Upstream.Backoff.Max = time.Hour, time.Hour
	}))
	c := awareADS(t, ctx, r, "aware-1", class)
	c.Subscribe(resource.ClusterType)
	first := c.Next(10 * time.Second)

	deadline := time.Now().Add(30 * time.Second)
	var gaps []time.Duration
	last := time.Now()
	for got := 0; got < want; got++ {
		resp, err := c.next(time.Until(deadline))
		if err != nil {
			t.Fatalf("after %d heartbeats (the control plane sent %d): %v", got, upstreamBeats(t, m), err)
		}
		if resp.GetVersionInfo() != first.GetVersionInfo() || !isHeartbeat(t, resp) {
			t.Fatalf("after %d heartbeats: version %q %+v, want a heartbeat", got, resp.GetVersionInfo(), readSotW(t, resp))
		}
		now := time.Now()
		gaps, last = append(gaps, now.Sub(last)), now
	}
	sent := upstreamBeats(t, m)
	t.Logf("gaps between heartbeats at the client (interval %v): %v", interval, gaps)
	if sent < want || sent > want+inFlight {
		t.Fatalf("the client got %d heartbeats while the control plane sent %d: want all but at most %d", want, sent, inFlight)
	}

	setTTLSnapshot(t, m, class, "v2", map[string]time.Duration{"a": ttl}, timedCluster("a", 2), timedCluster("b", 1))
	set := time.Now()
	for {
		resp, err := c.next(time.Until(deadline))
		if err != nil {
			t.Fatalf("the update made while heartbeating did not arrive: %v", err)
		}
		if resp.GetVersionInfo() == first.GetVersionInfo() {
			continue // a heartbeat
		}
		e := readSotW(t, resp)
		if !e["a"].hasBody || e["a"].ttl != ttl {
			t.Fatalf("update %+v, want a with its TTL", e)
		}
		t.Logf("update arrived %v after it was set", time.Since(set))
		return
	}
}
