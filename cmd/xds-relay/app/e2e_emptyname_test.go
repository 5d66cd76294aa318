package app_test

import (
	"slices"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestE2EEmptyNameUnsubscribes: a SotW ADS client of a relay in front of
// go-control-plane sends CDS resource_names [""] (a name that matches
// nothing: how some clients and conformance suites unsubscribe from
// everything). The stream is not ended: its EDS subscription keeps being
// served, and "" never reaches the class's upstream interest.
func TestE2EEmptyNameUnsubscribes(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	snap := func(weight uint32) map[resource.Type][]types.Resource {
		res := clusters("a", "b")
		cla := &endpointv3.ClusterLoadAssignment{ClusterName: "a",
			Policy: &endpointv3.ClusterLoadAssignment_Policy{OverprovisioningFactor: wrapperspb.UInt32(weight)}}
		res[resource.EndpointType] = []types.Resource{cla}
		return res
	}
	m.Set(t, "class-a", "v1", snap(140))
	r := startRelay(t, m.Addr)

	c := dialADS(t, ctx, r.Addr(), "client-1", "class-a")
	c.Subscribe(resource.ClusterType, "a")
	cdsResp := c.Next(10 * time.Second)
	if got := clusterNames(t, cdsResp); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("CDS [a]: got %v", got)
	}
	c.Subscribe(resource.EndpointType, "a")
	eds1 := c.Next(10 * time.Second)
	if eds1.GetTypeUrl() != resource.EndpointType || len(eds1.GetResources()) != 1 {
		t.Fatalf("EDS [a]: got %s with %d resources", eds1.GetTypeUrl(), len(eds1.GetResources()))
	}

	if err := c.SendSotW(resource.ClusterType, []string{""}); err != nil {
		t.Fatalf("send CDS [\"\"]: %v", err)
	}
	class := r.Registry().Classes()[0]
	eventually(t, ctx, `CDS interest without "a" and without ""`, func() bool {
		return class.Interest(resource.ClusterType).Empty()
	})

	// The control plane changes the endpoints and drops cluster b: the
	// stream, unsubscribed from CDS, is sent the EDS change only.
	next := snap(150)
	next[resource.ClusterType] = next[resource.ClusterType][:1]
	m.Set(t, "class-a", "v2", next)
	resp := c.Next(10 * time.Second)
	if resp.GetTypeUrl() != resource.EndpointType || resp.GetVersionInfo() == eds1.GetVersionInfo() {
		t.Fatalf("after the change: got %s version %s, want the new EDS version", resp.GetTypeUrl(), resp.GetVersionInfo())
	}
	if err := c.Err(); err != nil {
		t.Fatalf("stream ended after CDS [\"\"]: %v", err)
	}
}
