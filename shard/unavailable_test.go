package shard

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// A class records the types it received a state of (heartbeats are none),
// and tells the registry's hooks once when its upstream becomes
// unreachable, not again until it was reachable in between (issue 27).
func TestUpstreamUnavailableTellsOncePerOutage(t *testing.T) {
	reg := NewRegistry(mustClassifier(t, nil), nil)
	var told []string
	reg.OnUpstreamUnavailable(func(c *Class) { told = append(told, c.Name) })
	c := reg.ClassFor(&corev3.Node{Id: "n", Cluster: "class-a"})

	c.Subscribe(edsType, NewSubscription([]string{"a"}, false), &recorder{})
	c.ApplyUpdate(edsType, Update{Kind: UpdateHeartbeats, Heartbeats: []HeartbeatEntry{{Name: "a"}}})
	if c.Received(edsType) {
		t.Fatal("a heartbeat counts as a state received")
	}
	c.ApplyUpdate(edsType, Update{Resources: []*Resource{res("a", "1")}})
	if !c.Received(edsType) || c.Received(ClusterType) {
		t.Fatalf("received EDS %v, CDS %v; want EDS only", c.Received(edsType), c.Received(ClusterType))
	}

	if _, _, down := c.UpstreamUnavailable(); down {
		t.Fatal("unavailable before it was said")
	}
	since := time.Now()
	c.SetUpstreamUnavailable(since, "refused")
	c.SetUpstreamUnavailable(since, "refused again")
	if got, why, down := c.UpstreamUnavailable(); !down || !got.Equal(since) || why != "refused again" {
		t.Fatalf("UpstreamUnavailable = %v %q %v", got, why, down)
	}
	if len(told) != 1 {
		t.Fatalf("hooks told %v, want once", told)
	}
	c.SetUpstreamUnavailable(time.Time{}, "")
	if _, _, down := c.UpstreamUnavailable(); down {
		t.Fatal("still unavailable after it was cleared")
	}
	c.SetUpstreamUnavailable(time.Now(), "down again")
	if len(told) != 2 {
		t.Fatalf("hooks told %v, want again for the second outage", told)
	}
}
