package upstream

import (
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// TestAskWildcardBehindADSModeSnapshot: go-control-plane's snapshot cache in
// ADS mode answers a named request only when it names every resource of the
// type. A stream's first request for [c1] is answered while the type is
// empty (any names cover nothing); once c3 exists the cache never answers
// [c1] again, so c1's creation would never reach its shard, and no wait can
// tell that silence from "nothing changed" (conformance
// snapshot-ads-sotw-silent-after-answer.json). With AskWildcard the class
// asks for every cluster and selects c1 itself: the shard follows c1, and
// no request names a cluster.
func TestAskWildcardBehindADSModeSnapshot(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(map[bool]string{false: "sotw", true: "delta"}[delta], func(t *testing.T) {
			cp, err := xdstest.StartControlPlane(xdstest.CPOptions{Cache: xdstest.SnapshotADS})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cp.Stop)
			if err := cp.Set(xdstype.Cluster.URL); err != nil { // the type exists, empty
				t.Fatal(err)
			}
			c, err := New(Config{Address: cp.Addr, RelayID: "relay-under-test", Delta: delta, AskWildcard: true,
				Backoff: Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}}, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			class := attachClass(t, c, &corev3.Node{Id: "downstream-1", Cluster: "class-a"})
			c1 := newServedLog()
			subscribe(t, class, xdstype.Cluster.URL, shard.NewSubscription([]string{"c1"}, false), c1)
			c1.await(t, "c1 as absent", holds())

			if err := cp.Set(xdstype.Cluster.URL, xdstest.Resource(xdstype.Cluster.URL, "c3", 1)); err != nil {
				t.Fatal(err)
			}
			if err := cp.Set(xdstype.Cluster.URL, xdstest.Resource(xdstype.Cluster.URL, "c3", 1), xdstest.Resource(xdstype.Cluster.URL, "c1", 2)); err != nil {
				t.Fatal(err)
			}
			c1.await(t, "c1 once created", holds("c1"))

			sotw, deltaReqs := cp.Requests()
			for _, r := range sotw {
				if len(r.GetResourceNames()) != 0 {
					t.Fatalf("SotW request %v names resources; want the legacy wildcard only", r)
				}
			}
			for _, r := range deltaReqs {
				if slices.ContainsFunc(r.GetResourceNamesSubscribe(), func(n string) bool { return n != shard.Wildcard }) {
					t.Fatalf("delta request %v subscribes by name; want %q only", r, shard.Wildcard)
				}
			}
		})
	}
}
