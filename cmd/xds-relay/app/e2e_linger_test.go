package app_test

import (
	"slices"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// A delta client reconnects through a relay speaking delta to
// go-control-plane, while another client keeps the class in use, and a
// resource it holds is deleted upstream between its old stream's end and
// its new stream's subscription (with initial_resource_versions): it is
// told the resource was removed. Found by the conformance engine (issue
// 11): the old stream's end used to unsubscribe its names upstream, and
// go-control-plane never says that a name subscribed again does not exist,
// so the client kept the deleted resource. An ended stream's shard now
// lingers with its upstream interest (node_classes.linger), and takes the
// deletion.
func TestE2EDeltaReconnectToldOfDeletionMeanwhile(t *testing.T) {
	const class = "class-linger"
	eds := func(name string, gen int) types.Resource { return xdstest.Resource(resource.EndpointType, name, gen) }
	f := startFixture(t, class, map[resource.Type][]types.Resource{
		resource.EndpointType: {eds("x", 1), eds("y", 1), eds("z", 1)},
	}, relayAs("relay-linger"), upstreamProtocol("delta"))
	ctx, m, r := f.ctx, f.cp, f.relay

	keeper := dialDelta(t, ctx, r.Addr(), "keeper", class)
	keeper.Subscribe(resource.EndpointType, "z")
	wantDeltaResp(t, keeper.Next(10*time.Second), resource.EndpointType, []string{"z"}, nil)

	old := dialDelta(t, ctx, r.Addr(), "reconnecting", class)
	old.Subscribe(resource.EndpointType, "x", "z")
	// z comes at once (the class holds it), x once the upstream answers.
	if !old.WaitFor(ctx, func(c *xdstest.Client) bool { return len(c.Held(resource.EndpointType)) == 2 }) {
		t.Fatalf("the client holds %v, want x and z", old.Held(resource.EndpointType))
	}
	held := old.Versions(resource.EndpointType)
	old.Close()
	eventually(t, ctx, "the relay to end the old stream", func() bool {
		return !watched(t, r, class, resource.EndpointType, []string{"x", "z"})
	})
	// A fence: the keeper's new name goes upstream after anything the old
	// stream's end sent, and go-control-plane handles a stream's requests
	// in order.
	keeper.Subscribe(resource.EndpointType, "y")
	wantDeltaResp(t, keeper.Next(10*time.Second), resource.EndpointType, []string{"y"}, nil)

	// x is deleted and z changed in one snapshot: the relay applies one
	// upstream response of both, so once the keeper has z the relay knows
	// all it will be told of x.
	m.Set(t, class, "v2", map[resource.Type][]types.Resource{resource.EndpointType: {eds("y", 1), eds("z", 2)}})
	wantDeltaResp(t, keeper.Next(10*time.Second), resource.EndpointType, []string{"z"}, nil)

	back := dialDelta(t, ctx, r.Addr(), "reconnecting", class)
	if err := back.SendDeltaResume(resource.EndpointType, []string{"x", "z"}, held); err != nil {
		t.Fatal(err)
	}
	wantDeltaResp(t, back.Next(10*time.Second), resource.EndpointType, []string{"z"}, []string{"x"})
	if got := back.Held(resource.EndpointType); len(got) != 1 || got["z"] == nil {
		t.Fatalf("the reconnected client holds %d resources, want z alone", len(got))
	}
}

// watched reports whether a stream of class watches the shard of typeURL
// subscribing exactly names, per /debug/shards.
func watched(t *testing.T, r *app.Relay, class, typeURL string, names []string) bool {
	t.Helper()
	s, ok := debugShard(t, r, class, typeURL, names)
	return ok && s.Streams > 0
}

// shardJSON is a shard of /debug/shards.
type shardJSON struct {
	Names     []string `json:"names"`
	Streams   int      `json:"streams"`
	Lingering bool     `json:"lingering"`
}

// debugShard returns class's shard of typeURL subscribing exactly names,
// per /debug/shards; ok is false when there is none.
func debugShard(t *testing.T, r *app.Relay, class, typeURL string, names []string) (_ shardJSON, ok bool) {
	t.Helper()
	var shards map[string][]struct {
		TypeURL string      `json:"type_url"`
		Shards  []shardJSON `json:"shards"`
	}
	getJSON(t, testContext(t), "http://"+r.AdminAddr()+"/debug/shards", &shards)
	for _, ts := range shards[class] {
		if ts.TypeURL != typeURL {
			continue
		}
		for _, s := range ts.Shards {
			if slices.Equal(s.Names, names) {
				return s, true
			}
		}
	}
	return shardJSON{}, false
}

// shortLinger makes the shards of ended streams (and idle classes) linger
// only briefly, for tests of what happens once their names have left the
// class's upstream interest.
func shortLinger() relayOption {
	return withConfig(func(c *app.Config) { c.NodeClasses.Linger = 50 * time.Millisecond })
}
