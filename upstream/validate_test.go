package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/store"
	"github.com/xds-relay/xds-relay/shard/wire"
)

const clusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

func TestValidatorRejects(t *testing.T) {
	good := xdstest.AnyBytes(&clusterv3.Cluster{Name: "a"})
	// A Cluster whose name holds invalid UTF-8: well-formed on the wire, but
	// not a decodable Cluster.
	badUTF8 := wire.AppendAny(nil, clusterType, []byte{0x0a, 0x02, 0xff, 0xfe})
	tests := []struct {
		name string
		raws [][]byte
		want string
	}{
		{"type mismatch", [][]byte{xdstest.AnyBytes(&endpointv3.ClusterLoadAssignment{ClusterName: "a"})}, "does not match the response type_url"},
		{"duplicate names", [][]byte{good, xdstest.AnyBytes(&clusterv3.Cluster{Name: "a", AltStatName: "x"})}, `resources[1]: duplicate resource name "a"`},
		{"no name", [][]byte{xdstest.AnyBytes(&clusterv3.Cluster{AltStatName: "x"})}, "resources[0]: resource has no name"},
		{"malformed any", [][]byte{{0x0a, 0x10, 'x'}}, "resources[0]: malformed google.protobuf.Any"},
		{"undecodable resource", [][]byte{badUTF8}, "undecodable envoy.config.cluster.v3.Cluster"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cands, _, err := unwrapSotW(tc.raws)
			if err == nil {
				_, err = newValidator().resources(clusterType, cands)
			}
			var rej *RejectError
			if !errors.As(err, &rej) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a RejectError containing %q", err, tc.want)
			}
		})
	}
}

func TestValidatorAcceptsAndCopies(t *testing.T) {
	raw := xdstest.AnyBytes(&clusterv3.Cluster{Name: "a"})
	out, err := newValidator().resources(clusterType, []candidate{{raw: raw}})
	if err != nil || len(out) != 1 || out[0].Name != "a" {
		t.Fatalf("got %v, %v", out, err)
	}
	raw[len(raw)-1] ^= 0xff
	if out[0].Any[len(out[0].Any)-1] == raw[len(raw)-1] {
		t.Fatal("resource aliases the receive buffer")
	}
}

// Equal jitter: every wait is at least half its base, at most the base.
func TestBackoffBounds(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	for n := 0; n < 20; n++ {
		want := b.Initial << n
		if want > b.Max || want <= 0 {
			want = b.Max
		}
		for i := 0; i < 50; i++ {
			if d := b.Delay(n); d < want/2 || d > want {
				t.Fatalf("Delay(%d) = %v, want in [%v, %v]", n, d, want/2, want)
			}
		}
	}
}

