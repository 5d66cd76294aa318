package relay

import (
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// ADS order must hold when the stream's writer is behind: while a slow client
// holds up the writer, the class changes CDS (1), then EDS (1), then CDS (2).
// A response carrying CDS update 2 must not reach the client before the one
// carrying EDS update 1, which happened earlier (make-before-break: CDS 2 may
// remove a cluster that only stops being used with update 1), nor may EDS 1
// arrive before CDS 1 (which may add the cluster EDS 1 is for).
func TestADSOrderWithSlowClient(t *testing.T) {
	h := newHarness(t)
	s := h.slowADS(t)
	h.apply(ListenerType, true, resource(t, ListenerType, "L", 0))
	h.apply(ClusterType, true, resource(t, ClusterType, "A", 0))
	h.apply(EndpointType, true, resource(t, EndpointType, "A", 0))
	for _, req := range []*request{
		{Node: h.node, TypeUrl: ListenerType},
		{Node: h.node, TypeUrl: ClusterType},
		{Node: h.node, TypeUrl: EndpointType, ResourceNames: []string{"A"}},
	} {
		if err := s.Send(req); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
	}

	// Two large listener pushes: the first exhausts the stream's write quota,
	// the writer blocks sending the second until the client reads.
	big := func(v string) {
		h.apply(ListenerType, true, encode(t, "L", &listenerv3.Listener{Name: "L", StatPrefix: strings.Repeat("x", 1<<20) + v}))
	}
	pushes := func(n int) func() bool {
		return func() bool { return h.typeStatus(t, ListenerType).Pushes == n }
	}
	big("1")
	eventually(t, "the first large push", pushes(2))
	big("2")
	eventually(t, "the second large push to be taken by the writer", pushes(3))

	h.apply(ClusterType, false, resource(t, ClusterType, "A", 1))
	h.apply(EndpointType, false, resource(t, EndpointType, "A", 1))
	h.apply(ClusterType, false, resource(t, ClusterType, "A", 2))

	want := map[string]*anypb.Any{}
	for _, r := range []struct {
		typeURL string
		v       int
	}{{ClusterType, 1}, {EndpointType, 1}, {ClusterType, 2}} {
		a := &anypb.Any{}
		if err := proto.Unmarshal(resource(t, r.typeURL, "A", r.v).Any, a); err != nil {
			t.Fatal(err)
		}
		want[short(r.typeURL)+string(rune('0'+r.v))] = a
	}
	var seq []string
	for !contains(seq, "Cluster2") || !contains(seq, "ClusterLoadAssignment1") {
		resp, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.TypeUrl == ListenerType {
			continue
		}
		label := short(resp.TypeUrl) + "?"
		for k, a := range want {
			if strings.HasPrefix(k, short(resp.TypeUrl)) && len(resp.Resources) == 1 && proto.Equal(resp.Resources[0], a) {
				label = k
			}
		}
		seq = append(seq, label)
	}
	// The only order-preserving delivery: CDS 1, EDS 1, CDS 2. Coalescing
	// CDS 1 into CDS 2 is fine only if nothing of another type came between.
	if i, j := index(seq, "Cluster2"), index(seq, "ClusterLoadAssignment1"); i < j {
		t.Fatalf("responses by update: %v; CDS update 2 was delivered before the earlier EDS update 1", seq)
	}
	if len(seq) != 3 || seq[0] != "Cluster1" {
		t.Fatalf("responses by update: %v; want [Cluster1 ClusterLoadAssignment1 Cluster2]", seq)
	}
}

func contains(s []string, x string) bool { return index(s, x) >= 0 }

func index(s []string, x string) int {
	for i, v := range s {
		if v == x {
			return i
		}
	}
	return -1
}
