package relay

import (
	"slices"
	"testing"

	"github.com/xds-relay/xds-relay/shard"
)

// The per-stream queue coalesces only adjacent responses of one type, and a
// queue past maxPending collapses to one entry per type, latest response,
// first position.
func TestQueueCoalescingAndCollapse(t *testing.T) {
	cds := &sotwTypeSub{typeSubBase: typeSubBase{typeURL: ClusterType, shard: &shard.Shard{TypeURL: ClusterType}}}
	eds := &sotwTypeSub{typeSubBase: typeSubBase{typeURL: EndpointType, shard: &shard.Shard{TypeURL: EndpointType}}}
	var q responseQueue[*sotwTypeSub]
	resp := func(v string) *shard.Response { return &shard.Response{Version: v} }

	q.push(cds, cds.shard, resp("c1"), false)
	q.push(cds, cds.shard, resp("c2"), false) // adjacent: supersedes c1
	q.push(eds, eds.shard, resp("e1"), false)
	q.push(cds, cds.shard, resp("c3"), false) // after e1: must not supersede c2
	got := versions(&q)
	if want := []string{"c2", "e1", "c3"}; !slices.Equal(got, want) {
		t.Fatalf("queue = %v, want %v", got, want)
	}

	for i := 0; q.collapses == 0 && i < 10*maxPending; i++ {
		if i%2 == 0 {
			q.push(eds, eds.shard, resp("e-last"), false)
		} else {
			q.push(cds, cds.shard, resp("c-last"), false)
		}
	}
	if q.collapses != 1 {
		t.Fatalf("collapses = %d, want 1", q.collapses)
	}
	// The queue was drained above; EDS was queued first after that.
	if got, want := versions(&q), []string{"e-last", "c-last"}; !slices.Equal(got, want) {
		t.Fatalf("collapsed queue = %v, want %v (first positions, latest responses)", got, want)
	}
}

// versions drains q and returns the queued responses' versions.
func versions(q *responseQueue[*sotwTypeSub]) []string {
	var out []string
	q.drain(func(e queued[*sotwTypeSub]) { out = append(out, e.resp.Version) })
	return out
}
