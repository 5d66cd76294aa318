package relay

import (
	"slices"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
)

// aliased is a VirtualHost resource known also by aliases (as a delta
// upstream's Resource.aliases gives them, e.g. on-demand VHDS's
// "route-config/host").
func aliased(t *testing.T, name string, domain string, aliases ...string) *shard.Resource {
	t.Helper()
	r := encode(t, name, &routev3.VirtualHost{Name: name, Domains: []string{domain}})
	r.Rare = shard.NewRare(aliases, nil, "")
	r.Hash = dedup.ResourceHashFull(r.Any, nil, aliases)
	return r
}

// Spec "Resource names": a client may subscribe by alias; the response
// carries the resource under its name with its aliases; subscribing to the
// alias again re-sends it; a change is pushed; unsubscribing the alias sends
// nothing; an alias nothing has is reported removed once absence is known.
func TestDeltaSubscribeByAlias(t *testing.T) {
	h := newHarness(t)
	vh := aliased(t, "rc/vh-1", "one.example.com", "rc/one.example.com")
	h.class.ApplyUpdate(VirtualHostType, shard.Update{Resources: []*shard.Resource{vh}, Kind: shard.UpdateIncremental})

	c := h.deltaADS(t)
	c.subscribe(VirtualHostType, "rc/one.example.com")
	got := c.nextOf(VirtualHostType)
	if names := deltaNames(got); !slices.Equal(names, []string{"rc/vh-1"}) || len(got.RemovedResources) != 0 {
		t.Fatalf("subscribing by alias got %v removed %v, want [rc/vh-1]", names, got.RemovedResources)
	}
	if a := got.Resources[0].GetAliases(); !slices.Equal(a, []string{"rc/one.example.com"}) {
		t.Fatalf("aliases = %v", a)
	}
	c.ack(got)

	// Subscribing again by the alias re-sends it (the client may have
	// forgotten it).
	c.subscribe(VirtualHostType, "rc/one.example.com")
	again := c.nextOf(VirtualHostType)
	if names := deltaNames(again); !slices.Equal(names, []string{"rc/vh-1"}) {
		t.Fatalf("re-subscribing by alias got %v", names)
	}
	c.ack(again)

	// A change of the resource reaches the alias subscriber.
	vh2 := aliased(t, "rc/vh-1", "uno.example.com", "rc/one.example.com")
	h.class.ApplyUpdate(VirtualHostType, shard.Update{Resources: []*shard.Resource{vh2}, Kind: shard.UpdateIncremental})
	changed := c.nextOf(VirtualHostType)
	if names := deltaNames(changed); !slices.Equal(names, []string{"rc/vh-1"}) || changed.Resources[0].GetVersion() == got.Resources[0].GetVersion() {
		t.Fatalf("change got %v", changed)
	}
	c.ack(changed)

	// An alias nothing answers to, with absence known: reported removed
	// under the name the client used.
	c.subscribe(VirtualHostType, "rc/none.example.com")
	missing := c.nextOf(VirtualHostType)
	if len(missing.Resources) != 0 || !slices.Equal(missing.RemovedResources, []string{"rc/none.example.com"}) {
		t.Fatalf("unknown alias got %v removed %v, want removed [rc/none.example.com]", deltaNames(missing), missing.RemovedResources)
	}
	c.ack(missing)

	// Unsubscribing the alias sends nothing, and later changes are not
	// pushed; the fence proves nothing came before it.
	c.unsubscribe(VirtualHostType, "rc/one.example.com")
	c.fence() // requests are handled in order: the unsubscription is in
	h.class.ApplyUpdate(VirtualHostType, shard.Update{Resources: []*shard.Resource{aliased(t, "rc/vh-1", "eins.example.com", "rc/one.example.com")}, Kind: shard.UpdateIncremental})
	c.fence()
}
