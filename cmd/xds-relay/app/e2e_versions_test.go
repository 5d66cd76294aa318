package app_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// startRelayVersions starts a relay speaking protocol to upstreamAddr with
// upstream.versions set to versions.
func startRelayVersions(t *testing.T, upstreamAddr, protocol, versions string) *app.Relay {
	t.Helper()
	return startRelay(t, upstreamAddr, withConfig(func(cfg *app.Config) {
		cfg.Upstream.Protocol = protocol
		cfg.Upstream.Versions = versions
	}))
}

// TestE2EUpstreamVersionsSotW: with upstream.versions: upstream, a SotW
// client is sent go-control-plane's snapshot versions as version_info; by
// default it is sent content hashes.
func TestE2EUpstreamVersionsSotW(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "class-a", "snap-1", clusters("a", "b"))
	passed := startRelayVersions(t, m.Addr, "sotw", "upstream")
	hashed := startRelayVersions(t, m.Addr, "sotw", "content")

	c := dialADS(t, ctx, passed.Addr(), "client-1", "class-a")
	c.Subscribe(resource.ClusterType)
	if v := c.Next(10 * time.Second).GetVersionInfo(); v != "snap-1" {
		t.Fatalf("version_info %q, want the control plane's snap-1", v)
	}
	d := dialADS(t, ctx, hashed.Addr(), "client-2", "class-a")
	d.Subscribe(resource.ClusterType)
	if v := d.Next(10 * time.Second).GetVersionInfo(); v == "snap-1" || len(v) != 16 {
		t.Fatalf("default version_info %q, want a content hash", v)
	}

	m.Set(t, "class-a", "snap-2", clusters("a"))
	if v := c.Next(10 * time.Second).GetVersionInfo(); v != "snap-2" {
		t.Fatalf("version_info %q, want snap-2", v)
	}
	// A client reconnecting with the version it holds is sent the state
	// again: an upstream version does not vouch for content across relays.
	e := dialADS(t, ctx, passed.Addr(), "client-3", "class-a")
	if err := e.SendSotWResume(resource.ClusterType, nil, "snap-2"); err != nil {
		t.Fatal(err)
	}
	if resp := e.Next(10 * time.Second); resp.GetVersionInfo() != "snap-2" || len(resp.GetResources()) != 1 {
		t.Fatalf("reconnect: got version %q with %d clusters, want snap-2 with 1", resp.GetVersionInfo(), len(resp.GetResources()))
	}
}

// TestE2EUpstreamVersionsDelta: with a delta upstream and upstream.versions:
// upstream, a delta client of the relay is sent the resource versions a
// delta client of go-control-plane itself gets.
func TestE2EUpstreamVersionsDelta(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "class-a", "v1", clustersAndEndpoints([]string{"a", "b"}, []string{"a"}))
	r := startRelayVersions(t, m.Addr, "delta", "upstream")

	versions := func(addr, id string) map[string]string {
		c := dialDelta(t, ctx, addr, id, "class-a")
		c.Subscribe(resource.ClusterType, "*")
		resp := c.Next(10 * time.Second)
		out := map[string]string{}
		for _, res := range resp.GetResources() {
			out[res.GetName()] = res.GetVersion()
		}
		return out
	}
	direct := versions(m.Addr, "direct")
	relayed := versions(r.Addr(), "relayed")
	if len(direct) != 2 || !maps.Equal(direct, relayed) {
		t.Fatalf("resource versions through the relay %v, want go-control-plane's %v", relayed, direct)
	}
}

// TestE2EUpstreamVersionsNewNameAtHeldVersion: with upstream.versions:
// upstream and a SotW upstream, a SotW EDS client holding b asks [b d];
// go-control-plane answers d at the version the type already has. The
// client is still sent d (it was dropped as already held: a newly held name
// changes a content hash, not the upstream's version).
func TestE2EUpstreamVersionsNewNameAtHeldVersion(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	bd := []string{"b", "d"}
	m.Set(t, "class-a", "v1", clustersAndEndpoints(bd, bd))
	r := startRelayVersions(t, m.Addr, "sotw", "upstream")

	c := dialADS(t, ctx, r.Addr(), "client-1", "class-a")
	c.Subscribe(resource.EndpointType, "b")
	if resp := c.Next(10 * time.Second); resp.GetVersionInfo() != "v1" || !slices.Equal(assignmentNames(t, resp), []string{"b"}) {
		t.Fatalf("first response %v at %q, want [b] at v1", assignmentNames(t, resp), resp.GetVersionInfo())
	}
	c.Subscribe(resource.EndpointType, "b", "d")
	resp := c.Next(10 * time.Second)
	if got := assignmentNames(t, resp); resp.GetVersionInfo() != "v1" || !slices.Equal(got, bd) {
		t.Fatalf("after asking [b d]: %v at %q, want [b d] at v1", got, resp.GetVersionInfo())
	}
}

// TestE2EUpstreamVersionsFromDeltaUpstream: with a delta upstream and
// upstream.versions: upstream, a SotW client's version_info and a delta
// client's system_version_info are go-control-plane's system_version_info
// (its snapshot version), before and after a change.
func TestE2EUpstreamVersionsFromDeltaUpstream(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "class-a", "snap-1", clusters("a", "b"))
	r := startRelayVersions(t, m.Addr, "delta", "upstream")

	s := dialADS(t, ctx, r.Addr(), "sotw-1", "class-a")
	s.Subscribe(resource.ClusterType)
	d := dialDelta(t, ctx, r.Addr(), "delta-1", "class-a")
	d.Subscribe(resource.ClusterType, "*")
	for _, version := range []string{"snap-1", "snap-2"} {
		if version == "snap-2" {
			m.Set(t, "class-a", version, clusters("a"))
		}
		if v := s.Next(10 * time.Second).GetVersionInfo(); v != version {
			t.Fatalf("SotW client's version_info %q, want the control plane's %s", v, version)
		}
		if v := d.Next(10 * time.Second).GetSystemVersionInfo(); v != version {
			t.Fatalf("delta client's system_version_info %q, want the control plane's %s", v, version)
		}
	}
}

// assignmentNames decodes an EDS response's cluster names, sorted.
func assignmentNames(t *testing.T, resp *discoveryv3.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range resp.GetResources() {
		var cla endpointv3.ClusterLoadAssignment
		if err := a.UnmarshalTo(&cla); err != nil {
			t.Fatalf("%s response: %v", resp.GetTypeUrl(), err)
		}
		out = append(out, cla.GetClusterName())
	}
	slices.Sort(out)
	return out
}
