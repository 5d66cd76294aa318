package relay

import (
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/xds-relay/xds-relay/shard"
)

// emptied is the assignment istiod sends for a service it deleted, instead
// of its removal: the cluster name and no endpoints.
func emptied(t *testing.T, name string) *shard.Resource {
	t.Helper()
	return encode(t, name, &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{}})
}

// istiod's delta EDS never removes an assignment: it removes the Cluster,
// then sends the assignment emptied. A client whose assignment was emptied
// after the Cluster's removal is owed no removal that could follow, so the
// Cluster's removal is not held for delta.parent_removal_wait (an hour
// here: a held removal never arrives). When the endpoints' removal can
// still come (the client holds endpoints, or held them emptied before the
// Cluster went), the Cluster's removal still waits for it.
func TestDeltaParentRemovalNotHeldForEmptiedChild(t *testing.T) {
	t.Run("cluster removed, then endpoints emptied", func(t *testing.T) {
		h, c := orderSetup(t, time.Hour)
		applyDelta(h.class, ClusterType, nil, []string{"B"})
		c.fence() // the client holds b-eds's endpoints: B's removal waits
		eb := emptied(t, "b-eds")
		applyDelta(h.class, EndpointType, []*shard.Resource{eb}, nil)
		wantDelta(t, c.nextOf(EndpointType), nil, eb)
		wantDelta(t, c.nextOf(ClusterType), []string{"B"})
	})
	t.Run("endpoints emptied before: the removal still waits for theirs", func(t *testing.T) {
		// A cluster without endpoints, then removed with them
		// (go-control-plane sends both removals, in either order).
		h, c := orderSetup(t, time.Hour)
		eb := emptied(t, "b-eds")
		applyDelta(h.class, EndpointType, []*shard.Resource{eb}, nil)
		c.ack(c.nextOf(EndpointType))
		applyDelta(h.class, ClusterType, nil, []string{"B"})
		c.fence()
		applyDelta(h.class, EndpointType, nil, []string{"b-eds"})
		wantDelta(t, c.nextOf(EndpointType), []string{"b-eds"})
		wantDelta(t, c.nextOf(ClusterType), []string{"B"})
	})
	t.Run("endpoints held: the removal still waits for theirs", func(t *testing.T) {
		h, c := orderSetup(t, time.Hour)
		applyDelta(h.class, ClusterType, nil, []string{"A", "B"})
		c.fence()
		ea := emptied(t, "A") // A's assignment emptied; b-eds keeps its endpoints
		applyDelta(h.class, EndpointType, []*shard.Resource{ea}, nil)
		wantDelta(t, c.nextOf(EndpointType), nil, ea)
		wantDelta(t, c.nextOf(ClusterType), []string{"A"})
		c.fence() // B's removal still waits
		applyDelta(h.class, EndpointType, nil, []string{"b-eds"})
		wantDelta(t, c.nextOf(EndpointType), []string{"b-eds"})
		wantDelta(t, c.nextOf(ClusterType), []string{"B"})
	})
}

// Only an assignment without any endpoints is emptied; a locality without
// endpoints, or undecodable bytes, is not.
func TestEmptiedAssignment(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    *shard.Resource
		want bool
	}{
		{"no endpoints", emptied(t, "a"), true},
		{"a locality", deltaResource(t, EndpointType, "a", 1), false},
		{"named endpoints", encode(t, "a", &endpointv3.ClusterLoadAssignment{ClusterName: "a",
			NamedEndpoints: map[string]*endpointv3.Endpoint{"e": {}}}), false},
		{"undecodable", &shard.Resource{Name: "a", Any: []byte{0x12, 0x05, 0x01}}, false},
	} {
		if got := emptiedAssignment(tc.r); got != tc.want {
			t.Errorf("%s: emptied %v, want %v", tc.name, got, tc.want)
		}
	}
}
