package upstream

import (
	"fmt"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/store"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// clusterAny is the encoded Any of a cluster named name, v telling versions
// of it apart.
func clusterAny(name string, v int) []byte {
	return xdstest.AnyBytes(&clusterv3.Cluster{Name: name, ConnectTimeout: &durationpb.Duration{Seconds: int64(1 + v)}})
}

// wrapped is raw in a Resource wrapper with a TTL.
func wrapped(t *testing.T, name string, raw []byte) []byte {
	t.Helper()
	ttl, err := proto.Marshal(durationpb.New(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return wire.WrappedAny(name, raw, ttl)
}

// response encodes a CDS response of raws, as they are (malformed ones
// too).
func response(t *testing.T, raws ...[]byte) []byte {
	t.Helper()
	var b []byte
	for _, raw := range raws {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, raw)
	}
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	return protowire.AppendString(b, clusterType)
}

// validated is what a validator makes of a response: names, their Any
// bytes, TTLs, or the error. A response that passes is applied to the
// class c, if any, as a stream does.
func validated(t *testing.T, v *validator, c *shard.Class, b []byte) (got []string, fast bool, err error) {
	t.Helper()
	sc := getSotwScratch()
	defer sc.release()
	if err := wire.ParseResponseInto(b, &sc.resp); err != nil {
		t.Fatal(err)
	}
	beats, err := sc.validate(v)
	for _, r := range sc.out {
		got = append(got, fmt.Sprintf("%s %x ttl=%x", r.Name, r.Any, r.TTL()))
	}
	// The full path unwraps every resource into a candidate.
	fast = err == nil && len(sc.resp.Resources) > 0 && len(sc.cands) == 0
	if c != nil && err == nil {
		c.ApplyUpdate(clusterType, shard.Update{Kind: shard.UpdateFull, Resources: sc.out, Heartbeats: beats, Asked: true, Distinct: true})
	}
	return got, fast, err
}

// classValidator is a class's validator, as its upstream stream has it,
// the class watching every cluster.
func classValidator(t *testing.T, name string) (*validator, *shard.Class) {
	t.Helper()
	c := storeClasses(t)(name)
	watchAll(t, c)
	return &validator{store: c.Store()}, c
}

// The fast path's results are the full path's: a validator that finds what
// the store holds and one that validates each response afresh agree on
// every response of a sequence (resources, order, rejections and their
// reasons), whichever path the first took.
func TestSotwFastPathAgreesWithFullPath(t *testing.T) {
	a, b, c := clusterAny("a", 1), clusterAny("b", 1), clusterAny("c", 1)
	b2 := clusterAny("b", 2)
	many := make([][]byte, 0, 2*maxChanged)
	for i := range 2 * maxChanged {
		many = append(many, clusterAny(fmt.Sprintf("m%d", i), 1))
	}
	eds := xdstest.AnyBytes(&endpointv3.ClusterLoadAssignment{ClusterName: "x"})
	steps := []struct {
		name string
		resp []byte
	}{
		{"first", response(t, a, b, c)},
		{"same, reordered", response(t, c, a, b)},
		{"one changed", response(t, b2, c, a)},
		{"one removed", response(t, a, b2)},
		{"one added", response(t, c, a, b2)},
		{"the same bytes twice", response(t, a, c, a)},
		{"back to normal", response(t, a, b2, c)},
		{"a changed one named as an unchanged one", response(t, a, b2, clusterAny("a", 3))},
		{"a changed one of another type", response(t, a, b2, eds)},
		{"a malformed one", response(t, a, b2, []byte{0x0a, 0x10, 'x'})},
		{"one without a name", response(t, a, b2, xdstest.AnyBytes(&clusterv3.Cluster{AltStatName: "x"}))},
		{"a wrapped one", response(t, a, wrapped(t, "b", b2), c)},
		{"unwrapped again", response(t, a, b2, c)},
		{"many changed", response(t, append([][]byte{a}, many...)...)},
		{"many the same", response(t, append(slices.Clone(many), a)...)},
		{"empty", response(t)},
		{"after empty", response(t, a)},
	}
	v, class := classValidator(t, "fast")
	fastRuns := 0
	for _, st := range steps {
		got, fast, err := validated(t, v, class, st.resp)
		want, _, wantErr := validated(t, &validator{store: store.New()}, nil, st.resp)
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() || !slices.Equal(got, want) {
			t.Fatalf("%s: got %q, %v; the full path gives %q, %v", st.name, got, err, want, wantErr)
		}
		if fast {
			fastRuns++
		}
	}
	if fastRuns < 5 {
		t.Fatalf("the fast path validated %d responses, want at least 5: it was not exercised", fastRuns)
	}
}

// What is held is handed out only for the same bytes and when plain: a
// held resource of the name with other bytes, or with a TTL, or of the
// same hash (a collision) is not; one held, whoever sent it, is, without
// a check.
func TestSotwFastPathHandsOutOnlyTheSame(t *testing.T) {
	a, b, b2 := clusterAny("a", 1), clusterAny("b", 1), clusterAny("b", 2)
	v, c := classValidator(t, "same")
	// Held as another source (a file, a former stream) installed them, b
	// with a TTL.
	heldA := &shard.Resource{Name: "a", Any: a, Hash: dedup.ResourceHash(a)}
	ttl := []byte{8, 5}
	// b's hash is that of its bytes alone, as a collision would make it.
	heldB := &shard.Resource{Name: "b", Any: b, Rare: shard.NewRare(nil, ttl, ""), Hash: dedup.ResourceHash(b)}
	impostor := &shard.Resource{Name: "impostor", Any: clusterAny("impostor", 1), Hash: dedup.ResourceHash(b2)}
	c.Apply(clusterType, []*shard.Resource{heldA, heldB, impostor}, true)
	for _, tc := range []struct {
		name  string
		resp  []byte
		wantB string
	}{
		{"b plain where b has a TTL", response(t, a, b), fmt.Sprintf("b %x ttl=", b)},
		{"b of other bytes, an impostor's hash", response(t, a, b2), fmt.Sprintf("b %x ttl=", b2)},
	} {
		sc := getSotwScratch()
		if err := wire.ParseResponseInto(tc.resp, &sc.resp); err != nil {
			t.Fatal(err)
		}
		if _, err := sc.validate(v); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if sc.out[0] != heldA {
			t.Errorf("%s: a is %p, want the held %p", tc.name, sc.out[0], heldA)
		}
		if r := sc.out[1]; r == heldB || r == impostor || fmt.Sprintf("%s %x ttl=%x", r.Name, r.Any, r.TTL()) != tc.wantB {
			t.Errorf("%s: b is %s %x ttl=%x, want %s", tc.name, r.Name, r.Any, r.TTL(), tc.wantB)
		}
		sc.release()
	}
}
