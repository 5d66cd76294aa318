package app_test

import (
	"slices"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// A class's every client leaves; the configuration changes meanwhile; a
// client that then subscribes gets the current state. Found by the bench's
// slow-client run: the relay keeps a legacy wildcard subscription upstream
// when its last client leaves (an empty request would still mean
// "everything"), but its ACKs recorded the empty interest as what was asked,
// so the class dropped the pushed state and then waited for an answer to
// a re-request that go-control-plane, at an unchanged version, never gives:
// the next client was served nothing until the next change. Both downstream
// wildcard forms (the relay asks upstream with the legacy form either way).
// A client of the class subscribed to listeners stays, so the class does not
// linger (a lingering class would keep the CDS shard).
func TestE2EResubscribeAfterIdleGetsCurrentState(t *testing.T) {
	for _, tc := range []struct {
		name  string
		names []string
	}{{"legacy wildcard", nil}, {"explicit wildcard", []string{"*"}}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			m := startMgmt(t, "127.0.0.1:0")
			m.Set(t, "class-a", "v0", clusters("c0"))
			r := startRelay(t, m.Addr, shortLinger()) // the first client's shard goes soon after it

			keeper := dialADS(t, ctx, r.Addr(), "keeper", "class-a")
			keeper.Subscribe(resource.ListenerType)
			awaitWatched(t, ctx, r, "class-a", resource.ListenerType)
			first := dialADS(t, ctx, r.Addr(), "first", "class-a")
			first.Subscribe(cdsType, tc.names...)
			if got := clusterNames(t, first.Next(5*time.Second)); !slices.Equal(got, []string{"c0"}) {
				t.Fatalf("first client got %v", got)
			}
			first.Close()
			eventually(t, ctx, "the class to have no subscriber", func() bool {
				var shards map[string][]struct {
					TypeURL string `json:"type_url"`
					Shards  []any  `json:"shards"`
				}
				getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/shards", &shards)
				for _, ts := range shards["class-a"] {
					if ts.TypeURL == cdsType {
						return len(ts.Shards) == 0
					}
				}
				return false
			})
			m.Set(t, "class-a", "v1", clusters("c0", "c1"))
			// The relay keeps its legacy wildcard subscription upstream, so
			// the idle class takes v1.
			eventually(t, ctx, "the relay to ACK v1", func() bool {
				return upstreamStatus(t, ctx, r, "class-a").Versions[cdsType] == "v1"
			})

			late := dialADS(t, ctx, r.Addr(), "late", "class-a")
			late.Subscribe(cdsType, tc.names...)
			var got []string
			deadline := time.Now().Add(10 * time.Second)
			for !slices.Equal(got, []string{"c0", "c1"}) && time.Now().Before(deadline) {
				if resp, err := late.next(time.Until(deadline)); err == nil {
					got = clusterNamesOf(resp)
				}
			}
			if !slices.Equal(got, []string{"c0", "c1"}) {
				t.Fatalf("a client subscribing after the change holds %v, want [c0 c1]", got)
			}
		})
	}
}
