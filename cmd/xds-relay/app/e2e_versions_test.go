package app_test

import (
	"maps"
	"testing"
	"time"

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
