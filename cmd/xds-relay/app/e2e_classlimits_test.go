package app_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
	"github.com/xds-relay/xds-relay/upstream"
)

// edsNames returns n EDS names of 40 bytes, distinct per prefix.
func edsNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%0*d", prefix, 39-len(prefix), i)
	}
	return out
}

// waitRefused waits for c's stream to end and checks its status.
func waitRefused(t *testing.T, c *adsClient, code codes.Code, substr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	if !c.WaitFor(ctx, func(c *xdstest.Client) bool { return c.Err() != nil }) {
		t.Fatalf("%s: stream not ended", c.node.GetId())
	}
	if err := c.Err(); status.Code(err) != code || !strings.Contains(err.Error(), substr) {
		t.Fatalf("%s: stream ended with %v, want %v naming %s", c.node.GetId(), err, code, substr)
	}
}

// Two clients of one class, each within the per-request limits, whose union
// of EDS names would make the class's upstream request larger than
// go-control-plane accepts (gRPC's 4 MiB): the second is refused with
// RESOURCE_EXHAUSTED naming limits.max_upstream_request_bytes (3 MiB by
// default); the class's upstream stream is never refused or restarted, and
// the first client keeps getting updates.
func TestClassUnionWithinUpstreamRequestLimit(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	first := edsNames("a", 55000) // about 2.3 MB as request names; both: 4.6 MB
	m.Set(t, "big", "v1", map[resource.Type][]types.Resource{resource.EndpointType: loadAssignments(first[0])})
	r := startRelay(t, m.Addr)

	c1 := dialADS(t, ctx, r.Addr(), "n1", "big")
	c1.Subscribe(resource.EndpointType, first...)
	c1.Next(10 * time.Second)
	c2 := dialADS(t, ctx, r.Addr(), "n2", "big")
	c2.Subscribe(resource.EndpointType, edsNames("b", 55000)...)
	waitRefused(t, c2, codes.ResourceExhausted, "limits.max_upstream_request_bytes")

	class := r.Registry().Classes()[0]
	if got := class.Interest(resource.EndpointType).Names; len(got) != len(first) {
		t.Fatalf("class union has %d names after the refusal, want the first client's %d", len(got), len(first))
	}
	m.Set(t, "big", "v2", map[resource.Type][]types.Resource{resource.EndpointType: loadAssignments(first[0], first[1])})
	if got := c1.Next(10 * time.Second); len(got.GetResources()) != 2 {
		t.Fatalf("first client's update has %d resources, want 2", len(got.GetResources()))
	}
	if opened, _ := m.Streams(); opened != 1 {
		t.Fatalf("the upstream saw %d ADS streams from the class, want 1 (it was never refused)", opened)
	}
	if st := upstreamStatus(t, ctx, r, "big"); st.Reconnects != 0 || st.LastError != "" {
		t.Fatalf("class upstream stream: %+v", st)
	}
}

// Two clients of a class behind a chained relay, 40 type URLs each: their
// union would pass the upstream relay's limits.max_types_per_stream (64),
// which would end the class's upstream stream over and over. The class's
// own limits.max_class_types (64) refuses the second client at its 25th
// type instead; the class's upstream stream stays up and the first client
// is served.
func TestClassTypesWithinUpstreamTypeLimit(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "chain", "v1", clusters("a"))
	top := startRelay(t, m.Addr)
	mid := startRelay(t, top.Addr(), withConfig(func(*app.Config) {}))

	bogus := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("type.googleapis.com/bogus.v3.%s%d", prefix, i)
		}
		return out
	}
	c1 := dialADS(t, ctx, mid.Addr(), "n1", "chain")
	c1.Subscribe(resource.ClusterType)
	c1.Next(10 * time.Second)
	for _, typeURL := range bogus("A", 39) {
		c1.Subscribe(typeURL, "x")
	}
	class := mid.Registry().Classes()[0]
	// The first client's types are in before the second client's: the
	// second is the one that would push the class past the limit.
	eventually(t, ctx, "the first client's 40 types", func() bool { return len(class.TypeURLs()) >= 40 })
	c2 := dialADS(t, ctx, mid.Addr(), "n2", "chain")
	for _, typeURL := range bogus("B", 40) {
		if err := c2.SendSotW(typeURL, []string{"x"}); err != nil {
			break // refused: the stream is ending
		}
	}
	waitRefused(t, c2, codes.ResourceExhausted, "limits.max_class_types")

	m.Set(t, "chain", "v2", clusters("a", "b"))
	if got := clusterNames(t, c1.Next(10*time.Second)); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("first client got %v, want [a b]", got)
	}
	if st := upstreamStatus(t, ctx, mid, "chain"); st.Reconnects != 0 || st.LastError != "" {
		t.Fatalf("class upstream stream: %+v", st)
	}
	if n := len(class.TypeURLs()); n > 64 {
		t.Fatalf("class holds %d types, over the limit of 64", n)
	}
}

