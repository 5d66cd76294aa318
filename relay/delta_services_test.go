package relay

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
)

// Every per-type delta service, VHDS included, serves its type.
func TestDeltaPerTypeServices(t *testing.T) {
	h := newHarness(t)
	for _, tc := range perTypeServices {
		t.Run(short(tc.typeURL), func(t *testing.T) {
			c := h.deltaPerType(t, tc.typeURL)
			c.subscribe(tc.typeURL, tc.names...)
			r1 := deltaResource(t, tc.typeURL, "r", 1)
			h.apply(tc.typeURL, true, r1, deltaResource(t, tc.typeURL, "other", 1))
			got := c.nextOf(tc.typeURL)
			if tc.names == nil || tc.names[0] == "*" {
				wantDelta(t, got, nil, r1, deltaResource(t, tc.typeURL, "other", 1))
			} else {
				wantDelta(t, got, nil, r1)
			}
			wantProto(t, got.Resources[0].Resource, tc.want)
			c.ack(got)

			r2 := deltaResource(t, tc.typeURL, "r", 2)
			h.apply(tc.typeURL, true, r2, deltaResource(t, tc.typeURL, "other", 1))
			got = c.nextOf(tc.typeURL)
			wantDelta(t, got, nil, r2)
			// Later requests may leave type_url empty on a per-type stream.
			c.send(&deltaRequest{ResponseNonce: got.Nonce})
			r3 := deltaResource(t, tc.typeURL, "r", 3)
			h.apply(tc.typeURL, true, r3, deltaResource(t, tc.typeURL, "other", 1))
			wantDelta(t, c.nextOf(tc.typeURL), nil, r3)
		})
	}
}

// Two delta clients in sync on one wildcard get the same response for a
// change, nonce aside, from the one shard they share.
func TestDeltaSharedEncoding(t *testing.T) {
	h := newHarness(t)
	all := manyClusters(t, 20, 1, nil)
	h.apply(ClusterType, true, all...)

	a, b := h.deltaADS(t), h.deltaPerType(t, ClusterType)
	b.node = &corev3.Node{Id: "node-2", Cluster: h.node.Cluster} // another node, same class
	a.subscribe(ClusterType)
	b.subscribe(ClusterType, "*")
	ra, rb := a.nextOf(ClusterType), b.nextOf(ClusterType)
	sameBody(t, ra, rb)
	a.ack(ra)
	b.ack(rb)
	if s := h.shards(ClusterType); len(s) != 1 || s[0].Streams != 2 {
		t.Fatalf("CDS shards %+v, want one with 2 streams", s)
	}

	for i, over := range []map[string]int{{"c003": 2}, {"c003": 2, "c011": 2, "c019": 3}} {
		h.apply(ClusterType, true, manyClusters(t, 20, 1, over)...)
		ra, rb := a.nextOf(ClusterType), b.nextOf(ClusterType)
		if len(ra.Resources) != i+1 || len(ra.RemovedResources) != 0 {
			t.Fatalf("change %d: %v sent, %v removed, want %d changed resources", i, deltaNames(ra), ra.RemovedResources, i+1)
		}
		sameBody(t, ra, rb)
		a.ack(ra)
		b.ack(rb)
	}
	h.apply(ClusterType, true, manyClusters(t, 19, 1, map[string]int{"c003": 2, "c011": 2})...) // c019 deleted
	ra, rb = a.nextOf(ClusterType), b.nextOf(ClusterType)
	wantDelta(t, ra, []string{"c019"})
	sameBody(t, ra, rb)
}

// A SotW and a delta client of the same class and subscription share a
// shard, and each gets a change in its own form.
func TestDeltaAndSotWShareShard(t *testing.T) {
	h, ep := newEndpointHarness(t, "A", "B", "C")

	s := h.ads(t)
	s.subscribe(EndpointType, "A", "B")
	wantResources(t, s.nextOf(EndpointType), ep("A", 1), ep("B", 1))
	d := h.deltaADS(t)
	d.subscribe(EndpointType, "B", "A")
	wantDelta(t, d.nextOf(EndpointType), nil, ep("A", 1), ep("B", 1))
	if sh := h.shards(EndpointType); len(sh) != 1 || sh[0].Streams != 2 {
		t.Fatalf("EDS shards %+v, want one with 2 streams", sh)
	}

	h.apply(EndpointType, false, ep("A", 2))
	wantResources(t, s.nextOf(EndpointType), ep("A", 2), ep("B", 1))
	wantDelta(t, d.nextOf(EndpointType), nil, ep("A", 2))
	h.apply(EndpointType, false, ep("C", 2)) // outside both subscriptions
	h.apply(EndpointType, false, ep("B", 2))
	wantResources(t, s.nextOf(EndpointType), ep("A", 2), ep("B", 2))
	wantDelta(t, d.nextOf(EndpointType), nil, ep("B", 2))
}

// Malformed requests end the stream with InvalidArgument naming the field.
func TestDeltaBadRequests(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		name    string
		service string // "" for ADS
		reqs    []*deltaRequest
		field   string
		code    codes.Code
	}{
		{"no node", "", []*deltaRequest{{TypeUrl: ClusterType}}, "node", codes.InvalidArgument},
		{"no node per-type", EndpointType, []*deltaRequest{{ResourceNamesSubscribe: []string{"A"}}}, "node", codes.InvalidArgument},
		{"no node VHDS", VirtualHostType, []*deltaRequest{{ResourceNamesSubscribe: []string{"A"}}}, "node", codes.InvalidArgument},
		{"ADS without type_url", "", []*deltaRequest{{Node: h.node}}, "type_url", codes.InvalidArgument},
		{"ADS without type_url later", "", []*deltaRequest{{Node: h.node, TypeUrl: ClusterType}, {}}, "type_url", codes.InvalidArgument},
		{"mismatched type_url", ClusterType, []*deltaRequest{{Node: h.node, TypeUrl: EndpointType}}, "type_url", codes.InvalidArgument},
		{"locators subscribe", "", []*deltaRequest{{Node: h.node, TypeUrl: ClusterType, ResourceLocatorsSubscribe: []*discoveryv3.ResourceLocator{{Name: "A"}}}}, "resource_locators_subscribe", codes.Unimplemented},
		{"locators unsubscribe later", ClusterType, []*deltaRequest{{Node: h.node}, {ResourceLocatorsUnsubscribe: []*discoveryv3.ResourceLocator{{Name: "A"}}}}, "resource_locators_unsubscribe", codes.Unimplemented},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h.openDeltaClient(t, h.conn, tc.service).wantRefused(tc.reqs, tc.code, tc.field)
		})
	}
}
