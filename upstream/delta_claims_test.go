package upstream

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// TestDeltaNewStreamClaimsNamesItLacks: a ClusterLoadAssignment the class
// held, unsubscribed and then deleted upstream, is wanted again within
// resubscribeWindow, so it is asked on a new stream (resubscribeRestart).
// go-control-plane never answers a subscription to a name that does not
// exist, so the new stream's first request claims it at the empty version:
// the snapshot cache then reports it removed, and the shard knows it is
// absent. Without the claim the shard would keep it unknown for good, and a
// delta client holding it from a response that crossed its unsubscription
// would never be told it was deleted (conformance
// snapshot-ads-delta-crossed-resubscribe.json, seed 8003038).
func TestDeltaNewStreamClaimsNamesItLacks(t *testing.T) {
	cp := startCP(t, xdstest.SnapshotADS)
	if err := cp.Set(xdstype.Endpoint.URL, xdstest.Resource(xdstype.Endpoint.URL, "a", 1)); err != nil {
		t.Fatal(err)
	}
	class := newCPClass(t, cp, true, nil)
	first := newServedLog()
	sh := subscribe(t, class, xdstype.Endpoint.URL, shard.NewSubscription([]string{"a"}, false), first)
	first.await(t, "a", holds("a"))

	class.Unsubscribe(sh, first) // -[a]: the class drops a
	awaitDeltaRequest(t, cp, func(r *deltaRequest) bool {
		return r.typeURL == xdstype.Endpoint.URL && slices.Equal(r.unsub, []string{"a"})
	})
	awaitDropped(t, class, xdstype.Endpoint.URL)
	if err := cp.Delete(xdstype.Endpoint.URL, "a"); err != nil {
		t.Fatal(err)
	}

	again := newServedLog()
	subscribe(t, class, xdstype.Endpoint.URL, shard.NewSubscription([]string{"a"}, false), again)
	r := awaitDeltaRequest(t, cp, func(r *deltaRequest) bool {
		return r.typeURL == xdstype.Endpoint.URL && slices.Equal(r.sub, []string{"a"})
	})
	if want := map[string]string{"a": ""}; !maps.Equal(r.initial, want) {
		t.Fatalf("the new stream's first request claims %v, want %v: a name the class lacks is claimed at no version", r.initial, want)
	}
	again.awaitResponse(t, "a known absent", func(r *shard.Response) bool {
		return len(r.Names) == 0 && len(r.Unknown) == 0 && r.AbsenceKnown
	})
}

// deltaRequest is what a test reads of a delta request cp received.
type deltaRequest struct {
	typeURL    string
	sub, unsub []string
	initial    map[string]string
}

// awaitDeltaRequest waits until cp has received a delta request satisfying
// ok, and returns the last such.
func awaitDeltaRequest(t *testing.T, cp *xdstest.ControlPlane, ok func(*deltaRequest) bool) *deltaRequest {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, delta := cp.Requests()
		for _, r := range slices.Backward(delta) {
			dr := &deltaRequest{typeURL: r.GetTypeUrl(), sub: r.GetResourceNamesSubscribe(),
				unsub: r.GetResourceNamesUnsubscribe(), initial: r.GetInitialResourceVersions()}
			if ok(dr) {
				return dr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the control plane never received the request; received %d delta requests", len(delta))
		}
		time.Sleep(5 * time.Millisecond) // polling the control plane's record, bounded above
	}
}

// awaitDropped waits until class holds no resource of typeURL: the class
// stream told the upstream it wants none, and the class dropped them.
func awaitDropped(t *testing.T, class *shard.Class, typeURL string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		i := slices.IndexFunc(class.Status(), func(s shard.TableStatus) bool { return s.TypeURL == typeURL })
		if i < 0 || class.Status()[i].Resources == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the class still holds %s resources", typeURL)
		}
		time.Sleep(5 * time.Millisecond) // polling the class's status, bounded above
	}
}