// After delta clients with thousands of names each have gone, the class
// keeps nothing of them: no names, no table for the type; also when the class's upstream stream was re-established while they were
// connected (the new stream never asked for their names).
func TestClassRetainsNothingAfterDeltaClientsLeave(t *testing.T) {
	type controlPlane interface {
		Set(t *testing.T, class, version string, res map[resource.Type][]types.Resource)
		Stop()
	}
	start := map[string]func(addr string) (controlPlane, string){
		"sotw":  func(addr string) (controlPlane, string) { m := startMgmt(t, addr); return m, m.Addr },
		"delta": func(addr string) (controlPlane, string) { m := startMgmt(t, addr); return m, m.Addr },
	}
	for _, protocol := range []string{"sotw", "delta"} {
		for _, restart := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s upstream restarted %v", protocol, restart), func(t *testing.T) {
				ctx := testContext(t)
				m, addr := start[protocol]("127.0.0.1:0")
				m.Set(t, "gone", "v1", map[resource.Type][]types.Resource{resource.EndpointType: loadAssignments("real")})
				r := startRelay(t, addr, relayAs(relayID), upstreamProtocol(protocol), shortLinger())
				// A client of another type keeps the class in use: a class
				// all of whose clients left would linger with their shards.
				// Theirs linger briefly (shortLinger), then go.
				keeper := dialDelta(t, ctx, r.Addr(), "keeper", "gone")
				keeper.Subscribe(resource.ClusterType, "k")
				awaitWatched(t, ctx, r, "gone", resource.ClusterType)
				var clients []*deltaADS
				for i := 0; i < 3; i++ {
					c := dialDelta(t, ctx, r.Addr(), fmt.Sprint("n", i), "gone")
					c.Subscribe(resource.EndpointType, append(edsNames(fmt.Sprint("c", i), 3000), "real")...)
					clients = append(clients, c)
				}
				eventually(t, ctx, "the class's union", func() bool {
					cl := r.Registry().Classes()
					return len(cl) == 1 && len(cl[0].Interest(resource.EndpointType).Names) == 9001
				})
				class := r.Registry().Classes()[0]
				eventually(t, ctx, "the upstream's answer", func() bool {
					for _, st := range class.Status() {
						if st.TypeURL == resource.EndpointType {
							return st.Resources == 1
						}
					}
					return false
				})
				if restart {
					m.Stop()
					eventually(t, ctx, "the upstream stream down", func() bool {
						return upstreamStatus(t, ctx, r, "gone").State != upstream.StateConnected
					})
				}
				for _, c := range clients {
					c.Close()
				}
				if restart {
					m, _ = start[protocol](addr)
					m.Set(t, "gone", "v1", map[resource.Type][]types.Resource{resource.EndpointType: loadAssignments("real")})
				}
				eventually(t, ctx, "the class to free the type", func() bool {
					return !slices.Contains(class.TypeURLs(), resource.EndpointType)
				})
			})
		}
	}
}
