package app_test

import (
	"context"
	"maps"
	"regexp"
	"strconv"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
	"github.com/xds-relay/xds-relay/shard/drop"
)

// TestE2EDropsAgree: the upstream drops a relay counts show the same
// numbers in /metrics (xds_relay_drops_total{reason}), /debug/drops and the
// status page's drops table, every reason listed, zeros included.
func TestE2EDropsAgree(t *testing.T) {
	ctx := testContext(t)
	h, addr := startHandADS(t)
	r := startRelay(t, addr)
	c := dialADS(t, ctx, r.Addr(), "client-1", "class-drops")
	c.Subscribe(resource.ClusterType)

	up := h.stream(t, ctx)
	h.request(t, ctx) // the CDS subscription
	send := func(typeURL, nonce string, res ...*anypb.Any) {
		t.Helper()
		if err := up.Send(&discoveryv3.DiscoveryResponse{VersionInfo: nonce, Nonce: nonce, TypeUrl: typeURL, Resources: res}); err != nil {
			t.Fatalf("send %s: %v", nonce, err)
		}
	}
	a := xdstest.MustAny(t, &clusterv3.Cluster{Name: "a"})
	send(resource.ClusterType, "dup", a, a) // rejected: a duplicate name
	if req := h.request(t, ctx); req.GetResponseNonce() != "dup" || req.GetErrorDetail() == nil {
		t.Fatalf("want the NACK of dup, got %v", req)
	}
	// Never subscribed: dropped unanswered; the next answer is the fence.
	send(resource.EndpointType, "eds", xdstest.MustAny(t, &endpointv3.ClusterLoadAssignment{ClusterName: "a"}))
	send(resource.ClusterType, "good", a)
	if req := h.request(t, ctx); req.GetResponseNonce() != "good" || req.GetErrorDetail() != nil {
		t.Fatalf("want the ACK of good, got %v", req)
	}
	c.Next(10 * time.Second)

	// Downstream reasons may still move while the client's ACK is read:
	// the three views must agree once they settle.
	var fromMetrics, fromDebug, fromStatus map[string]uint64
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	agree := poll(pctx, func() bool {
		fromMetrics, fromDebug, fromStatus = metricsDrops(t, ctx, r), debugDrops(t, ctx, r), statusDrops(t, ctx, r)
		return maps.Equal(fromMetrics, fromDebug) && maps.Equal(fromDebug, fromStatus)
	})
	if !agree {
		t.Fatalf("drops disagree:\n/metrics      %v\n/debug/drops  %v\nstatus page   %v", fromMetrics, fromDebug, fromStatus)
	}
	for _, reason := range drop.All() {
		if _, ok := fromDebug[reason.String()]; !ok {
			t.Errorf("reason %s not listed: %v", reason, fromDebug)
		}
	}
	if len(fromDebug) != len(drop.All()) {
		t.Errorf("drops list %d reasons, want %d: %v", len(fromDebug), len(drop.All()), fromDebug)
	}
	for reason, want := range map[drop.Reason]uint64{drop.UpstreamRejected: 1, drop.UpstreamUnsubscribed: 1} {
		if got := fromDebug[reason.String()]; got != want {
			t.Errorf("drops %s = %d, want %d", reason, got, want)
		}
	}
}

var dropsSeriesRE = regexp.MustCompile(`(?m)^xds_relay_drops_total\{reason="([a-z_]+)"\} ([0-9]+)$`)

func metricsDrops(t *testing.T, ctx context.Context, r *app.Relay) map[string]uint64 {
	t.Helper()
	body, _ := get(t, ctx, "http://"+r.AdminAddr()+"/metrics")
	out := map[string]uint64{}
	for _, m := range dropsSeriesRE.FindAllStringSubmatch(string(body), -1) {
		n, err := strconv.ParseUint(m[2], 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", m[0], err)
		}
		out[m[1]] = n
	}
	return out
}

func debugDrops(t *testing.T, ctx context.Context, r *app.Relay) map[string]uint64 {
	t.Helper()
	var list []struct {
		Reason string `json:"reason"`
		Count  uint64 `json:"count"`
	}
	getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/drops", &list)
	out := map[string]uint64{}
	for _, d := range list {
		out[d.Reason] = d.Count
	}
	return out
}

func statusDrops(t *testing.T, ctx context.Context, r *app.Relay) map[string]uint64 {
	t.Helper()
	page, _ := get(t, ctx, "http://"+r.AdminAddr()+"/")
	out := map[string]uint64{}
	for _, row := range tableRows(t, string(page), "drops") {
		if len(row.text) != 2 {
			t.Fatalf("drops row %v, want reason and count", row.text)
		}
		n, err := strconv.ParseUint(row.text[1], 10, 64)
		if err != nil {
			t.Fatalf("drops row %v: %v", row.text, err)
		}
		out[row.text[0]] = n
	}
	return out
}