// Aliases from a delta upstream are kept, and are part of the content hash.
func TestValidatorKeepsAliases(t *testing.T) {
	raw := xdstest.AnyBytes(&clusterv3.Cluster{Name: "a"})
	plain, err := newValidator().resources(clusterType, []candidate{{raw: raw}})
	if err != nil {
		t.Fatal(err)
	}
	aliased, err := newValidator().resources(clusterType, []candidate{{raw: raw, aliases: []string{"alias-a"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(aliased[0].Aliases()) != 1 || aliased[0].Aliases()[0] != "alias-a" || aliased[0].Hash == plain[0].Hash {
		t.Fatalf("aliased resource = %+v (plain hash %x)", aliased[0], plain[0].Hash)
	}
}

// A resource the store holds (for this class or another) is not decoded or
// copied again: the validator hands out the held one. Only its exact bytes
// find it; other bytes are decoded and copied.
func TestValidatorUsesHeldResources(t *testing.T) {
	held := store.New()
	v := &validator{store: held}
	raw := xdstest.AnyBytes(edsClusterNamed("a", "a-eds"))
	first, err := v.resources(clusterType, []candidate{{raw: raw}})
	if err != nil {
		t.Fatal(err)
	}
	held.Acquire(first[0])
	again, err := (&validator{store: held}).resources(clusterType, []candidate{{raw: bytes.Clone(raw)}})
	if err != nil || again[0] != first[0] {
		t.Fatalf("same bytes again: %p, %v; want the held %p", again[0], err, first[0])
	}
	changed := xdstest.AnyBytes(edsClusterNamed("a", "b-eds"))
	other, err := v.resources(clusterType, []candidate{{raw: changed}})
	if err != nil || other[0] == first[0] || other[0].Children()[0] != "b-eds" {
		t.Fatalf("changed bytes: %+v, %v; want a new resource with its own children", other[0], err)
	}
	// Held bytes are taken as checked: these (not a decodable Cluster)
	// would be rejected if decoded.
	bad := wire.AppendAny(nil, clusterType, []byte{0x0a, 0x02, 0xff, 0xfe})
	if _, err := v.resources(clusterType, []candidate{{raw: bad}}); err == nil {
		t.Fatal("undecodable resource accepted")
	}
	held.Acquire(&shard.Resource{Name: "\xff\xfe", Any: bad, Hash: dedup.ResourceHashFull(bad, nil, nil)})
	if _, err := v.resources(clusterType, []candidate{{raw: bad}}); err != nil {
		t.Fatalf("held resource decoded again: %v", err)
	}
}

// A held resource is found by its name too: the store's entry for the same
// bytes under another name is not handed out for them.
func TestValidatorHeldNameMustMatch(t *testing.T) {
	held := store.New()
	raw := xdstest.AnyBytes(&clusterv3.Cluster{Name: "a"})
	impostor := &shard.Resource{Name: "b", Any: raw, Hash: dedup.ResourceHashFull(raw, nil, nil)}
	held.Acquire(impostor)
	out, err := (&validator{store: held}).resources(clusterType, []candidate{{raw: raw}})
	if err != nil || out[0] == impostor || out[0].Name != "a" {
		t.Fatalf("got %+v, %v; want a resource of its own named a", out[0], err)
	}
}

// Validating a response whose resources are all held allocates nothing per
// resource: not their names, type URLs or copies.
func TestValidatorHeldAllocations(t *testing.T) {
	held := store.New()
	v := &validator{store: held}
	cands := make([]candidate, 100)
	for i := range cands {
		cands[i] = candidate{raw: xdstest.AnyBytes(edsClusterNamed(fmt.Sprintf("c%d", i), "eds"))}
	}
	first, err := v.resources(clusterType, cands)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range first {
		held.Acquire(r)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if out, err := v.resources(clusterType, cands); err != nil || out[0] != first[0] {
			t.Fatalf("got %p, %v; want the held %p", out[0], err, first[0])
		}
	})
	if allocs > 4 {
		t.Fatalf("validating 100 held resources allocates %v times, want at most 4 (the response's slice and name set)", allocs)
	}
}

// A pooled scratch holds only the response it was last given: each of
// several responses handled one after the other validates to exactly its
// own resources, a rejected one in between included.
func TestSotwScratchHoldsOneResponse(t *testing.T) {
	response := func(names ...string) []byte {
		resp := &discoveryv3.DiscoveryResponse{TypeUrl: clusterType}
		for _, n := range names {
			a, err := anypb.New(&clusterv3.Cluster{Name: n})
			if err != nil {
				t.Fatal(err)
			}
			resp.Resources = append(resp.Resources, a)
		}
		b, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	v := &validator{store: store.New()}
	steps := []struct {
		resp []byte
		want []string // nil: rejected
	}{
		{response("a", "b", "c"), []string{"a", "b", "c"}},
		{response("d"), []string{"d"}},
		{response("e", "e"), nil},
		{response("f", "a"), []string{"f", "a"}},
		{response(), []string{}},
	}
	for i, st := range steps {
		sc := getSotwScratch()
		if err := wire.ParseResponseInto(st.resp, &sc.resp); err != nil {
			t.Fatal(err)
		}
		_, err := sc.validate(v)
		var got []string
		for _, r := range sc.out {
			got = append(got, r.Name)
		}
		switch {
		case st.want == nil && err == nil:
			t.Fatalf("step %d: accepted %v, want rejected", i, got)
		case st.want != nil && (err != nil || !slices.Equal(got, st.want)):
			t.Fatalf("step %d: got %v, %v; want %v", i, got, err, st.want)
		}
		sc.release()
	}
}
