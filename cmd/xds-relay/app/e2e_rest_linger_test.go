package app_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// Two REST polls of a class in use, for the same name, cause one upstream
// subscription of it, not subscribe, unsubscribe, subscribe (issue 11): the
// first poll's shard lingers as an ended stream's does, so the second is
// answered from the class's state, which took the change made upstream in
// between. Before, a poll's end unsubscribed its names at once, so a
// client polling every few seconds churned the class's upstream
// subscription.
func TestE2ERESTPollShardLingers(t *testing.T) {
	for _, protocol := range []string{"sotw", "delta"} {
		t.Run(protocol, func(t *testing.T) {
			const class = "class-rest"
			f := startFixture(t, class, map[resource.Type][]types.Resource{
				resource.ClusterType: cds(timedCluster("a", 1), timedCluster("b", 1), timedCluster("c", 1)),
			}, upstreamProtocol(protocol), withConfig(func(c *app.Config) {
				c.REST.Listen = "127.0.0.1:0"
				c.REST.MaxHold = 10 * time.Second // a poll at the current version waits for the change
			}))
			ctx, m, r := f.ctx, f.cp, f.relay

			// The keeper holds the class in use, so the class is not idle
			// between the polls (an idle class kept its shards before, too).
			keeper := dialADS(t, ctx, r.Addr(), "keeper", class)
			keep := func(names ...string) {
				keeper.Subscribe(resource.ClusterType, names...)
				if got := clusterNames(t, keeper.Next(10*time.Second)); !slices.Equal(got, names) {
					t.Fatalf("the keeper got %v, want %v", got, names)
				}
			}
			keep("a")

			first := restCDS(t, ctx, r.RESTAddr(), class, "", "b")
			if got := connectTimeouts(t, first); got["b"] != 1 || len(got) != 1 {
				t.Fatalf("first poll: %v, want b at 1s", got)
			}
			if !lingering(t, r, class, resource.ClusterType, []string{"b"}) {
				t.Fatal("the ended poll's shard does not linger in /debug/shards")
			}
			wantLingerCounts(t, ctx, r, class, 1, 0)
			// A fence: the keeper's new name goes upstream with, or after,
			// anything the poll's end changed, and is answered after it
			// (go-control-plane handles a stream's requests in order).
			keep("a", "c")

			m.Set(t, class, "v2", map[resource.Type][]types.Resource{
				resource.ClusterType: cds(timedCluster("a", 1), timedCluster("b", 2), timedCluster("c", 1)),
			})
			// At the first poll's version: answered once the change is in.
			second := restCDS(t, ctx, r.RESTAddr(), class, first.GetVersionInfo(), "b")
			if got := connectTimeouts(t, second); got["b"] != 2 || len(got) != 1 {
				t.Fatalf("second poll: %v, want b at 2s", got)
			}
			// The second poll took the lingering shard and left it
			// lingering again.
			wantLingerCounts(t, ctx, r, class, 1, 1)
			wantSubscribedOnce(t, m, protocol == "delta", "b")
		})
	}
}

// wantSubscribedOnce checks that cp's CDS requests subscribed to name once
// and kept it: SotW, every request from the first naming it on names it;
// delta, one request subscribes it and none unsubscribes it.
func wantSubscribedOnce(t *testing.T, cp *controlPlane, delta bool, name string) {
	t.Helper()
	sotw, reqs := cp.Requests()
	if !delta {
		var named bool
		for _, q := range sotw {
			if q.GetTypeUrl() != resource.ClusterType {
				continue
			}
			has := slices.Contains(q.GetResourceNames(), name)
			if named && !has {
				t.Fatalf("upstream CDS request %v after %s was subscribed lacks it", q.GetResourceNames(), name)
			}
			named = named || has
		}
		if !named {
			t.Fatalf("no upstream CDS request named %s", name)
		}
		return
	}
	var subs, unsubs int
	for _, q := range reqs {
		if q.GetTypeUrl() != resource.ClusterType {
			continue
		}
		if slices.Contains(q.GetResourceNamesSubscribe(), name) {
			subs++
		}
		if slices.Contains(q.GetResourceNamesUnsubscribe(), name) {
			unsubs++
		}
	}
	if subs != 1 || unsubs != 0 {
		t.Fatalf("upstream saw %s subscribed %d times and unsubscribed %d times, want once and never", name, subs, unsubs)
	}
}

// restCDS polls the relay's REST CDS endpoint at addr as a node of class
// for names at version, and returns the 200's DiscoveryResponse.
func restCDS(t *testing.T, ctx context.Context, addr, class, version string, names ...string) *discoveryv3.DiscoveryResponse {
	t.Helper()
	body, err := protojson.Marshal(&discoveryv3.DiscoveryRequest{
		Node:          &corev3.Node{Id: "poller", Cluster: class},
		ResourceNames: names,
		VersionInfo:   version,
	})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v3/discovery:clusters", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("REST poll: %d %q %v, want 200", resp.StatusCode, b, err)
	}
	out := &discoveryv3.DiscoveryResponse{}
	if err := protojson.Unmarshal(b, out); err != nil {
		t.Fatalf("REST answer: %v\n%s", err, b)
	}
	return out
}

// lingering reports whether class has a lingering shard of typeURL
// subscribing exactly names, per /debug/shards.
func lingering(t *testing.T, r *app.Relay, class, typeURL string, names []string) bool {
	t.Helper()
	s, ok := debugShard(t, r, class, typeURL, names)
	return ok && s.Streams == 0 && s.Lingering
}

// wantLingerCounts checks that /metrics, /debug/classes and the status page
// count lingering shards (the class's and the relay's) and lingers ended
// by a reuse.
func wantLingerCounts(t *testing.T, ctx context.Context, r *app.Relay, class string, lingering, reused int) {
	t.Helper()
	for series, want := range map[string]int{
		"xds_relay_lingering_shards":                       lingering,
		`xds_relay_shard_lingers_total{outcome="reused"}`:  reused,
		`xds_relay_shard_lingers_total{outcome="expired"}`: 0,
		`xds_relay_shard_lingers_total{outcome="evicted"}`: 0,
		`xds_relay_shard_lingers_total{outcome="dropped"}`: 0,
	} {
		if v, ok := scrape(t, ctx, r, series); !ok || v != float64(want) {
			t.Errorf("/metrics: %s = %v (%v), want %d", series, v, ok, want)
		}
	}
	var classes []struct {
		Name      string `json:"name"`
		Lingering int    `json:"lingering_shards"`
	}
	getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/classes", &classes)
	if len(classes) != 1 || classes[0].Name != class || classes[0].Lingering != lingering {
		t.Errorf("/debug/classes %+v, want %s with %d lingering shards", classes, class, lingering)
	}
	page, _ := get(t, ctx, "http://"+r.AdminAddr()+"/")
	if want := fmt.Sprintf("poll ended): %d; lingers ended: reused %d expired 0 evicted 0 dropped 0", lingering, reused); !strings.Contains(string(page), want) {
		t.Errorf("the status page lacks %q", want)
	}
}
