package relay

import (
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/xds-relay/xds-relay/shard"
)

// With the upstream's versions passed through (upstream.versions:
// upstream), a name newly asked for can arrive at the version the client
// already holds: the upstream answers D at the type's version. The client
// asking [B D] while holding B is still sent D (the rule that a newly held
// name changes the version holds only of content hashes).
func TestSotWNewNameAtTheHeldUpstreamVersion(t *testing.T) {
	h := newHarness(t)
	b, d := resource(t, EndpointType, "B", 1), resource(t, EndpointType, "D", 1)
	h.class.ApplyUpdate(EndpointType, shard.Update{Resources: []*shard.Resource{b}, Kind: shard.UpdateMerge, Version: "v1"})
	c := h.ads(t)
	c.subscribe(EndpointType, "B")
	r := c.nextOf(EndpointType)
	if r.VersionInfo != "v1" || !slices.Equal(names(t, r), []string{"B"}) {
		t.Fatalf("first response %v at %q, want [B] at v1", names(t, r), r.VersionInfo)
	}
	c.ack(r)
	c.subscribe(EndpointType, "B", "D")
	c.fence() // nothing to send yet: D does not exist
	h.class.ApplyUpdate(EndpointType, shard.Update{Resources: []*shard.Resource{d}, Kind: shard.UpdateMerge, Version: "v1"})
	r = c.nextOf(EndpointType)
	if got := names(t, r); !slices.Equal(got, []string{"B", "D"}) {
		t.Fatalf("after D arrived at v1: %v at %q, want [B D]", got, r.VersionInfo)
	}
}

// An upstream's version may stay while the content changes (a delta
// upstream's system_version_info need not change with every response): a
// SotW client is sent the change at the same version_info.
func TestSotWSameUpstreamVersionNewContent(t *testing.T) {
	h := newHarness(t)
	h.class.ApplyUpdate(ClusterType, shard.Update{Resources: []*shard.Resource{resource(t, ClusterType, "a", 1)}, Kind: shard.UpdateFull, Version: "s1"})
	c := h.ads(t)
	c.subscribe(ClusterType)
	r := c.nextOf(ClusterType)
	if r.VersionInfo != "s1" {
		t.Fatalf("first response at %q, want s1", r.VersionInfo)
	}
	c.ack(r)
	h.class.ApplyUpdate(ClusterType, shard.Update{Resources: []*shard.Resource{resource(t, ClusterType, "a", 2)}, Kind: shard.UpdateFull, Version: "s1"})
	r = c.nextOf(ClusterType)
	var got clusterv3.Cluster
	if len(r.Resources) != 1 || r.Resources[0].UnmarshalTo(&got) != nil || got.GetAltStatName() != "v2" || r.VersionInfo != "s1" {
		t.Fatalf("after a's change at s1: %v (%q) at %q, want a's new content (v2) at s1", names(t, r), got.GetAltStatName(), r.VersionInfo)
	}
}
