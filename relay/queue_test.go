package relay

import (
	"testing"

	"github.com/xds-relay/xds-relay/shard"
)

// The per-stream queue coalesces only adjacent responses of one type, and a
// queue past maxPending collapses to one entry per type, latest response,
// first position.
func TestQueueCoalescingAndCollapse(t *testing.T) {
	cds := &typeSub{typeURL: ClusterType, shard: &shard.Shard{TypeURL: ClusterType}}
	eds := &typeSub{typeURL: EndpointType, shard: &shard.Shard{TypeURL: EndpointType}}
	s := &sotwStream{types: map[string]*typeSub{ClusterType: cds, EndpointType: eds}}
	resp := func(v string) *shard.Response { return &shard.Response{Version: v} }
	s.mu.Lock()
	defer s.mu.Unlock()

	s.enqueueLocked(cds, cds.shard, resp("c1"))
	s.enqueueLocked(cds, cds.shard, resp("c2")) // adjacent: supersedes c1
	s.enqueueLocked(eds, eds.shard, resp("e1"))
	s.enqueueLocked(cds, cds.shard, resp("c3")) // after e1: must not supersede c2
	got := versions(s.pending)
	if want := []string{"c2", "e1", "c3"}; !equal(got, want) {
		t.Fatalf("queue = %v, want %v", got, want)
	}

	for i := 0; s.collapses == 0 && i < 10*maxPending; i++ {
		if i%2 == 0 {
			s.enqueueLocked(eds, eds.shard, resp("e-last"))
		} else {
			s.enqueueLocked(cds, cds.shard, resp("c-last"))
		}
	}
	if s.collapses != 1 {
		t.Fatalf("collapses = %d, want 1", s.collapses)
	}
	if got, want := versions(s.pending), []string{"c-last", "e-last"}; !equal(got, want) {
		t.Fatalf("collapsed queue = %v, want %v (first positions, latest responses)", got, want)
	}
}

func versions(q []pendingResponse) []string {
	out := make([]string, len(q))
	for i, e := range q {
		out[i] = e.resp.Version
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
